"""`interplay eval` end to end: real files, the scripted model over real HTTP, the command run as
a real subprocess where the behaviour is the process's (exit codes, signals)."""

from __future__ import annotations

import asyncio
import gc
import io
import json
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from itertools import combinations
from pathlib import Path
from typing import Any, ClassVar

import pytest

import interplay
from interplay import cli
from interplay.config.endpoint import Endpoint
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.run import config, executor, local, results, summary
from interplay.run.episode import LiveEpisodeContext, RunResources
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, survivors
from interplay.values.records import Task

ScriptedFactory = Callable[..., ScriptedModel]

# -- helpers -----------------------------------------------------------------------------------


def relay_handler(user_turns: int = 2, answer: str = "yes",
                  latency_s: float = 0.0) -> Callable[[ScriptedRequest], ScriptedReply]:
    """Plays both sides of the user-sim relay: the user asks ``user_turns`` questions and is
    done; the assistant always answers ``answer``."""

    def handler(req: ScriptedRequest) -> ScriptedReply:
        msgs = req.messages
        system = msgs[0].get("content") if msgs and msgs[0].get("role") == "system" else ""
        n_user = sum(1 for m in msgs if m.get("role") == "user")
        if "role-playing a user" in str(system):
            text = "###DONE###" if n_user > user_turns else f"question {n_user}"
        else:
            text = f"the answer is {answer}"
        return ScriptedReply.text(text, latency_s=latency_s)

    return handler


def write_tasks(path: Path, answers: list[str]) -> Path:
    with path.open("w") as fh:
        for i, answer in enumerate(answers):
            fh.write(json.dumps({"prompt": f"You want to know thing {i}.", "answer": answer})
                     + "\n")
    return path


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interplay.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=_sub_env())


def _sub_env() -> dict[str, str]:
    # Only the builtins: the tests never depend on what else is installed.
    return {**os.environ, "INTERPLAY_LOAD_PLUGINS": ""}


def episodes(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()
            if line.strip()]


def pairs(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted((r["info"]["task_idx"], r["info"]["rollout"]) for r in records)


# -- the command, end to end -------------------------------------------------------------------


@pytest.mark.slow
def test_eval_writes_results_summary_and_report(tmp_path: Path,
                                                scripted_model: ScriptedFactory) -> None:
    model = scripted_model(relay_handler(user_turns=2, answer="yes"))
    tasks = write_tasks(tmp_path / "tasks.jsonl", ["yes", "no", "yes"])
    out = tmp_path / "run"
    proc = run_cli("eval", "user-sim", "-n", "3", "-r", "2", "-c", "3", "-s", "7",
                   "--base-url", model.base_url, "-o", str(out),
                   "--set", f"env.taskset={json.dumps(str(tasks))}")
    assert proc.returncode == 0, proc.stderr

    records = episodes(out)
    assert pairs(records) == [(t, r) for t in range(3) for r in range(2)]
    assert {r["task"]["answer"]: r["reward"] for r in records} == {"yes": 1.0, "no": 0.0}
    assert all(r["info"]["seed"] == config.episode_seed(7, r["info"]["task_idx"],
                                                        r["info"]["rollout"]) for r in records)
    for r in records:
        seats = {t["seat"]: t for t in r["traces"]}
        assert seats["assistant"]["stop_condition"] == "user_done"
        assert r["metrics"]["turns"] == 2.0

    stored = json.loads((out / "config.json").read_text())["config"]
    assert stored["env"]["name"] == "user-sim"
    assert stored["env"]["relay"]["max_turns"] == 6  # the env's default, resolved
    assert stored["seed"] == 7 and stored["rollouts"] == 2

    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 6 and summary["complete"] is True
    assert summary["reward_mean"] == pytest.approx(4 / 6)
    # rewards 1,1,0,0,1,1: sample sd sqrt(4/15), se = sd / sqrt(6)
    assert summary["reward_stderr"] == pytest.approx((4 / 15) ** 0.5 / 6 ** 0.5)
    assert summary["pass_at_k"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(2 / 3)}
    assert summary["pass_hat_k"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(2 / 3)}
    assert summary["stop_conditions"] == {"assistant: user_done": 6, "user: user_closed": 6}
    assert summary["metrics"]["turns"] == 2.0
    assert summary["errors"] == {}
    # 2 assistant turns + 3 user turns per episode
    assert summary["model_calls"] == 30 == len(model.requests)
    tokens = summary["tokens"]
    assert tokens["total_tokens"] == tokens["prompt_tokens"] + tokens["completion_tokens"] > 0

    assert "reward (mean ± se, 6 scored)" in proc.stdout and "pass@2" in proc.stdout
    assert "completed                       6 of 6 (100%)" in proc.stdout
    report = out / "report.html"
    assert f"report: {report}" in proc.stdout
    assert report.is_file() and "<!doctype html>" in report.read_text()


def test_set_overrides_reach_env_and_seats(tmp_path: Path,
                                           scripted_model: ScriptedFactory) -> None:
    model = scripted_model(relay_handler(user_turns=5))
    out = tmp_path / "run"
    code = cli.main(["eval", "user-sim", "-n", "1", "--base-url", model.base_url, "-o", str(out),
                     "--quiet", "--no-report", "--set", "env.relay.max_turns=2",
                     "--set", "seats.assistant.harness=null", "--set", "model.model=m-test"])
    assert code == 0
    (record,) = episodes(out)
    assistant = next(t for t in record["traces"] if t["seat"] == "assistant")
    assert assistant["harness"] == "null"
    assert assistant["stop_condition"] == "max_turns"
    assert record["metrics"]["turns"] == 2.0
    assert {r.body["model"] for r in model.requests} == {"m-test"}


def test_config_file_then_flags_then_set(tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(relay_handler(user_turns=1))
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'n = 1\nrollouts = 3\nseed = 5\n[env]\nname = "user-sim"\n'
                   f'[env.relay]\nmax_turns = 3\n[model]\nbase_url = "{model.base_url}"\n')
    out = tmp_path / "run"
    code = cli.main(["eval", "--config", str(cfg), "-r", "2", "--set", "seed=9", "-o", str(out),
                     "--quiet", "--no-report"])
    assert code == 0
    resolved = json.loads((out / "config.json").read_text())["config"]
    assert (resolved["n"], resolved["rollouts"], resolved["seed"]) == (1, 2, 9)
    assert resolved["env"]["relay"]["max_turns"] == 3
    assert len(episodes(out)) == 2


@pytest.mark.slow
@pytest.mark.parametrize(("args", "expected"), [
    (["user-sim", "--set", "n=x"], "n: expected int, got 'x'"),
    (["no-such-env"], "no-such-env"),
    (["user-sim", "--set", "env.relay.max_turns=x"], "env.relay.max_turns: expected int"),
    (["user-sim", "--set", "env.nope=1"], "env: unknown key nope"),
    (["user-sim", "--set", "seats.nobody.harness=null"], "seats.nobody"),
    (["user-sim", "--set", "seats.assistant.harness=no-such-harness"], "no-such-harness"),
    (["user-sim", "--set", "env.relay.max_turns=0"], "max_turns must be at least 1"),
    (["user-sim", "-r", "0"], "rollouts: must be at least 1"),
])
def test_bad_config_is_one_line_exit_2_before_any_model_call(
        tmp_path: Path, scripted_model: ScriptedFactory, args: list[str], expected: str) -> None:
    model = scripted_model(relay_handler())
    proc = run_cli("eval", *args, "--base-url", model.base_url, "-o", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interplay: error: ")
    assert expected in lines[0]
    assert model.requests == []


@pytest.mark.slow
def test_refuses_to_overwrite_a_run(tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(relay_handler(user_turns=1))
    out = tmp_path / "run"
    base = ["eval", "user-sim", "-n", "1", "--base-url", model.base_url, "-o", str(out),
            "--quiet", "--no-report"]
    assert cli.main(base) == 0
    proc = run_cli(*base)
    assert proc.returncode == 2 and "--resume" in proc.stderr
    assert len(episodes(out)) == 1


# -- resume ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_resume_runs_only_the_missing_pairs_and_tolerates_a_torn_line(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(relay_handler(user_turns=1))
    out = tmp_path / "run"
    assert cli.main(["eval", "user-sim", "-n", "3", "-r", "2", "--base-url", model.base_url,
                     "-o", str(out), "--quiet", "--no-report"]) == 0
    lines = (out / "episodes.jsonl").read_text().splitlines(keepends=True)
    kept = lines[:2]
    torn = lines[2][: len(lines[2]) // 2]
    (out / "episodes.jsonl").write_text("".join(kept) + torn)
    kept_pairs = pairs([json.loads(x) for x in kept])
    calls_before = len(model.requests)

    # Concurrency and output may change on resume; nothing else needs repeating.
    proc = run_cli("eval", "--resume", str(out), "-c", "1")
    assert proc.returncode == 0, proc.stderr
    records = episodes(out)
    assert pairs(records) == [(t, r) for t in range(3) for r in range(2)]
    assert pairs(records[:2]) == kept_pairs  # the kept ones were not rerun
    # 4 episodes, 4 calls each (after the task's opening line: an answer, a question, an
    # answer, done).
    assert len(model.requests) - calls_before == 4 * 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 6 and summary["episodes_this_session"] == 4

    # Nothing missing: a resume runs nothing.
    proc = run_cli("eval", "--resume", str(out), "--no-report")
    assert proc.returncode == 0 and len(episodes(out)) == 6


def test_resume_with_retry_errors_runs_failed_episodes_again(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    failing = {"on": True}

    def handler(req: ScriptedRequest) -> ScriptedReply:
        if failing["on"] and "whether the library is open on Sunday" in json.dumps(req.messages):
            return ScriptedReply.fault(400)
        return relay_handler(user_turns=1)(req)

    model = scripted_model(handler)
    out = tmp_path / "run"
    assert cli.main(["eval", "user-sim", "-n", "3", "--base-url", model.base_url,
                     "-o", str(out), "--quiet", "--no-report"]) == 0
    first = episodes(out)
    assert [r["error_type"] for r in sorted(first, key=lambda r: r["info"]["task_idx"])] == [
        None, "bad_request", None]  # the user seat's model failed: its own error, not the sim's

    # A plain resume counts the failed episode as done.
    calls = len(model.requests)
    assert cli.main(["eval", "--resume", str(out), "--quiet", "--no-report"]) == 0
    assert len(model.requests) == calls

    failing["on"] = False
    assert cli.main(["eval", "--resume", str(out), "--retry-errors", "--quiet",
                     "--no-report"]) == 0
    lines = episodes(out)
    assert len(lines) == 4  # the failed line stays; the new one supersedes it
    latest = {(r["info"]["task_idx"], r["info"]["rollout"]): r
              for r in results.read_episodes(out / "episodes.jsonl")}
    assert sorted(latest) == [(0, 0), (1, 0), (2, 0)]
    assert all(r["error_type"] is None for r in latest.values())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["error_episodes"] == 0
    assert summary["episodes_this_session"] == 1
    # --retry-errors alone is refused: it only means something when resuming.
    proc = run_cli("eval", "user-sim", "--retry-errors", "-o", str(tmp_path / "other"))
    assert proc.returncode == 2 and "--retry-errors goes with --resume" in proc.stderr


@pytest.mark.slow
def test_resume_refuses_a_changed_config_naming_the_keys(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(relay_handler(user_turns=1))
    out = tmp_path / "run"
    assert cli.main(["eval", "user-sim", "-n", "1", "--base-url", model.base_url, "-o", str(out),
                     "--quiet", "--no-report"]) == 0
    proc = run_cli("eval", "--resume", str(out), "-s", "3",
                   "--set", "env.relay.max_turns=2")
    assert proc.returncode == 2
    assert "env.relay.max_turns" in proc.stderr and "seed" in proc.stderr
    assert "concurrency" not in proc.stderr
    proc = run_cli("eval", "echo", "--resume", str(out))
    assert proc.returncode == 2 and "env.name" in proc.stderr
    proc = run_cli("eval", "--resume", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "config.json" in proc.stderr


def test_read_episodes_refuses_a_broken_middle_line(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"info": {"task_idx": 0, "rollout": 0}}\nnot json\n'
                    '{"info": {"task_idx": 1, "rollout": 0}}\n')
    with pytest.raises(interplay.InterplayError, match="line 2"):
        results.read_episodes(path)
    path.write_text('{"info": {"task_idx": 0, "rollout": 0}}\n{"info": {"task_')
    assert len(results.read_episodes(path, repair=True)) == 1
    assert path.read_text() == '{"info": {"task_idx": 0, "rollout": 0}}\n'


def test_iter_episodes_streams_the_latest_line_of_each_pair(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    lines = [{"info": {"task_idx": 0, "rollout": 0}, "error_type": "timeout"},
             {"info": {"task_idx": 1, "rollout": 0}, "reward": 1.0},
             {"info": {"task_idx": 0, "rollout": 1}, "reward": 0.0},
             {"info": {"task_idx": 0, "rollout": 0}, "reward": 0.5}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"info": {"ta')
    streamed = results.iter_episodes(path)
    assert isinstance(streamed, Iterator)
    # File order of each pair's latest line; the torn tail is skipped and left as it was.
    assert list(streamed) == lines[1:]
    assert path.read_text().endswith('{"info": {"ta')
    assert [r["reward"] for r in results.iter_episodes(path, slim=True)] == [1.0, 0.0, 0.5]
    assert sorted(map(results.pair_of, results.iter_episodes(path))) == sorted(
        map(results.pair_of, results.read_episodes(path)))
    assert list(results.iter_episodes(tmp_path / "missing.jsonl")) == []
    # By pair: (task, rollout) order, read by offset, the latest line of each still.
    assert list(results.iter_episodes(path, order="pair")) == [lines[3], lines[2], lines[1]]
    assert [r["reward"] for r in results.iter_episodes(path, slim=True, order="pair")] == [
        0.5, 0.0, 1.0]
    path.write_text('{"info": {"task_idx": 0, "rollout": 0}}\nnot json\n{}\n')
    with pytest.raises(interplay.InterplayError, match="line 2"):
        next(results.iter_episodes(path))


@pytest.mark.parametrize("line", [
    '{"info": {"rollout": 0}}', '{"info": {"task_idx": "first"}}', '{"info": 3}'])
def test_read_episodes_refuses_a_record_without_a_task_idx(tmp_path: Path, line: str) -> None:
    path = tmp_path / "episodes.jsonl"
    for body in (f'{{"info": {{"task_idx": 0}}}}\n{line}\n', f"{line}\n"):
        path.write_text(body)
        with pytest.raises(interplay.InterplayError, match=r"line( \d+)? is not an episode "
                                                           r"record"):
            results.read_episodes(path, repair=True)
        assert path.read_text() == body, "a whole line is never cut off"


class TrickleFile(io.FileIO):
    """A raw file that takes at most 7 bytes per write, as a raw write may."""

    def write(self, data: Any) -> int:
        return super().write(bytes(data[:7]))


async def test_episode_log_writes_every_byte_of_a_short_written_line(tmp_path: Path) -> None:
    from interplay.values.records import Episode, EpisodeInfo

    path = tmp_path / "episodes.jsonl"
    writer = results.EpisodeLog(path)
    writer._fh = TrickleFile(path, "ab")
    episode = Episode(info=EpisodeInfo(episode_id="e1", env="x", task_idx=4),
                      task=Task(4, prompt="p" * 50))
    writer.append_line(results.episode_line(episode))
    await writer.aclose()
    (record,) = results.read_episodes(path)
    assert record["info"]["task_idx"] == 4 and record["task"]["prompt"] == "p" * 50


# -- kills -------------------------------------------------------------------------------------


def _start_slow_run(tmp_path: Path, model: ScriptedModel, n: int, *, concurrency: int = 2,
                    workers: int = 1) -> tuple[subprocess.Popen[str], Path]:
    tasks = write_tasks(tmp_path / "tasks.jsonl", ["yes"] * n)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "interplay.cli", "eval", "user-sim", "-c", str(concurrency),
         "-w", str(workers), "--base-url", model.base_url, "-o", str(out), "--no-report",
         "--set", f"env.taskset={json.dumps(str(tasks))}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_sub_env())
    return proc, out


def _worker_pids(parent: int) -> list[int]:
    """The parent's live `interplay.run.workers` processes."""
    found = []
    for children in Path(f"/proc/{parent}/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"interplay.run.workers" in cmdline:
                found.append(int(pid))
    return found


def _wait_for_episodes(out: Path, count: int, proc: subprocess.Popen[str]) -> None:
    path = out / "episodes.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= count:
            return
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    raise AssertionError("the run wrote no episodes")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_killed_run_keeps_every_finished_episode_and_resumes(
        tmp_path: Path, scripted_model: ScriptedFactory, sig: signal.Signals) -> None:
    n = 12
    model = scripted_model(relay_handler(user_turns=2, latency_s=0.05))
    proc, out = _start_slow_run(tmp_path, model, n)
    _wait_for_episodes(out, 2, proc)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130, stderr
        assert "--resume" in stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["interrupted"] is True and summary["complete"] is False
    finished = results.read_episodes(out / "episodes.jsonl")
    assert 2 <= len(finished) < n
    assert all(r["reward"] == 1.0 and r["error"] is None for r in finished)

    proc2 = run_cli("eval", "--resume", str(out), "--no-report")
    assert proc2.returncode == 0, proc2.stderr
    records = episodes(out)
    assert pairs(records) == [(t, 0) for t in range(n)]
    assert [r["info"]["episode_id"] for r in records[: len(finished)]] == [
        r["info"]["episode_id"] for r in finished]


# -- worker processes ----------------------------------------------------------------------------


@pytest.mark.slow
def test_workers_run_the_episodes_one_process_would(tmp_path: Path,
                                                    scripted_model: ScriptedFactory) -> None:
    """alphabet-sort draws its puzzles from the episode's rng: the same seed must give the
    same episodes whichever process ran them."""
    model = scripted_model()  # echoes the last user message

    def run(name: str, workers: int, seed: int = 1) -> tuple[list[dict[str, Any]], str]:
        out = tmp_path / name
        proc = run_cli("eval", "alphabet-sort", "-n", "3", "-r", "3", "-s", str(seed), "-c",
                       "4", "-w", str(workers), "--base-url", model.base_url, "-o", str(out),
                       "--no-report", "--quiet")
        assert proc.returncode == 0, proc.stderr
        return episodes(out), proc.stderr

    (one, _), (three, said) = run("one", 1), run("three", 3)
    assert "3 workers" in said
    assert len(one) == 9 and _normalized(one) == _normalized(three)
    assert _normalized(three) != _normalized(run("other-seed", 3, seed=2)[0])


def _start_workers_run(tmp_path: Path, scripted_model: ScriptedFactory,
                       n: int) -> tuple[subprocess.Popen[str], Path, list[int]]:
    """A slow user-sim run at -c 4 in two workers, once two episodes are written."""
    model = scripted_model(relay_handler(user_turns=2, latency_s=0.05))
    proc, out = _start_slow_run(tmp_path, model, n, concurrency=4, workers=2)
    _wait_for_episodes(out, 2, proc)
    workers = _worker_pids(proc.pid)
    assert len(workers) == 2
    return proc, out, workers


@pytest.mark.slow
def test_a_dead_worker_costs_only_the_episodes_it_was_running(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    n = 16
    proc, out, victims = _start_workers_run(tmp_path, scripted_model, n)
    os.kill(victims[0], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    records = episodes(out)
    assert pairs(records) == [(t, 0) for t in range(n)]  # each pair once, none dropped
    lost = [r for r in records if r["error_type"] is not None]
    assert 1 <= len(lost) <= 2  # what the dead worker was running (its share of -c 4)
    assert {r["error_type"] for r in lost} == {"worker_error"}
    assert all(r["reward"] == 1.0 for r in records if r["error_type"] is None)

    again = run_cli("eval", "--resume", str(out), "--retry-errors", "--no-report", "--quiet")
    assert again.returncode == 0, again.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["error_episodes"] == 0 and summary["episodes"] == n


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_run_with_workers_leaves_no_worker_behind(
        tmp_path: Path, scripted_model: ScriptedFactory, sig: signal.Signals) -> None:
    n = 12
    proc, out, workers = _start_workers_run(tmp_path, scripted_model, n)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == (130 if sig == signal.SIGTERM else -signal.SIGKILL), stderr
    assert survivors(workers) == set()
    finished = results.read_episodes(out / "episodes.jsonl")
    assert 2 <= len(finished) < n and all(r["reward"] == 1.0 for r in finished)
    again = run_cli("eval", "--resume", str(out), "--no-report", "--quiet")
    assert again.returncode == 0, again.stderr
    assert pairs(episodes(out)) == [(t, 0) for t in range(n)]


@pytest.mark.slow
def test_workers_need_a_model_endpoint(tmp_path: Path) -> None:
    proc = run_cli("eval", "echo", "-w", "2", "-o", str(tmp_path / "run"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("interplay: error: workers:")
    assert not (tmp_path / "run").exists()


# -- in-process envs: errors, determinism, the concurrency bound --------------------------------


class PickStep(Step):
    """Sends a number drawn from the episode's rng, so the episode depends on its seed."""

    name = "test_pick"

    async def run(self, ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            for _ in range(2):
                await chat.turn(f"pick {ctx.rng.randint(0, 10**9)}")


class FailingStep(Step):
    name = "test_failing"

    async def run(self, ctx: LiveEpisodeContext) -> None:
        await ctx.agent("assistant").run(attrs_evolve_prompt(ctx.task, "hello"))
        if ctx.task.idx == 1:
            raise ValueError("task 1 breaks the env")


def attrs_evolve_prompt(task: Task, prompt: str) -> Task:
    import attrs

    return attrs.evolve(task, prompt=prompt)


class TwoSeatStep(Step):
    """Two seats talk at the same moment (a two-seat game): both sessions held at once."""

    name = "test_two_seats"
    live = 0
    max_live = 0

    def seats(self) -> set[str]:
        return {"player0", "player1"}

    async def run(self, ctx: LiveEpisodeContext) -> None:
        cls = type(self)
        cls.live += 1
        cls.max_live = max(cls.max_live, cls.live)
        try:
            async with ctx.agent("player0").chat(ctx.task) as a, \
                    ctx.agent("player1").chat(ctx.task) as b:
                for k in range(3):
                    await asyncio.gather(a.turn(f"move {k}"), b.turn(f"move {k}"))
        finally:
            cls.live -= 1


FINISHED: list[weakref.ref[Any]] = []


class HeldStep(PickStep):
    """Counts the finished episodes still alive while this one runs."""

    name = "test_held"

    async def run(self, ctx: LiveEpisodeContext) -> None:
        await super().run(ctx)
        ctx.metrics["finished_alive"] = sum(ref() is not None for ref in FINISHED)


def _tasks(n: int) -> list[Task]:
    return [Task(idx=i) for i in range(n)]


class PickEnv(Env):
    name = "test-pick"
    seats: ClassVar = {"assistant": SeatSpec(harness="null")}

    def tasks(self) -> list[Task]:
        return _tasks(3)

    def steps(self) -> list[Step]:
        return [PickStep()]


class HeldEnv(PickEnv):
    name = "test-held"

    def steps(self) -> list[Step]:
        return [HeldStep()]


class FailingEnv(Env):
    name = "test-failing"
    seats: ClassVar = {"assistant": SeatSpec(harness="null")}

    def tasks(self) -> list[Task]:
        return _tasks(3)

    def steps(self) -> list[Step]:
        return [FailingStep()]


class BrokenEnv(Env):
    """verifiers() works while the run loads (its check, and what config.json records of
    them), then raises: run_episode itself raises."""

    name = "test-broken"
    seats: ClassVar = {"assistant": SeatSpec(harness="null")}
    calls = 0

    def tasks(self) -> list[Task]:
        return _tasks(2)

    def steps(self) -> list[Step]:
        return [PickStep()]

    def verifiers(self) -> list[Any]:
        type(self).calls += 1
        if type(self).calls > 2:
            raise RuntimeError("no verifiers today")
        return []


class TwoSeatEnv(Env):
    name = "test-two-seats"
    seats: ClassVar = {"player0": SeatSpec(harness="null"), "player1": SeatSpec(harness="null")}

    def tasks(self) -> list[Task]:
        return _tasks(6)

    def steps(self) -> list[Step]:
        return [TwoSeatStep()]


class _Plugin:
    @interplay.hookimpl
    def register_envs(self, register: Callable[..., None]) -> None:
        for env in (PickEnv, FailingEnv, BrokenEnv, TwoSeatEnv, HeldEnv):
            register(env)


@pytest.fixture
def test_envs(register_plugin: Any) -> Iterator[None]:
    BrokenEnv.calls = 0
    TwoSeatStep.live = TwoSeatStep.max_live = 0
    register_plugin(_Plugin(), name="runner-test-envs")
    yield


def _normalized(records: list[dict[str, Any]]) -> list[Any]:
    drop = {"episode_id", "started_at", "ended_at", "wall_s", "latency_s", "first_token_s", "id",
            "created", "call_id", "duration_s"}

    def norm(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items() if k not in drop}
        if isinstance(value, list):
            return [norm(v) for v in value]
        return value

    return [norm(r) for r in sorted(records, key=lambda r: (r["info"]["task_idx"],
                                                            r["info"]["rollout"]))]


def test_same_seed_same_episodes(tmp_path: Path, scripted_model: ScriptedFactory,
                                 test_envs: None) -> None:
    model = scripted_model()  # echoes the last user message

    def run(seed: int, name: str, concurrency: int) -> list[dict[str, Any]]:
        out = tmp_path / name
        assert cli.main(["eval", "test-pick", "-r", "3", "-s", str(seed), "-c",
                         str(concurrency), "--base-url", model.base_url, "-o", str(out),
                         "--quiet", "--no-report"]) == 0
        return episodes(out)

    a, b, c = run(1, "a", 9), run(1, "b", 1), run(2, "c", 4)
    assert len(a) == 9
    assert _normalized(a) == _normalized(b)
    assert _normalized(a) != _normalized(c)
    picks = {m["content"] for r in a for t in r["traces"] for m in t["messages"]
             if m["role"] == "user"}
    assert len(picks) == 18  # each episode drew its own numbers


def test_an_episode_that_raises_is_recorded_and_the_others_go_on(
        tmp_path: Path, scripted_model: ScriptedFactory, test_envs: None) -> None:
    model = scripted_model()
    out = tmp_path / "run"
    assert cli.main(["eval", "test-failing", "-r", "2", "--base-url", model.base_url,
                     "-o", str(out), "--quiet"]) == 0
    records = {(r["info"]["task_idx"], r["info"]["rollout"]): r for r in episodes(out)}
    assert sorted(records) == [(t, r) for t in range(3) for r in range(2)]
    for (task, _), r in records.items():
        if task == 1:
            assert r["error_type"] == "env_error"
            assert "task 1 breaks the env" in r["error"]
        else:
            assert r["error_type"] is None
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == {"env_error": 2} and summary["error_episodes"] == 2


def test_an_episode_the_runner_cannot_start_is_recorded(
        tmp_path: Path, scripted_model: ScriptedFactory, test_envs: None) -> None:
    model = scripted_model()
    out = tmp_path / "run"
    # No episode completed: the run says so in its exit status.
    assert cli.main(["eval", "test-broken", "--base-url", model.base_url, "-o", str(out),
                     "--quiet"]) == 1
    records = episodes(out)
    assert pairs(records) == [(0, 0), (1, 0)]
    assert {r["error_type"] for r in records} == {"runner_error"}
    assert all("no verifiers today" in r["error"] for r in records)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_c_bounds_episodes_not_sessions(tmp_path: Path, scripted_model: ScriptedFactory,
                                        test_envs: None, concurrency: int) -> None:
    # Each reply waits a little so that episodes overlap whenever the runner lets them.
    model = scripted_model(lambda req: ScriptedReply.text("ok", latency_s=0.02))
    out = tmp_path / "run"
    assert cli.main(["eval", "test-two-seats", "-c", str(concurrency), "--base-url",
                     model.base_url, "-o", str(out), "--quiet", "--no-report"]) == 0
    records = episodes(out)
    assert len(records) == 6 and all(r["error"] is None for r in records)
    assert all(len(r["traces"]) == 2 for r in records)
    assert 1 <= TwoSeatStep.max_live <= concurrency
    assert len(model.requests) == 6 * 2 * 3


class BarrierStep(Step):
    """Waits until ``target`` episodes run at once: only a run that fills every slot ends."""

    name = "test_barrier"
    target = 0
    arrived = 0
    all_in: asyncio.Event | None = None

    async def run(self, ctx: LiveEpisodeContext) -> None:
        cls = type(self)
        assert cls.all_in is not None
        cls.arrived += 1
        if cls.arrived == cls.target:
            cls.all_in.set()
        await asyncio.wait_for(cls.all_in.wait(), timeout=10)


class BarrierEnv(Env):
    name = "test-barrier"
    seats: ClassVar = {"assistant": SeatSpec(harness="null")}

    def steps(self) -> list[Step]:
        return [BarrierStep()]


async def test_every_slot_fills_though_episodes_start_a_few_at_a_time() -> None:
    concurrency = 2 * local.START_BATCH + 3
    BarrierStep.target, BarrierStep.arrived = concurrency, 0
    BarrierStep.all_in = asyncio.Event()
    finished: list[Any] = []
    resources = RunResources(endpoint=Endpoint(base_url="http://127.0.0.1:9/v1"))
    try:
        await local.run_pairs(BarrierEnv(), [(t, 0) for t in _tasks(concurrency)],
                              resources=resources, seed=0, concurrency=concurrency,
                              on_episode=finished.append)
    finally:
        await resources.aclose()
    assert len(finished) == concurrency
    assert [e.error for e in finished] == [None] * concurrency


async def test_a_finished_episode_is_let_go_once_written(scripted_model: ScriptedFactory,
                                                         test_envs: None) -> None:
    """At 1000 episodes at once, a worker that kept its last finished episode until the next
    one ended doubled the run's memory."""
    model = scripted_model(lambda req: ScriptedReply.text("ok"))
    env = config.load_env("test-held", {})
    resources = RunResources(endpoint=model.endpoint)
    seen: list[float] = []

    def on_episode(episode: Any) -> None:
        seen.append(episode.metrics["finished_alive"])
        FINISHED.append(weakref.ref(episode))

    FINISHED.clear()
    try:
        await local.run_pairs(env, [(t, 0) for t in env.tasks()], resources=resources, seed=0,
                              concurrency=1, on_episode=on_episode)
    finally:
        await resources.aclose()
    assert seen == [0.0, 0.0, 0.0]


async def test_a_finished_episode_is_summarized_as_its_line_reads_back(
        scripted_model: ScriptedFactory) -> None:
    """The run counts a finished episode from the episode itself (slim_episode) and a resumed
    run counts it from its line (slim_record): both must say the same."""
    model = scripted_model(relay_handler(user_turns=2))
    env = config.load_env("user-sim", {})
    resources = RunResources(endpoint=model.endpoint)
    try:
        episode = await executor.run_one(env, env.tasks()[0], 0, resources=resources, seed=0)
    finally:
        await resources.aclose()
    slim = results.slim_episode(episode)
    # The task's opening line (sent as written), three user turns (two questions, then done)
    # and three answers.
    assert slim["usage"]["model_calls"] == 6 and slim["usage"]["total_tokens"] > 0
    read = results.slim_record(json.loads(results.episode_line(episode)))
    assert {k: v for k, v in slim.items() if k != "info"} == \
        {k: v for k, v in read.items() if k != "info"}
    assert slim["info"].items() <= read["info"].items()


async def test_a_finished_episode_is_freed_without_the_cycle_collector(
        scripted_model: ScriptedFactory) -> None:
    """Agents point back at their episode's context; once the episode is over nothing may keep
    its traces alive but the episode itself, or a run at -c 1000 waits on full collections."""
    model = scripted_model(relay_handler(user_turns=2))
    env = config.load_env("user-sim", {})
    resources = RunResources(endpoint=model.endpoint)
    gc.collect()
    gc.disable()
    try:
        episode = await executor.run_one(env, env.tasks()[0], 0, resources=resources, seed=0)
        assert len(episode.traces) == 2 and episode.error is None
        traces = [weakref.ref(t) for t in episode.traces]
        calls = [weakref.ref(c) for t in episode.traces for c in t.model_calls]
        del episode
        assert [r() for r in traces + calls] == [None] * len(traces + calls)
    finally:
        gc.enable()
        await resources.aclose()


def test_user_sim_relay_at_c1(tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(relay_handler(user_turns=3))
    out = tmp_path / "run"
    assert cli.main(["eval", "user-sim", "-c", "1", "-n", "2", "--base-url", model.base_url,
                     "-o", str(out), "--quiet", "--no-report"]) == 0
    # The builtin tasks open with a line of their own: one more turn than the sim's questions.
    assert [r["metrics"]["turns"] for r in episodes(out)] == [4.0, 4.0]


# -- the summary's estimators -------------------------------------------------------------------


def _brute_pass_at_k(outcomes: list[bool], k: int) -> tuple[float, float]:
    subsets = list(combinations(outcomes, k))
    return (sum(any(s) for s in subsets) / len(subsets),
            sum(all(s) for s in subsets) / len(subsets))


@pytest.mark.parametrize("outcomes", [[True, False, False, True, False], [False] * 4,
                                      [True] * 3, [True, False, True, True, False, False, True]])
def test_pass_at_k_estimators_match_enumeration(outcomes: list[bool]) -> None:
    n, c = len(outcomes), sum(outcomes)
    for k in range(1, n + 1):
        at, hat = _brute_pass_at_k(outcomes, k)
        assert summary.pass_at_k(n, c, k) == pytest.approx(at)
        assert summary.pass_hat_k(n, c, k) == pytest.approx(hat)


def test_summarize_threshold_metrics_stops_and_tokens() -> None:
    def rec(task: int, rollout: int, reward: float | None, error: str | None = None) -> dict:
        return {"info": {"task_idx": task, "rollout": rollout}, "reward": reward,
                "error_type": error, "metrics": {"turns": 2.0 + task},
                "traces": [{"seat": "assistant", "stop_condition": "user_done",
                            "model_calls": [{"usage": {"prompt_tokens": 3,
                                                       "completion_tokens": 1,
                                                       "total_tokens": 4}}]}]}

    records = [rec(0, 0, 0.8), rec(0, 1, 0.4), rec(1, 0, None, "env_error"), rec(1, 1, 0.6),
               rec(2, 0, 0.2), rec(2, 1, 0.9)]
    s = summary.summarize(records, pass_threshold=0.5)
    assert s["reward_mean"] == pytest.approx(2.9 / 5) and s["scored"] == 5
    # The error episode is in no estimate: task 1 counts one rollout, so only k = 1 is known
    # for every task (task 0: 1/2, task 1: 1/1, task 2: 1/2).
    assert s["pass_at_k"] == {"1": pytest.approx(2 / 3)}
    assert s["pass_hat_k"] == {"1": pytest.approx(2 / 3)}
    assert s["metrics"] == {"turns": pytest.approx(3.0)}  # 2, 2, 3, 4, 4: not the error one
    assert (s["completed"], s["error_episodes"], s["completion_ratio"]) == (5, 1, 5 / 6)
    assert s["stop_conditions"] == {"assistant: user_done": 6}
    assert s["errors"] == {"env_error": 1}
    # What the run spent counts every episode, the error one too.
    assert s["tokens"] == {"prompt_tokens": 18, "completion_tokens": 6, "total_tokens": 24}
    text = summary.format_summary(s)
    assert "pass^1" in text and "error env_error" in text and "5 of 6 (83%)" in text


def test_summarize_a_game_scored_by_seat() -> None:
    def rec(task: int, p0: float) -> dict:
        return {"info": {"task_idx": task, "rollout": 0}, "reward": None, "metrics": {},
                "traces": [{"seat": "player0", "stop_condition": "game_over", "reward": p0},
                           {"seat": "player1", "stop_condition": "game_over", "reward": -p0}]}

    s = summary.summarize([rec(0, 1.0), rec(1, -2.0), rec(2, 2.0)])
    assert s["reward_mean"] is None and s["scored"] == 0
    # Nothing passes or fails without an episode reward: no pass@k to report.
    assert s["pass_at_k"] == {} and s["pass_hat_k"] == {}
    assert s["seat_rewards"]["player0"]["mean"] == pytest.approx(1 / 3)
    assert s["seat_rewards"]["player1"]["mean"] == pytest.approx(-1 / 3)
    assert s["seat_rewards"]["player0"]["n"] == 3
    assert s["seat_rewards"]["player0"]["stderr"] == pytest.approx(
        (((2 / 3) ** 2 + (7 / 3) ** 2 + (5 / 3) ** 2) / 2 / 3) ** 0.5)
    assert "reward player1" in summary.format_summary(s)
