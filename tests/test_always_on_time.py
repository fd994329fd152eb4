"""Time that is right at every rate. With the clock running during the agent's turns
(``rate`` > 0), every event that falls due while a turn runs (a trigger's fire, a contact's
answer, her read and her reply) takes effect at its due time, is stamped with it, and reaches
the agent at the next wake, which says both times; ``late_events`` counts what reached the
agent after its due minute. A tool call made after an event's due time sees what it did. App
changes between two wakes count for the coming wake. Replies that would land while she sleeps
or is busy follow the rule her settings choose."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import always_on_support as support
import pytest
from always_on_support import Agent, by_pattern, make_env, quiet, run, say, timeline, wakes

from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted
from interplay.world import times

TOKYO = "Asia/Tokyo"


@pytest.fixture(autouse=True)
def script_user(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")


def t(at: str, tz: str = TOKYO) -> float:
    """Seconds from the run's start (10:00 on 2025-06-02) of a local time."""
    return times.parse_instant(at, tz) - times.parse_instant("2025-06-02T10:00", tz)


def tokyo(**scenario: Any) -> dict[str, Any]:
    return {"start": "2025-06-02T10:00", "timezone": TOKYO, "end": "PT12H", **scenario}


TOKYO_USER = {"timezone": TOKYO}


async def test_a_trigger_due_mid_turn_fires_at_its_time_and_reaches_the_agent_late(
        tmp_path: Path) -> None:
    """The ten-line scenario: 10:00 Tokyo, rate 600, an alert at 10:04, a turn of 1 s (10
    simulated minutes). Before, the trigger fired at 10:10:07.9, recorded as due then."""
    env = make_env(tmp_path, tokyo(rate=600.0, tasks=[{"prompt": "hello"}], triggers=[
        {"name": "brief", "at": "2025-06-02T10:04",
         "actions": [{"kind": "notify", "source": "calendar", "text": "stand-up soon"}]}]),
        user=TOKYO_USER)
    agent = Agent(lambda text: ScriptedReply.tool_call("stay_quiet", {}, latency_s=1.0))
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    [fire] = timeline(episode, "fire")
    assert fire["at"] == "2025-06-02T10:04:00+09:00"
    first, second = wakes(episode)[:2]
    assert first["end_t"] > t("2025-06-02T10:09")  # the turn ran on past the alert
    [alert] = [s for s in second["sources"] if s["kind"] == "alert"]
    assert alert["due"] == "2025-06-02T10:04:00+09:00" and alert["late"] is True
    assert second["t"] >= first["end_t"] > alert["due_t"]
    # The line the agent read says when it was due and when it reached it.
    reached = dt.datetime.fromisoformat(second["at"])
    assert re.search(rf"\[Mon 2025-06-02 10:04 Asia/Tokyo; reached you at "
                     rf"{reached:%H:%M}\] Alert from calendar: stand-up soon", agent.wakes[1])
    assert episode.results["always_on"]["summary"]["counts"]["late_events"] == 1


async def test_at_rate_0_the_same_scenario_is_on_time(tmp_path: Path) -> None:
    env = make_env(tmp_path, tokyo(rate=0.0, tasks=[{"prompt": "hello"}], triggers=[
        {"name": "brief", "at": "2025-06-02T10:04",
         "actions": [{"kind": "notify", "source": "calendar", "text": "stand-up soon"}]}]),
        user=TOKYO_USER)
    agent = Agent(lambda text: ScriptedReply.tool_call("stay_quiet", {}, latency_s=0.2))
    episode = await run(env, agent)
    [fire] = timeline(episode, "fire")
    assert fire["at"] == "2025-06-02T10:04:00+09:00"
    assert wakes(episode)[1]["at"] == "2025-06-02T10:04:00+09:00"
    assert "[Mon 2025-06-02 10:04 Asia/Tokyo] Alert from calendar" in agent.wakes[1]
    assert episode.results["always_on"]["summary"]["counts"]["late_events"] == 0


async def test_her_read_and_reply_mid_turn_happen_at_their_times(tmp_path: Path) -> None:
    """She reads the message when it is sent, though the agent's turn goes on for minutes;
    her reply lands when she wrote it and reaches the agent at its next wake."""
    env = make_env(tmp_path, tokyo(rate=600.0, tasks=[{"prompt": "plan my day"}]),
                   user={**TOKYO_USER, "reply_delays": {"free": "PT2M"},
                         "answers": [{"text": "sounds good"}, {"nothing": True}]})
    agent = Agent(by_pattern({"plan my day": say("Shall I book lunch?"),
                              "sounds good": quiet()}),
                  after_tools=ScriptedReply.text("thinking it over", latency_s=1.0))
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    ao = episode.results["always_on"]
    [sent] = ao["response"][:1]
    first = ao["replies"][0]
    assert first["read_t"] == sent["t"]  # read when it was sent, not after the turn
    assert first["wrote_t"] == pytest.approx(sent["t"] + 120, abs=1e-6)
    assert wakes(episode)[0]["end_t"] > first["wrote_t"]  # she wrote while the agent worked
    [reply] = [s for s in wakes(episode)[1]["sources"] if s["kind"] == "user_reply"]
    assert reply["due_t"] == first["wrote_t"] and reply["late"] is True
    assert first["reached_t"] == wakes(episode)[1]["t"]
    reads = timeline(episode, "read")
    assert reads[0]["t"] == sent["t"]


async def test_a_contact_answer_mid_turn_is_in_the_inbox_for_the_next_tool_call(
        tmp_path: Path) -> None:
    """The answer lands in the inbox at its due time: a tool call after it finds it, whatever
    the agent is doing; its alert reaches the agent at the next wake."""
    env = make_env(tmp_path, tokyo(
        rate=600.0, tasks=[{"prompt": "ask the venue"}],
        apps=[{"kind": "inbox", "state": {"address": "me@x.example"}}],
        contacts=[{"name": "venue", "replies": ["Yes, Friday works."], "delay": "PT2M",
                   "app": "inbox", "address": "venue@x.example"}],
        triggers=[{"name": "asks", "on_tool": "send_email",
                   "actions": [{"kind": "reply", "contact": "venue"}]}]), user=TOKYO_USER)
    seen: list[str] = []

    def handle(request: ScriptedRequest) -> ScriptedReply | str:
        msgs = request.messages
        if msgs[-1]["role"] != "tool":
            text = str(msgs[-1].get("content"))
            if "ask the venue" in text:
                return ScriptedReply.tool_call("send_email", {
                    "to": "venue@x.example", "subject": "Friday?", "body": "Free?"})
            return ScriptedReply.tool_call("stay_quiet", {})
        tools_done = sum(1 for m in msgs if m["role"] == "tool")
        if tools_done == 1 and "sent m" in str(msgs[-1].get("content")):
            # 0.5 s at rate 600: five simulated minutes later, look at the inbox.
            return ScriptedReply.tool_call("list_emails", {}, latency_s=0.5)
        seen.append(str(msgs[-1].get("content")))
        return ""

    task = next(iter(env.tasks()))
    episode = (await run_scripted(env, task, handle)).episode
    assert episode.error is None, episode.error
    assert "Yes, Friday works." not in seen[0]  # list_emails returns rows without bodies
    assert "venue@x.example" in seen[0]
    [received] = [e for e in timeline(episode, "change") if e["action"] == "email_received"]
    asked = timeline(episode, "contact_asked")[0]
    assert received["t"] == pytest.approx(asked["t"] + 120, abs=1e-6)
    assert (received["wake"], received["phase"]) == (1, "turn")
    [answer] = [s for s in wakes(episode)[1]["sources"] if s["kind"] == "contact_reply"]
    assert answer["due_t"] == received["t"] and answer["late"] is True


async def test_changes_between_two_wakes_count_for_the_coming_one(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "hi"}],
                              "apps": [{"kind": "shop", "state": {"items": {
                                  "tea": {"name": "tea", "price": 5, "stock": 3}}}}],
                              "triggers": [
                                  {"name": "price", "at": "2025-06-02T10:30", "actions": [
                                      {"kind": "tool", "app": "shop", "tool": "set_price",
                                       "args": {"sku": "tea", "price": 6}}]},
                                  {"name": "ping", "at": "2025-06-02T11:00", "actions": [
                                      {"kind": "notify", "text": "ping"}]}]})
    episode = await run(env, Agent(lambda text: quiet()))
    [change] = timeline(episode, "change")
    assert change["at"] == "2025-06-02T10:30:00+02:00"
    assert (change["wake"], change["phase"]) == (2, "before_turn")
    assert wakes(episode)[1]["at"] == "2025-06-02T11:00:00+02:00"


@pytest.mark.parametrize(("rule", "wrote"), [("anyway", "2025-06-02T23:30:00+02:00"),
                                             ("when_free", "2025-06-03T07:00:00+02:00")])
async def test_a_reply_that_would_land_while_she_sleeps_follows_her_rule(
        tmp_path: Path, rule: str, wrote: str) -> None:
    env = make_env(tmp_path, {"end": "P2D", "triggers": [
        {"name": "late", "at": "2025-06-02T22:50", "actions": [{"kind": "notify",
                                                                "text": "late"}]}]},
        user={"awake": ["07:00", "23:00"], "reply_delays": {"free": "PT40M"},
              "reply_lands": rule, "answers": [{"text": "ok"}]})
    agent = Agent(by_pattern({"Alert from": say("one more thing")}, default=quiet()))
    episode = await run(env, agent)
    first = episode.results["always_on"]["replies"][0]
    assert first["read_at"] == "2025-06-02T22:50:00+02:00" and first["wrote_at"] == wrote
    assert first.get("moved_from") == (None if rule == "anyway"
                                       else "2025-06-02T23:30:00+02:00")
    assert episode.results["always_on"]["summary"]["settings"]["reply_lands"] == rule


async def test_a_reply_that_would_land_in_a_busy_block_waits_when_her_rule_says(
        tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D", "triggers": [
        {"name": "a", "at": "2025-06-02T08:50", "actions": [{"kind": "notify", "text": "a"}]}]},
        user={"busy": [{"start": "09:00", "end": "12:00"}], "reply_delays": {"free": "PT20M"},
              "reply_lands": "when_free", "answers": [{"text": "ok"}]})
    episode = await run(env, Agent(by_pattern({"Alert from": say("hello")}, default=quiet())))
    first = episode.results["always_on"]["replies"][0]
    assert first["wrote_at"] == "2025-06-02T12:00:00+02:00"


async def test_what_fell_due_during_the_last_turn_is_pending_at_the_end(tmp_path: Path) -> None:
    env = make_env(tmp_path, tokyo(rate=600.0, tasks=[{"prompt": "hello"}], triggers=[
        {"name": "brief", "at": "2025-06-02T10:04",
         "actions": [{"kind": "notify", "source": "calendar", "text": "stand-up soon"}]}]),
        user=TOKYO_USER, always_on={"max_wakes": 1})
    agent = Agent(lambda text: ScriptedReply.tool_call("stay_quiet", {}, latency_s=1.0))
    episode = await run(env, agent)
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "max_wakes" and len(wakes(episode)) == 1
    [fire] = timeline(episode, "fire")
    assert fire["at"] == "2025-06-02T10:04:00+09:00"  # it fired, at its time
    never = ao["summary"]["pending"]["alerts_never_delivered"]
    assert never["first"] == [{"at": "2025-06-02T10:04:00+09:00", "source": "calendar",
                               "text": "stand-up soon"}]
