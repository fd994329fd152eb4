"""The typed reading of an episode record (interplay.run.recorded): what the report, the view,
the export and the comparison read of an episode, from a line the kernel wrote, an older
record and a record of odd shapes alike."""

from __future__ import annotations

import json
from typing import Any

from interplay.export import rows
from interplay.run.recorded import RecordedTrace, read_episode
from interplay.values.records import (
    Episode,
    EpisodeInfo,
    Message,
    ModelCall,
    Reward,
    Task,
    Trace,
    Usage,
    to_json,
)


def _episode(error_type: str | None = None) -> Episode:
    info = EpisodeInfo(episode_id="ep-3-1", env="echo", task_idx=3, rollout=1, seed=11)
    trace = Trace(agent="bot", episode=info, seat="assistant", harness="chat", model="m",
                  stop_condition="agent_completed", reward=0.5,
                  messages=[Message("user", "hi"), Message("assistant", "hello")],
                  model_calls=[ModelCall(id="c1", usage=Usage(5, 2, 7))],
                  info={"segment_starts": [0, 1]},
                  rewards=[Reward("match", 0.5, reason="half")])
    user = Trace(agent="sim", episode=info, seat="user", trainable=False, reward=None)
    return Episode(info=info, task=Task(idx=3, prompt="say hello"), traces=[trace, user],
                   reward=0.5, error_type=error_type, error="it broke" if error_type else None,
                   rewards=[Reward("match", 0.5), Reward("match", 1.0, seat="assistant"),
                            Reward("match", 0.0)],
                   metrics={"score": 2.0}, wall_s=1.25)


def test_a_line_the_kernel_wrote_reads_as_the_episode_it_was() -> None:
    ep = read_episode(json.loads(to_json(_episode())))
    assert (ep.episode_id, ep.pair, ep.seed) == ("ep-3-1", (3, 1), 11)
    assert (ep.reward, ep.scored_reward, ep.is_error, ep.wall_s) == (0.5, 0.5, False, 1.25)
    assistant, user = ep.traces
    assert (assistant.seat, assistant.agent, assistant.harness, assistant.trainable) == (
        "assistant", "bot", "chat", True)
    assert [m["content"] for m in assistant.messages] == ["hi", "hello"]
    assert (assistant.reward, assistant.rewards[0].reason, user.trainable) == (0.5, "half", False)
    assert (ep.calls, ep.turns) == (1, 2)  # no metrics.turns: the most segments of a seat
    assert ep.seat_rewards() == {"assistant": 0.5, "user": None}
    assert ep.components() == {"match": 0.5, "match (assistant)": 1.0, "match #2": 0.0}
    assert [t.seat for t in rows.trainable_traces(ep)] == ["assistant"]
    assert rows.meta(ep, assistant) == {"episode_id": "ep-3-1", "task_idx": 3, "rollout": 1,
                                        "seat": "assistant", "agent": "bot", "reward": 0.5}


def test_an_error_episode_counts_no_reward_whatever_its_line_carries() -> None:
    line = json.loads(to_json(_episode(error_type="model_error")))
    line["reward"] = 0.5  # a line written before the rule
    ep = read_episode(line)
    assert (ep.reward, ep.scored_reward, ep.is_error) == (0.5, None, True)
    assert set(ep.seat_rewards().values()) == {None}
    assert set(ep.components().values()) == {None}


def test_an_older_record_names_its_seat_by_its_agent_and_holds_no_rollout() -> None:
    ep = read_episode({"info": {"task_idx": 0}, "metrics": {"turns": 4},
                       "traces": [{"agent": "assistant", "messages": []}]})
    (trace,) = ep.traces
    assert (trace.seat, trace.agent, ep.rollout, ep.pair, ep.turns) == (
        "assistant", "assistant", None, (0, 0), 4)
    # Whether it is training data is not said: the export takes it, the page marks nothing.
    assert trace.trainable is None
    assert list(rows.trainable_traces(ep)) == [trace]


def test_a_record_of_odd_shapes_reads_as_absent_or_as_text_never_a_crash() -> None:
    odd: Any = {"info": ["no"], "task": ["not", "a", "task"], "reward": "high",
                "traces": [7, {"seat": 5, "messages": "just text", "model_calls": [None],
                               "rewards": "none", "tool_runs": 3, "trainable": 0,
                               "info": {"segment_starts": [-1, "x", 2]}}],
                "rewards": [None, 3], "metrics": {"x": [1]}, "results": "text"}
    ep = read_episode(odd)
    assert (ep.episode_id, ep.task_idx, ep.reward, ep.scored_reward, ep.task) == (
        None, None, None, None, {})
    empty, shown = ep.traces
    assert empty == RecordedTrace.read({})
    assert shown.seat == "5" and shown.trainable is False and shown.rewards == ()
    # Messages that are not a list are one message holding them: shown, not dropped.
    assert shown.messages == ({"role": "?", "content": "just text"},)
    assert (shown.model_calls, shown.tool_runs, shown.segment_starts) == (({},), (), [2])
    assert (ep.turns, ep.components(), ep.always_on, ep.private_notes()) == (
        1, {"?": None, "? #2": None}, None, [])
    assert read_episode(None).traces == () and read_episode([1, 2]).task == {}


def test_without_transcripts_keeps_what_a_comparison_pairs() -> None:
    ep = read_episode(json.loads(to_json(_episode())))
    head = ep.without_transcripts()
    assert all(t.messages == () and t.model_calls == () for t in head.traces)
    assert (head.task, head.results, head.sandbox) == ({}, None, None)
    assert head.seat_rewards() == ep.seat_rewards()
    assert head.components() == ep.components()
    assert head.scored_reward == ep.scored_reward
