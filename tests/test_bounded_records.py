"""An episode's line in episodes.jsonl stays small whatever the run's length: a long episode's
transcripts, model calls and long records (an always_on timeline with the agent's private
notes and tool arguments) go to its side file, written before its line; a resume, the summary
and the report read the folder as before, and ``whole_record`` puts an episode back together
(over real HTTP against the scripted model, through the CLI, with real files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import always_on_support as support
import pytest
from always_on_support import Agent, by_pattern, make_env, quiet, say

from interplay import cli
from interplay.run import whole_record
from interplay.run.loader import env_from_toml
from interplay.run.results import (
    LINE_BOUND,
    record_usage,
    side_ref,
    slim_record,
    split_record,
    write_side,
)


@pytest.fixture(autouse=True)
def script_user(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")


def long_env(tmp_path: Path) -> Path:
    """Five days with 80 alerts: the agent's requests resend the conversation, so the
    episode's whole line is some megabytes."""
    alerts = [{"name": f"a{i}", "at": f"2025-06-0{2 + i // 20}T{8 + (i % 20) // 2:02d}:"
                                      f"{(i % 2) * 30:02d}",
               "actions": [{"kind": "notify", "source": "bank", "text": f"payment {i}"}]}
              for i in range(80)]
    env = make_env(tmp_path, {"end": "P5D", "tasks": [{"prompt": "watch my account"}],
                              "apps": [{"kind": "notes"}], "triggers": alerts},
                   user={"user_sim": "llm"})
    return Path(env.source)


def agent() -> Agent:
    """The agent, and her (the builtin llm sim, so that worker processes have it too)."""
    return Agent(by_pattern({"watch my account": say("Will do."),
                             "payment 7\\b": "a private note about payment 7"},
                            default=quiet()), user=lambda request: "ok")


def lines(out: Path) -> list[bytes]:
    return (out / "episodes.jsonl").read_bytes().splitlines()


@pytest.mark.parametrize("workers", [1, 2], ids=["one process", "workers"])
def test_a_long_episodes_line_stays_small_and_its_side_file_holds_the_rest(
        tmp_path: Path, scripted_model: Any, workers: int) -> None:
    scenario, out = long_env(tmp_path), tmp_path / "run"
    model = scripted_model(agent())
    # With workers, the episode runs in a worker process and its side file comes to the
    # parent with its line.
    spread = ["-w", str(workers)] if workers > 1 else []
    assert cli.main(["eval", str(scenario), "--base-url", model.base_url, "-o", str(out),
                     "--quiet", "--no-report", *spread]) == 0
    [raw] = lines(out)
    assert len(raw) < LINE_BOUND
    line = json.loads(raw)
    side = out / line["side"]["file"]
    assert side.is_file() and side.parent.name == "episodes"
    assert side.stat().st_size > 2 * LINE_BOUND  # the bulk, each request stored once
    ao = line["results"]["always_on"]
    assert "timeline" not in ao and ao["side_file"] == line["side"]["file"]
    assert ao["end_reason"] == "end_time" and ao["summary"]["counts"]["wakes"] > 50
    assert all("messages" not in t and "model_calls" not in t for t in line["traces"])
    whole = whole_record(line, out)
    assert "side" not in whole and "side_file" not in whole["results"]["always_on"]
    timeline = whole["results"]["always_on"]["timeline"]
    notes = [w["private_note"] for w in timeline if w["kind"] == "wake" and w["private_note"]]
    assert notes == ["a private note about payment 7"]
    calls = [c for w in timeline if w["kind"] == "wake" for c in w["tool_calls"]]
    assert {"name": "message_user", "arguments": {"text": "Will do."}}.items() <= \
        calls[0].items()
    assistant = next(t for t in whole["traces"] if t["seat"] == "assistant")
    user = next(t for t in whole["traces"] if t["seat"] == "user")
    assert len(assistant["model_calls"]) + len(user["model_calls"]) == len(model.requests)
    # The summary's tokens are the whole record's.
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tokens"]["total_tokens"] == record_usage(whole)["total_tokens"] > 0
    assert slim_record(line)["usage"] == slim_record(whole)["usage"]
    # whole_record takes the episodes file too.
    assert whole_record(line, out / "episodes.jsonl") == whole


def test_resume_and_the_report_read_a_split_episode(tmp_path: Path, scripted_model: Any,
                                                    capsys: Any) -> None:
    scenario, out = long_env(tmp_path), tmp_path / "run"
    model = scripted_model(agent())
    assert cli.main(["eval", str(scenario), "--base-url", model.base_url, "-o", str(out),
                     "--quiet", "--no-report"]) == 0
    first = json.loads((out / "summary.json").read_text())
    calls = len(model.requests)
    assert cli.main(["eval", "--resume", str(out), "--base-url", model.base_url, "--quiet"]) == 0
    assert len(model.requests) == calls  # nothing left to run
    again = json.loads((out / "summary.json").read_text())
    assert again["tokens"] == first["tokens"] and again["model_calls"] == first["model_calls"]
    page = (out / "report.html").read_text()
    assert "a private note about payment 7" in page  # from the side file
    assert "payment 79" in page


def test_the_side_file_is_written_before_the_line(tmp_path: Path, scripted_model: Any,
                                                  capsys: Any) -> None:
    scenario, out = long_env(tmp_path), tmp_path / "run"
    out.mkdir()
    (out / "episodes").write_text("a file where the side files' folder goes\n")
    model = scripted_model(agent())
    code = cli.main(["eval", str(scenario), "--base-url", model.base_url, "-o", str(out),
                     "--quiet", "--no-report"])
    assert code != 0
    assert "cannot write the next episode's side file" in capsys.readouterr().err
    # No line points at a side file that is not there: with no episode recorded, the run
    # leaves no episodes file at all (a run that recorded nothing leaves nothing of its own).
    assert not (out / "episodes.jsonl").exists()
    assert (out / "episodes").read_text() == "a file where the side files' folder goes\n"


def test_a_short_episode_keeps_its_line_whole(tmp_path: Path, scripted_model: Any) -> None:
    env = make_env(tmp_path, {"end": "PT2H", "tasks": [{"prompt": "hi"}]})
    out = tmp_path / "run"
    model = scripted_model(Agent(lambda text: quiet()))
    assert cli.main(["eval", str(env.source), "--base-url", model.base_url, "-o", str(out),
                     "--quiet", "--no-report"]) == 0
    [raw] = lines(out)
    line = json.loads(raw)
    assert "side" not in line and "timeline" in line["results"]["always_on"]
    assert not (out / "episodes").exists()
    assert whole_record(line, out) == line


def test_splitting_is_undone_exactly(tmp_path: Path) -> None:
    record = {"info": {"episode_id": "abc123", "task_idx": 0, "rollout": 0},
              "traces": [{"agent": "a", "seat": "a", "messages": [{"role": "user",
                                                                   "content": "x" * 5000}],
                          "model_calls": [{"usage": {"prompt_tokens": 3,
                                                     "completion_tokens": 2,
                                                     "total_tokens": 5}}],
                          "tool_runs": [], "reward": 0.5}],
              "results": {"big": {"short": 1, "long": ["y" * 3000]}, "blob": "z" * 3000,
                          "small": [1, 2]},
              "judge_calls": [{"usage": {"prompt_tokens": 7, "completion_tokens": 1,
                                         "total_tokens": 8}}],
              "reward": 0.5}
    kept, side = split_record(record, side_ref("abc123"))
    write_side(tmp_path, "abc123", json.dumps(side).encode())
    assert len(json.dumps(kept)) < 1000 < len(json.dumps(record))
    assert kept["results"] == {"big": {"short": 1, "side_file": "episodes/abc123.json"},
                               "small": [1, 2]}
    assert kept["traces"][0]["usage"] == {"prompt_tokens": 3, "completion_tokens": 2,
                                          "total_tokens": 5, "model_calls": 1}
    assert record_usage(kept) == record_usage(record)
    assert whole_record(kept, tmp_path) == record


async def test_the_parts_of_a_long_episode_put_back_are_its_whole_record(tmp_path: Path) -> None:
    """What the run writes (the line and the side file, made from the episode as it is) puts
    back together to exactly the record its whole line held, and reads back as an Episode."""
    from interplay._plumbing import codec as _codec
    from interplay.run.results import episode_line, episode_parts, write_side
    from interplay.testing import run_scripted
    from interplay.values.records import Episode, converter

    env = env_from_toml(long_env(tmp_path))()
    episode = (await run_scripted(env, next(iter(env.tasks())), agent())).episode
    line, side = episode_parts(episode)
    assert side is not None and len(line) < LINE_BOUND
    write_side(tmp_path, episode.info.episode_id, side)
    whole = whole_record(_codec.loads(line), tmp_path)
    assert whole == json.loads(episode_line(episode))
    again = converter().structure(whole, Episode)
    assert again.results == episode.results and len(again.traces[0].model_calls) > 50
