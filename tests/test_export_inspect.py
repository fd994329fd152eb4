"""`interplay export --format inspect`: a run as an Inspect eval log, read back by inspect-ai's
own reader (messages, scores and metadata of every episode) and listed as `inspect view`
lists a folder's logs."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from always_on_support import PRIVATE_NOTE, run_note_day

from interplay import cli
from interplay.errors import InterplayError
from interplay.export.plugged import export_plugged
from interplay.run.results import episode_parts
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values.records import (
    Episode,
    EpisodeInfo,
    Message,
    ModelCall,
    Reward,
    Task,
    ToolCall,
    Trace,
    Usage,
)

inspect_log = pytest.importorskip("inspect_ai.log")


def _episodes() -> list[Episode]:
    out = []
    for task in range(3):
        for rollout in range(2):
            info = EpisodeInfo(episode_id=f"ep-{task}-{rollout}", env="shop", task_idx=task,
                               rollout=rollout, seed=task * 10 + rollout)
            call = ToolCall(id="c1", name="find", arguments=json.dumps({"q": f"order {task}"}))
            bad = ToolCall(id="c2", name="find", arguments="{not json")
            words = f"done {task}" + (" and more" * 10_000 if task == 2 else "")
            agent = Trace(agent="assistant", episode=info, seat="assistant", harness="chat",
                          model="m1", stop_condition="agent_completed",
                          info={"codex": {"session": "s1"}} if task == 1 else {},
                          messages=[Message("system", "be brief"),
                                    Message("user", f"help with {task}"),
                                    Message("assistant", "looking", tool_calls=(call, bad)),
                                    Message("tool", "found it", tool_call_id="c1"),
                                    Message("tool", "bad arguments", tool_call_id="c2"),
                                    Message("assistant", words)],
                          model_calls=[ModelCall(id="m1", model="m1", usage=Usage(10, 3, 13)),
                                       ModelCall(id="m2", model="m1", usage=Usage(20, 5, 25))])
            user = Trace(agent="user", episode=info, seat="user", trainable=False,
                         stop_condition="user_done", model="m1",
                         messages=[Message("user", "you are a customer"),
                                   Message("assistant", f"help with {task}")],
                         model_calls=[ModelCall(id="u1", model="m1", usage=Usage(4, 2, 6))])
            failed = task == 0 and rollout == 1
            reward = None if failed else task / 2
            out.append(Episode(
                info=info, task=Task(idx=task, prompt=f"help with {task}", answer="ok",
                                     info={"tier": task}),
                traces=[agent, user], reward=reward, metrics={"turns": 2.0},
                error_type="model_error" if failed else None,
                error="the endpoint said 500" if failed else None,
                rewards=[] if failed else [
                    Reward("resolved", task / 2, reason=f"resolved {task}",
                           info={"checks": [task]}),
                    Reward("polite", 1.0, weight=0.0, reason="polite")],
                started_at=1_700_000_000.0 + task, wall_s=2.0))
    return out


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"config": {
        "env": {"name": "shop", "relay": {"max_turns": 4}}, "rollouts": 2, "seed": 0,
        "model": {"model": "m1", "base_url": "http://127.0.0.1:1/v1"}},
        "verifiers": [{"name": "resolved"}, {"name": "polite"}]}))
    with (folder / "episodes.jsonl").open("wb") as fh:
        for ep in _episodes():
            line, side = episode_parts(ep)
            if side is not None:
                (folder / "episodes").mkdir(exist_ok=True)
                (folder / "episodes" / f"{ep.info.episode_id}.json").write_bytes(side)
            fh.write(line + b"\n")
    return folder


def test_inspects_reader_reads_back_every_episode(run: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert (run / "episodes" / "ep-2-0.json").is_file()  # a long one, read whole
    assert cli.main(["export", str(run), "--format", "inspect"]) == 0
    [path] = run.glob("*_shop_interplay.json")
    assert f"exported 6 episodes to {path}" in capsys.readouterr().out
    # `inspect view` lists a folder's logs as this does: the file is found as a log.
    assert [Path(i.name).name for i in inspect_log.list_eval_logs(str(run))] == [path.name]
    log = inspect_log.read_eval_log(str(path))
    assert log.status == "success" and log.eval.task == "shop"
    assert log.eval.model == "interplay/m1" and log.eval.config.epochs == 2
    assert log.eval.task_args == {"relay": {"max_turns": 4}}
    assert log.eval.dataset.sample_ids == [0, 1, 2]
    assert log.results is not None and log.results.total_samples == 6
    assert log.results.completed_samples == 5
    reward = next(s for s in log.results.scores if s.name == "reward")
    assert reward.metrics["mean"].value == pytest.approx((0 + 0.5 + 0.5 + 1 + 1) / 5)
    assert log.stats.model_usage["m1"].total_tokens == 6 * (13 + 25 + 6)
    episodes = {ep.info.episode_id: ep for ep in _episodes()}
    assert log.samples is not None and len(log.samples) == 6
    for sample in log.samples:
        ep = episodes[sample.uuid]
        assert (sample.id, sample.epoch) == (ep.info.task_idx, ep.info.rollout + 1)
        assert sample.input == ep.task.prompt and sample.target == "ok"
        agent = ep.traces[0]
        assert [m.role for m in sample.messages] == [m.role for m in agent.messages]
        assert [m.text for m in sample.messages] == [m.text for m in agent.messages]
        call, bad = sample.messages[2].tool_calls
        assert (call.function, call.arguments) == ("find", {"q": f"order {ep.info.task_idx}"})
        assert bad.parse_error and bad.arguments == {"raw": "{not json"}
        assert sample.messages[3].tool_call_id == "c1" and sample.messages[3].function == "find"
        assert sample.metadata["seats"]["user"][0]["content"] == "you are a customer"
        assert sample.metadata["seed"] == ep.info.seed
        assert sample.metadata["task_info"] == {"tier": ep.info.task_idx}
        assert sample.model_usage["m1"].total_tokens == 44
        if ep.error_type:
            assert sample.scores is None and "model_error" in sample.error.message
            continue
        assert sample.error is None
        assert sample.scores["reward"].value == ep.reward
        assert sample.scores["resolved"].explanation == f"resolved {ep.info.task_idx}"
        assert sample.scores["resolved"].metadata["info"] == {"checks": [ep.info.task_idx]}
        assert sample.scores["polite"].metadata["weight"] == 0.0
    assert log.samples[2].metadata["harness_info"] == {"assistant": {"codex": {"session": "s1"}}}


def test_a_real_run_exports_and_reads_back(
        tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> None:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        return ScriptedReply.text("apple")

    model = scripted_model(handler)
    out = tmp_path / "run"
    cli.main(["eval", "echo", "-n", "3", "--base-url", model.base_url, "-o", str(out),
              "--quiet", "--no-report"])
    path, written = export_plugged("inspect", out, tmp_path / "2026-01-01T00-00-00_echo.json")
    assert written.episodes == 3
    log = inspect_log.read_eval_log(str(path))
    records = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(s.uuid for s in log.samples) == sorted(r["info"]["episode_id"]
                                                         for r in records)
    for sample in log.samples:
        assert sample.messages[-1].role == "assistant" and sample.messages[-1].text == "apple"
        assert sample.scores["reward"].value == 1.0 * (sample.id == 0)


def test_without_inspect_ai_the_line_says_what_to_install(
        run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = sorted(p.name for p in run.iterdir())
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)
    with pytest.raises(InterplayError, match=r"pip install 'interplay\[inspect\]'"):
        export_plugged("inspect", run)
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written, half or whole


def test_an_always_on_agents_private_notes_are_marked_private(tmp_path: Path) -> None:
    # A private note she never reads: the transcript must not pass it off as a reply to her.
    out = run_note_day(tmp_path)
    path, _ = export_plugged("inspect", out, tmp_path / "2026-01-01T00-00-00_day.json")
    [sample] = inspect_log.read_eval_log(str(path)).samples
    said = [i for i, m in enumerate(sample.messages) if m.role == "assistant"]
    private = [i for i in said if (sample.messages[i].metadata or {}).get("private")]
    assert private and {sample.messages[i].text for i in private} == {PRIVATE_NOTE}
    assert all(sample.messages[i].metadata is None for i in said if i not in private)
    assert sample.metadata["private_messages"] == private
