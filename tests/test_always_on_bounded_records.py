"""An always_on episode's records stay bounded whatever the agent does: an agent that echoes her
every line back (each of her questions then draws a yes) runs a generated week to max_wakes, and
its side file stores each request as what it adds to the call before (a conversation resent in
every call is stored once), reads back whole, and stays under the documented bound; past the
bound, what was cut is said in the record. Over real HTTP against the scripted model, through
the runner and the command, with real files."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path

from interplay import cli
from interplay._plumbing import aio as _aio
from interplay.builtin_envs.always_on.errands import Errands
from interplay.contracts.scenario import generate_tasks
from interplay.run import whole_record
from interplay.run.loader import load_env
from interplay.run.side_files import LINE_BOUND, SIDE_BOUND, episode_parts, side_ref
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, run_scripted
from interplay.values.records import (
    Episode,
    EpisodeInfo,
    ModelCall,
    Task,
    Trace,
    converter,
    to_json,
)

_LINE = re.compile(r"^\[[^\]]+\] (.*)$", re.M)


def echo(request: ScriptedRequest) -> ScriptedReply | str:
    """Her every line back to her; her seat says yes to everything."""
    messages = request.messages
    if "role-playing a user" in str(messages[0].get("content")):
        return "Yes, please go ahead."
    if messages[-1]["role"] == "tool":
        return ""
    hers = [b for b in _LINE.findall(str(messages[-1].get("content") or "")) if "(the user)" in b]
    if not hers:
        return ScriptedReply.tool_call("stay_quiet", {"reason": "nothing"})
    return ScriptedReply.tool_call("message_user", {"text": " / ".join(hers)})


@functools.cache
def echoed_week() -> Episode:
    task = next(generate_tasks(Errands(), seed=0))
    env = load_env("always-on-generated", {"count": 1})
    run = _aio.run(run_scripted(env, task, echo, seed=0, keep_bytes=0))
    assert run.episode.error is None, run.episode.error
    return run.episode


def written(tmp_path: Path, episode: Episode, bound: int = SIDE_BOUND) -> tuple[dict, Path]:
    line, side = episode_parts(episode, bound)
    assert side is not None
    path = tmp_path / side_ref(episode.info.episode_id)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(side)
    return json.loads(line), path


def test_an_echoing_agents_week_is_stored_once_and_read_back_whole(tmp_path: Path) -> None:
    episode = echoed_week()
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "max_wakes" and ao["summary"]["counts"]["wakes"] == 400
    calls = sum(len(t.model_calls) for t in episode.traces)
    resent = sum(len(json.dumps(c.request)) for t in episode.traces for c in t.model_calls)
    assert calls > 1000 and resent > 80_000_000  # every request resends the conversation
    line, path = written(tmp_path, episode)
    # The line stays small; the side file holds each request as what it adds (about 2.6 MB
    # where the requests whole are over 80 MB), far under the documented bound, nothing cut.
    assert len(json.dumps(line)) <= LINE_BOUND and "cut" not in line["side"]
    assert path.stat().st_size < 8_000_000 < SIDE_BOUND
    whole = whole_record(line, tmp_path)
    assert whole == json.loads(to_json(episode))
    assert converter().structure(whole, Episode) == episode


def test_a_side_file_past_its_bound_is_cut_to_fit_and_says_what_was_cut(
        tmp_path: Path) -> None:
    episode = echoed_week()
    line, path = written(tmp_path, episode, bound=1_000_000)
    assert path.stat().st_size <= 1_000_000
    cut = line["side"]["cut"]
    assert cut["bound"] == 1_000_000 and cut["size"] > 2_000_000
    assert cut["clipped_to"] == 256 and cut["strings_clipped"] > 0 and cut["chars_cut"] > 0
    assert cut["requests_dropped"] > 1000 and cut["items_dropped"] > 0
    whole = whole_record(line, tmp_path)
    assert whole["cut"] == cut
    assert "characters cut]" in path.read_text()
    # What is left still reads as an episode, its scores as they were.
    read = converter().structure(whole, Episode)
    assert read.reward == episode.reward and read.rewards == episode.rewards


def test_a_window_sliding_over_a_conversation_is_stored_as_pieces(tmp_path: Path) -> None:
    # A Responses caller whose input keeps the last three items (parsed anew each call, so
    # nothing is shared by identity), then starts over: each request stored as what it adds.
    items = [{"type": "message", "role": "user", "content": f"line {i} " + "x" * 3000}
             for i in range(40)]
    calls = [ModelCall(id=f"mc_{i}", api="responses", request={
        "model": "m", "input": json.loads(json.dumps(items[max(0, i - 2):i + 1])),
        "instructions": "be brief" if i < 30 else "be briefer"}) for i in range(40)]
    calls.append(ModelCall(id="mc_x", request={"model": "m", "messages": []}))
    episode = an_episode(calls)
    line, path = written(tmp_path, episode)
    assert path.stat().st_size < 40 * 3100 + LINE_BOUND + 20_000  # each item once, not thrice
    side = json.loads(path.read_text())
    assert side["traces"][0]["model_calls"][5]["request_shared"] == {
        "call": 4, "input": [[1, 2], [-1, 1]], "same": ["model", "instructions"]}
    assert whole_record(line, tmp_path) == json.loads(to_json(episode))


def an_episode(calls: list[ModelCall]) -> Episode:
    info = EpisodeInfo(episode_id="ep1", env="e", task_idx=0)
    return Episode(info=info, task=Task(0), traces=[Trace(agent="a", episode=info,
                                                          seat="assistant", model_calls=calls)],
                   results={"x": {"notes": "n" * (LINE_BOUND + 10)}})


def test_an_echoing_week_through_the_command_writes_a_bounded_record(
        tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> None:
    model = scripted_model(echo, keep_requests=0)
    out = tmp_path / "run"
    assert cli.main(["eval", "always-on-generated", "-n", "1", "--base-url", model.base_url,
                     "-o", str(out), "--quiet", "--no-report"]) == 0
    [line] = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert line["results"]["always_on"]["end_reason"] == "max_wakes"
    side = out / line["side"]["file"]
    assert side.stat().st_size < 8_000_000 and "cut" not in line["side"]
    whole = whole_record(line, out)
    agent = whole["traces"][0]["model_calls"]
    assert len(agent) >= 800 and len(agent[-1]["request"]["messages"]) > 1000
    assert model.received > 1000 and model.requests == []
