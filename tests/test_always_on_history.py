"""The always_on agent's context policy: a long run's requests stay within the budget, earlier
wakes fold into a digest built from the world's records (the user's lines with their times),
what was folded is recorded, the trace keeps the whole conversation while each model call
holds what was sent, and bad settings are refused at load (on the scripted model, over real
HTTP)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import always_on_support as support
import pytest
from always_on_support import Agent, by_pattern, make_env, quiet, run, say, wakes

from interplay import Harness, Segment, hookimpl
from interplay.builtin_envs.always_on.history import HistoryConfig, embedded_budget, resolve
from interplay.config.endpoint import Endpoint
from interplay.contracts.env import SeatSpec
from interplay.errors import InterplayError
from interplay.model.client import ModelClient
from interplay.model.local import N_CTX
from interplay.plugins.hookspecs import Register
from interplay.run.agent import Agent as RunAgent
from interplay.testing import ScriptedReply, ScriptedRequest, run_interplay

CHARS_PER_TOKEN = 3.0


@pytest.fixture(autouse=True)
def script_user(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")


def week(tmp_path: Path, history: dict[str, Any] | None) -> Any:
    """Five days: an alert every four hours, the user writing every morning and answering
    what the agent tells her."""
    return make_env(tmp_path, {
        "end": "P5D",
        "apps": [{"kind": "notes"}],
        "triggers": [{"name": "feed", "every": "PT4H", "actions": [
            {"kind": "notify", "source": "feed", "text": "news item {fire}: " + "x" * 120}]}],
        "lines": [{"at": f"2025-06-0{d}T07:30", "text": f"good morning, day {d}"}
                  for d in range(3, 7)],
        "tasks": [{"prompt": "keep an eye on the feed for me"}]},
        user={"answers": [{"text": "thanks, noted"}], "reply_delays": {"free": "PT10M"}},
        always_on={"history": history} if history is not None else None)


def agent() -> Agent:
    return Agent(by_pattern({
        "keep an eye": say("I will watch the feed."),
        "good morning": ScriptedReply.calls([("add_note", {"text": "she wrote " + "y" * 80}),
                                             ("message_user", {"text": "Morning! All calm."})]),
    }, default=quiet()), after_tools="noted privately " + "z" * 60)


def estimate(request: ScriptedRequest) -> float:
    """The request's estimated tokens: its messages and its tools, as the server got them."""
    body = request.body
    chars = sum(len(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode())
                for m in body["messages"])
    chars += len(json.dumps(body.get("tools") or [], separators=(",", ":")))
    return chars / CHARS_PER_TOKEN


def wake_opening(request: ScriptedRequest) -> bool:
    return request.messages[-1]["role"] == "user"


async def test_a_long_run_stays_within_the_budget_at_every_wake(tmp_path: Path) -> None:
    whole = agent()
    await run(week(tmp_path, {"mode": "all"}), whole)
    assert estimate(whole.requests[-1]) > 3000  # unfolded, the run outgrows the budget

    folded = agent()
    episode = await run(week(tmp_path, {"max_context_tokens": 3000}), folded)
    turns = [r for r in folded.requests if wake_opening(r)]
    assert len(turns) == len([r for r in whole.requests if wake_opening(r)]) > 30
    assert max(estimate(r) for r in turns) <= 3000
    # The calls a turn makes after its tool results add only that turn's own round.
    assert max(estimate(r) for r in folded.requests) <= 3000 + 200
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "end_time"
    contexts = [w["context"] for w in wakes(episode)]
    assert all(not c["over_budget"] and c["est_tokens"] <= 3000 for c in contexts)
    assert [c["folded_wakes"] for c in contexts] == sorted(c["folded_wakes"] for c in contexts)


async def test_the_digest_names_what_the_user_and_the_agent_said_with_their_times(
        tmp_path: Path) -> None:
    folded = agent()
    await run(week(tmp_path, {"keep_wakes": 1}), folded)
    last = folded.requests[-1].messages
    digest = last[0]["content"]
    assert digest.startswith("[always_on] Earlier in this run (wakes 1-")
    assert "[always_on] You are Dana's always-on assistant." in digest  # no system prompt
    assert ('- Wake 1, Mon 2025-06-02 08:00: Dana (the user) wrote: "keep an eye on the feed '
            'for me". You: sent #1 at 08:00: "I will watch the feed.".') in digest
    assert ('Wake 2, Mon 2025-06-02 08:10: Dana (the user) replied to your #1: "thanks, '
            'noted". You: stayed quiet.') in digest
    morning = re.search(r"- Wake \d+, Tue 2025-06-03 07:30: Dana \(the user\) wrote: \"good "
                        r"morning, day 3\"\. You: called add_note\(text=\"she wrote y+…\); "
                        r"sent #\d+ at 07:30: \"Morning! All calm\.\"\.", digest)
    assert morning is not None
    assert 'alert from feed: "news item 1: xxx' in digest
    # One earlier wake in full, then the current one: a tool call keeps its result.
    calls = {c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", ())}
    assert calls and all(m["tool_call_id"] in calls for m in last if m["role"] == "tool")
    assert sum(m["role"] == "user" for m in last) == 2


async def test_folding_is_recorded_and_the_trace_keeps_the_whole_conversation(
        tmp_path: Path) -> None:
    folded = agent()
    episode = await run(week(tmp_path, {"keep_wakes": 2}), folded)
    ao = episode.results["always_on"]
    entries = wakes(episode)
    n = len(entries)
    assert [w["context"]["folded_wakes"] for w in entries] == [max(0, i - 3) for i in
                                                                range(1, n + 1)]
    assert all(w["context"]["kept_wakes"] == min(2, w["wake"] - 1) for w in entries)
    assert ao["summary"]["counts"]["folded_wakes"] == n - 3
    assert episode.metrics["folded_wakes"] == n - 3
    assert episode.metrics["folded_turns"] == ao["summary"]["counts"]["folded_turns"] >= n - 3
    policy = {"mode": "fold", "keep_wakes": 2, "max_context_tokens": None,
              "chars_per_token": 3.0, "why": "settings"}
    assert ao["summary"]["settings"]["history"] == policy
    trace = episode.trace("assistant")
    assert trace.info["history"] == policy
    # The trace holds every wake; each model call holds what it was sent.
    wake_lines = [m.text for m in trace.messages if m.role == "user"
                  and m.text.startswith(("[Mon", "[Tue", "[Wed", "[Thu", "[Fri", "[Sat", "[al"))]
    assert len(wake_lines) == n
    for call, request in zip(trace.model_calls, folded.requests, strict=True):
        assert call.request["messages"] == request.messages
    assert len(trace.model_calls[-1].request["messages"]) < len(trace.messages) / 3


async def test_a_remote_endpoint_keeps_everything_unless_told(tmp_path: Path) -> None:
    whole = agent()
    episode = await run(week(tmp_path, None), whole)
    ao = episode.results["always_on"]
    assert ao["summary"]["settings"]["history"]["why"] == "remote endpoint"
    assert ao["summary"]["counts"]["folded_wakes"] == 0
    assert "context" not in wakes(episode)[-1]
    trace = episode.trace("assistant")
    sent = trace.model_calls[-1].request["messages"]
    assert len(sent) > 100 and sent == [m.wire() for m in trace.messages[:len(sent)]]


def test_auto_folds_on_the_embedded_model_within_its_window() -> None:
    assert embedded_budget(512) == int((N_CTX - 1024) * 0.75)
    assert embedded_budget(512) + 2 * 512 < N_CTX
    from interplay.builtin_harnesses.chat import ChatHarness

    # Not started: an agent's client reaches the embedded model only when it calls.
    agent = RunAgent(name="assistant", harness=ChatHarness(), client=ModelClient(Endpoint()),
                     spec=SeatSpec(sampling={"max_tokens": 256}))
    policy = resolve(HistoryConfig(), agent)
    assert (policy.mode, policy.max_context_tokens, policy.why) == (
        "fold", embedded_budget(256), "embedded model")
    assert resolve(HistoryConfig(mode="all"), agent).mode == "all"
    told = resolve(HistoryConfig(keep_wakes=3), agent)
    assert (told.keep_wakes, told.max_context_tokens, told.why) == (3, None, "settings")


@pytest.mark.parametrize(("history", "says"), [
    ({"keep_wakes": -1}, "history.keep_wakes is -1; set it to 0 or more"),
    ({"max_context_tokens": 0}, "history.max_context_tokens is 0"),
    ({"mode": "all", "keep_wakes": 3}, "keeps everything, so keep_wakes and"),
    ({"mode": "fold"}, "needs keep_wakes or max_context_tokens"),
    ({"chars_per_token": 0}, "chars_per_token must be more than 0"),
    ({"max_context_tokens": 200}, "history.max_context_tokens 200 cannot hold the system "
                                  "prompt, the tools and the first wake (about"),
])
def test_bad_settings_are_refused_at_load(tmp_path: Path, history: dict[str, Any],
                                          says: str) -> None:
    with pytest.raises(InterplayError, match=re.escape(says)) as caught:
        week(tmp_path, history)
    assert "\n" not in str(caught.value)


def test_the_command_refuses_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "scenario.json"
    user = {**support.USER, "user_sim": "llm"}
    path.write_text(json.dumps({**support.BASE, "end": "P1D", "user": user}))
    done = run_interplay("eval", str(path), "-o", str(tmp_path / "out"), "--set",
                         "env.always_on.history.keep_wakes=-2")
    assert done.returncode == 2
    assert "history.keep_wakes is -2; set it to 0 or more" in done.stderr
    assert "Traceback" not in done.stderr


class SessionHarness(Harness):
    """A harness whose program keeps the conversation: each turn it is sent the new message."""

    name = "session-keeper"

    async def launch(self, task: Any, ctx: Any) -> Segment:
        return Segment()

    async def resume(self, messages: Sequence[Any], ctx: Any) -> Segment:
        return Segment()


@hookimpl
def register_harnesses(register: Register) -> None:
    register(SessionHarness)


def test_folding_is_refused_for_a_harness_that_keeps_its_session(
        tmp_path: Path, register_plugin: Any) -> None:
    register_plugin(sys.modules[__name__], "history-tests")
    seats = {"seats": {"assistant": {"harness": "session-keeper"}}}
    with pytest.raises(InterplayError, match="the harness 'session-keeper' keeps its own "
                                             "session, so its history cannot be folded"):
        make_env(tmp_path, {**seats, "end": "P1D"}, always_on={"history": {"keep_wakes": 2}})
    make_env(tmp_path, {**seats, "end": "P1D"})  # auto: it keeps everything


def test_folding_is_refused_for_the_seats_a_run_resolved(register_plugin: Any) -> None:
    # A generated env, and any env whose seat a run gives such a harness: refused before a
    # model is called, on the seats as the run resolved them.
    from interplay.run.loader import load_env

    register_plugin(sys.modules[__name__], "history-tests")
    env = load_env("always-on-generated", {"always_on": {"history": {"keep_wakes": 2}}})
    seats = {**env.seats, "assistant": SeatSpec(harness="session-keeper")}
    with pytest.raises(InterplayError, match="step 'always_on': history: the harness "
                                             "'session-keeper' keeps its own session"):
        env.check_seats(seats)
    env.check_seats(dict(env.seats))  # the chat harness folds
