"""Scores that cannot lie: an episode that ended in an error (a failed verifier, a model fault,
a lost worker, an env that raised) is not scored, is left out of every score figure and is
counted on its own, the same in the episode's line, summary.json, the terminal and the report;
and a run in which no episode completed says so in its exit status."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import interplay
from interplay import cli
from interplay.builtin_verifiers.rubric import JUDGE_SYSTEM
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.report.figures import summary_view
from interplay.run import summary
from interplay.run.episode import LiveEpisodeContext
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values.records import Episode, Reward, Task

ScriptedFactory = Callable[..., ScriptedModel]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interplay.cli", *args], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})


def lines(folder: Path) -> list[dict[str, Any]]:
    return sorted((json.loads(x) for x in (folder / "episodes.jsonl").read_text().splitlines()),
                  key=lambda r: (r["info"]["task_idx"], r["info"]["rollout"]))


def strict_json(path: Path) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{path.name} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def one_shot_env(tmp_path: Path, answers: list[str], verifiers: str) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"prompt": f"say {a}", "answer": a}) + "\n"
                             for a in answers))
    env = tmp_path / "judged.toml"
    env.write_text(f'name = "judged"\ntaskset = {json.dumps(str(tasks))}\n'
                   '[seats.assistant]\nharness = "null"\n'
                   '[[steps]]\nkind = "one_shot"\n' + verifiers)
    return env


def says_the_answer(req: ScriptedRequest) -> ScriptedReply:
    """The assistant always answers right: it repeats the word it is asked for."""
    return ScriptedReply.text(str(req.messages[-1]["content"]).removeprefix("say "))


RUBRIC = ('[[verifiers]]\nkind = "exact"\nseat = "assistant"\n'
          '[[verifiers]]\nkind = "rubric"\nretries = 1\n'
          '[[verifiers.criteria]]\nname = "polite"\ndescription = "is polite"\n')


def eval_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["eval", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_failed_judge_never_raises_a_score(tmp_path: Path, scripted_model: ScriptedFactory,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """exact says 1 for every episode; the judge says 0 where it answers. Where it stays
    malformed after its retry the episode is an error, not the exact match's 1 alone."""

    judge_fails = {"apple"}

    def handler(req: ScriptedRequest) -> ScriptedReply:
        if req.messages[0].get("content") != JUDGE_SYSTEM:
            return says_the_answer(req)
        if any(f"say {word}" in json.dumps(req.messages) for word in judge_fails):
            return ScriptedReply.text("I'd rather not say.")
        return ScriptedReply.text('{"criteria": [{"name": "polite", "score": 0, '
                                  '"reason": "curt"}]}')

    model = scripted_model(handler)
    out = tmp_path / "run"
    env = one_shot_env(tmp_path, ["apple", "pear", "plum"], RUBRIC)
    code, stdout, stderr = eval_in_process(capsys, str(env), "--base-url", model.base_url,
                                           "-o", str(out), "-q")
    assert code == 0, stderr

    apple, pear, plum = lines(out)
    assert apple["error_type"] == "verifier_error" and "rubric" in apple["error"]
    # Nothing on the episode or its traces reads as a score; what exact said is kept to read.
    assert apple["reward"] is None and [t["reward"] for t in apple["traces"]] == [None]
    assert [(r["name"], r["value"]) for r in apple["rewards"]] == [("exact", 1.0)]
    assert pear["reward"] == plum["reward"] == 0.5

    s = strict_json(out / "summary.json")
    assert s["reward_mean"] == 0.5 and s["reward_stderr"] == 0.0 and s["scored"] == 2
    assert s["pass_at_k"] == {"1": 0.0} and s["metrics"]["exact"] == 1.0
    assert (s["completed"], s["error_episodes"], s["errors"]) == (2, 1, {"verifier_error": 1})
    assert s["completion_ratio"] == pytest.approx(2 / 3)
    assert "reward (mean ± se, 2 scored)     0.5 ± 0" in stdout
    assert "2 of 3 (67%)" in stdout

    # Every judge failing: nothing completed, and the run says so.
    judge_fails.update({"pear", "plum"})
    out2 = tmp_path / "run2"
    code, stdout, stderr = eval_in_process(capsys, str(env), "--base-url", model.base_url,
                                           "-o", str(out2), "-q")
    assert code == 1
    assert stderr.strip().splitlines()[-1].startswith(
        "interplay: error: no episode completed: all 3 ended in verifier_error: verifier rubric: "
        "JudgeFailed: ")
    s = strict_json(out2 / "summary.json")
    assert (s["reward_mean"], s["scored"], s["pass_at_k"], s["completed"]) == (None, 0, {}, 0)
    assert "reward (mean ± se, 0 scored)     -" in stdout


def test_model_faults_are_not_scored(tmp_path: Path, scripted_model: ScriptedFactory,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A model that is always right behind an endpoint that sometimes fails scores 1, with the
    failures counted apart (the verifier still runs: `contains` of nothing is 0)."""

    def handler(req: ScriptedRequest) -> ScriptedReply:
        text = json.dumps(req.messages)
        if "say pear" in text:
            return ScriptedReply.fault(400)
        if "say plum" in text:
            return ScriptedReply.malformed()
        return says_the_answer(req)

    model = scripted_model(handler)
    out = tmp_path / "run"
    env = one_shot_env(tmp_path, ["apple", "pear", "plum", "fig"],
                       '[[verifiers]]\nkind = "contains"\nseat = "assistant"\n')
    code, _, stderr = eval_in_process(capsys, str(env), "-r", "2", "--base-url",
                                      model.base_url, "-o", str(out), "-q",
                                      "--set", "model.max_retries=0")
    assert code == 0, stderr
    records = lines(out)
    faulted = [r for r in records if r["error_type"]]
    assert {r["error_type"] for r in faulted} == {"bad_request", "bad_response"}
    assert len(faulted) == 4 and all(r["reward"] is None for r in faulted)
    s = strict_json(out / "summary.json")
    assert s["reward_mean"] == 1.0 and s["pass_at_k"] == {"1": 1.0, "2": 1.0}
    assert s["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    assert s["seat_rewards"]["assistant"]["mean"] == 1.0
    assert s["metrics"]["contains"] == 1.0  # the faulted episodes' 0 is not in it
    assert (s["episodes"], s["completed"], s["error_episodes"]) == (8, 4, 4)
    assert s["completion_ratio"] == 0.5
    assert s["errors"] == {"bad_request": 2, "bad_response": 2}
    # What the run spent counts all of them: 8 assistant calls, failed ones included.
    assert s["model_calls"] == 8

    page = (out / "report.html").read_text()
    assert "4 of 8 (50%)" in page and "error episodes (not scored)" in page
    assert "not scored" in page and "Rewards, pass@k and metrics are over the completed" in page


def test_a_run_that_never_reached_the_model_exits_1_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    out = tmp_path / "run"
    proc = run_cli("eval", "echo", "-n", "3", "--base-url", f"http://127.0.0.1:{port}/v1",
                   "-o", str(out), "-q", "--set", "model.max_retries=0")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"interplay: error: no episode completed: all 3 ended in connection_error: "
                    f"seat 'assistant': connection error sending the request: Cannot connect to "
                    f"host 127.0.0.1:{port} ssl:default [Connect call failed ('127.0.0.1', "
                    f"{port})]; nothing answered at model.base_url (--base-url): start the "
                    f"endpoint there, or set model.proxy (HTTPS_PROXY) if it is reached through "
                    f"one (a wrong URL needs a new run with another -o: --resume keeps the run's "
                    f"URL); then run them again with `interplay eval --resume {out} "
                    f"--retry-errors`")
    assert "Traceback" not in proc.stderr
    s = strict_json(out / "summary.json")
    assert (s["completed"], s["completion_ratio"], s["reward_mean"]) == (0, 0.0, None)
    # The results are all there to read, the report included.
    assert len(lines(out)) == 3 and (out / "report.html").is_file()


def test_summarize_leaves_every_kind_of_error_episode_out_of_every_score() -> None:
    def rec(task: int, rollout: int, reward: float | None, error: str | None = None,
            seat_reward: float | None = None) -> dict[str, Any]:
        return {"info": {"task_idx": task, "rollout": rollout}, "reward": reward,
                "error_type": error, "metrics": {"m": reward if reward is not None else -9.0},
                "traces": [{"seat": "assistant", "stop_condition": "done",
                            "reward": seat_reward if seat_reward is not None else reward}]}

    records = [rec(0, 0, 1.0), rec(0, 1, 1.0),
               # A worker_error has no reward; before the rule pass@k counted it as a failure.
               rec(1, 0, None, "worker_error"), rec(1, 1, 1.0),
               # A line written before the rule: an error episode with a reward on it.
               rec(2, 0, 0.0, "timeout", seat_reward=0.0), rec(2, 1, 1.0)]
    s = summary.summarize(records, expected=6)
    assert s["reward_mean"] == 1.0 and s["reward_stderr"] == 0.0 and s["scored"] == 4
    assert s["pass_at_k"] == {"1": 1.0} and s["pass_hat_k"] == {"1": 1.0}
    assert s["seat_rewards"]["assistant"] == {"mean": 1.0, "stderr": 0.0, "n": 4}
    assert s["metrics"] == {"m": 1.0}
    assert s["errors"] == {"timeout": 1, "worker_error": 1}
    assert (s["completed"], s["error_episodes"], s["completion_ratio"]) == (4, 2, 4 / 6)
    assert s["stop_conditions"] == {"assistant: done": 6}


def test_summarize_marks_episodes_a_limit_cut_short() -> None:
    """An always_on run its real-time budget ended is scored as far as it went: the summary
    counts it apart, with the mean of the others beside the mean of all, never silently."""
    records = [{"info": {"task_idx": i, "rollout": 0}, "reward": reward, "error_type": None,
                "metrics": {"truncated": cut}, "traces": []}
               for i, (reward, cut) in enumerate([(1.0, 0.0), (0.5, 0.0), (0.0, 1.0)])]
    s = summary.summarize(records)
    assert s["reward_mean"] == 0.5 and s["truncated"] == 1
    assert s["reward_mean_untruncated"] == 0.75
    assert "truncated (cut short by a limit, scored as far as they went)  1; reward without " \
           "them 0.75" in summary.format_summary(s)
    # The report's (and the view's) figures say it beside the mean reward too.
    shown = {f["label"]: f["value"] for f in summary_view(s)["figures"]}
    assert shown["truncated (cut short by a limit, scored as far as they went)"] == \
        "1; reward without them 0.75"
    s = summary.summarize(records[:2])
    assert s["truncated"] == 0 and s["reward_mean_untruncated"] is None
    assert "cut short" not in summary.format_summary(s)
    assert not [f for f in summary_view(s)["figures"] if "cut short" in f["label"]]


def test_summarize_keeps_non_finite_numbers_out_of_its_figures() -> None:
    """summary.json is strict JSON and its means are of finite numbers only: a metric a step
    set to NaN is left out, and a run of huge rewards does not overflow to infinity."""
    records = [{"info": {"task_idx": i, "rollout": 0}, "reward": 1.7e308, "error_type": None,
                "metrics": {"odd": float("nan") if i else 2.0, "big": 1.7e308}, "traces": []}
               for i in range(3)]
    s = summary.summarize(records)
    assert s["reward_mean"] == 1.7e308 and s["metrics"] == {"big": 1.7e308, "odd": 2.0}
    assert all(math.isfinite(v) for v in s["metrics"].values())


# -- verifiers that misbehave, in-process -----------------------------------------------------


class _Say(Step):
    name = "test_say"

    async def run(self, ctx: LiveEpisodeContext) -> None:
        await ctx.agent("assistant").run(ctx.task)
        if ctx.task.idx == 2:
            ctx.metrics["odd"] = float("nan")


class _Odd(Verifier):
    """Gives what the task's info says: NaN, infinity, a string, or a plain 1."""

    name = "test_odd"

    async def score(self, episode: Episode, ctx: LiveEpisodeContext) -> Any:
        kind = ctx.task.info.get("kind")
        value = {"nan": float("nan"), "inf": math.inf}.get(kind, 1.0)
        if kind == "text":
            return "1.0"
        if kind == "huge":
            return [Reward("a", 1.7e308, weight=1.7e308), Reward("b", 1.7e308, weight=1.7e308)]
        return Reward(self.name, value)


class _OddEnv(Env):
    name = "test-odd"
    seats: ClassVar = {"assistant": SeatSpec(harness="null")}

    def tasks(self) -> list[Task]:
        return [Task(idx=i, prompt="hi", info={"kind": k})
                for i, k in enumerate(["nan", "inf", "plain", "text", "huge"])]

    def steps(self) -> list[Step]:
        return [_Say()]

    def verifiers(self) -> list[Verifier]:
        return [_Odd()]


class _Plugin:
    @interplay.hookimpl
    def register_envs(self, register: Callable[..., None]) -> None:
        register(_OddEnv)


@pytest.fixture
def odd_env(register_plugin: Any) -> Iterator[None]:
    register_plugin(_Plugin(), name="scores-test-envs")
    yield


def test_odd_rewards_are_verifier_errors_and_reach_no_figure(
        tmp_path: Path, scripted_model: ScriptedFactory, odd_env: None) -> None:
    model = scripted_model(lambda req: ScriptedReply.text("ok"))
    out = tmp_path / "run"
    assert cli.main(["eval", "test-odd", "--base-url", model.base_url, "-o", str(out),
                     "-q"]) == 0
    by_kind = {r["task"]["info"]["kind"]: r for r in lines(out)}
    for kind in ("nan", "inf", "text"):
        assert by_kind[kind]["error_type"] == "verifier_error"
        assert by_kind[kind]["reward"] is None
    assert by_kind["plain"]["reward"] == 1.0 and by_kind["huge"]["reward"] == 1.7e308
    s = strict_json(out / "summary.json")
    assert s["errors"] == {"verifier_error": 3} and s["completed"] == 2
    assert s["reward_mean"] == pytest.approx((1.0 + 1.7e308) / 2)
    # The plain episode's NaN metric is not a number the summary averages.
    assert "odd" not in s["metrics"]


# -- text JSON can hold and UTF-8 cannot -------------------------------------------------------


class _Surrogate(Step):
    """Puts a lone surrogate (which JSON's \\ud800 escape can carry, from a model, a tool or a
    taskset, and UTF-8 cannot) in what the episode stores."""

    name = "test_surrogate"

    async def run(self, ctx: LiveEpisodeContext) -> None:
        ctx.results["said"] = "half a pair: \ud800 and on"
        ctx.metrics["\udc80odd"] = 1.0


class _SurrogateEnv(Env):
    name = "test-surrogate"
    seats: ClassVar = {"assistant": SeatSpec(harness="null")}

    def tasks(self) -> list[Task]:
        return [Task(idx=0, prompt="p\ud83d"), Task(idx=1, prompt="fine")]

    def steps(self) -> list[Step]:
        return [_Surrogate()]


class _SurrogatePlugin:
    @interplay.hookimpl
    def register_envs(self, register: Callable[..., None]) -> None:
        register(_SurrogateEnv)


def test_a_lone_surrogate_in_an_episode_is_written_read_and_shown(
        tmp_path: Path, register_plugin: Any) -> None:
    register_plugin(_SurrogatePlugin(), name="surrogate-test-env")
    out = tmp_path / "run"
    # Nothing is scored here, so no episode counts as completed-and-scored; both complete.
    assert cli.main(["eval", "test-surrogate", "--base-url", "http://127.0.0.1:9/v1",
                     "-o", str(out), "-q"]) == 0
    raw = (out / "episodes.jsonl").read_bytes()
    raw.decode("utf-8")  # every line is UTF-8
    first = json.loads(raw.splitlines()[0])
    assert first["results"]["said"] == "half a pair: \ud800 and on"
    assert first["task"]["prompt"] == "p\ud83d"
    assert strict_json(out / "summary.json")["completed"] == 2
    page = (out / "report.html").read_bytes().decode("utf-8")
    assert "half a pair: ? and on" in page or "half a pair: \ufffd and on" in page
    # And a resume reads the file back.
    assert cli.main(["eval", "--resume", str(out), "-q", "--no-report"]) == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_pass_threshold_that_is_not_a_number_is_refused(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["eval", "echo", "--base-url", "http://127.0.0.1:9/v1",
                     f"--pass-threshold={value}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"interplay: error: pass_threshold: must be a finite number, got {float(value)}")


def test_a_metric_recorded_by_fewer_episodes_is_said_over_what_it_averages() -> None:
    from interplay.run.summary import format_summary, summarize

    # tau2's breakdown is absent where a conversation was cut before scoring: 7 of 10.
    records = [{"info": {"task_idx": i, "rollout": 0}, "error_type": None, "error": None,
                "reward": 1.0 if i < 7 else 0.0, "traces": [], "usage": {}, "criteria": {},
                "metrics": {"tau2": 1.0 if i < 7 else 0.0, **({"tau2_db": 1.0} if i < 7
                                                              else {})}}
               for i in range(10)]
    summary = summarize(records)
    assert summary["metrics"] == {"tau2": pytest.approx(0.7), "tau2_db": 1.0}
    assert summary["metric_counts"] == {"tau2": 10, "tau2_db": 7}
    table = format_summary(summary)
    assert "metric tau2_db                  1 (7 of 10 completed)" in table
    assert "metric tau2                     0.7\n" in table
