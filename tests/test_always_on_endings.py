"""How an always_on run ends (each ending with its reason and note), what it leaves pending, the
records a verifier reads, the builtin llm user sim in always_on, and the same seed giving the
same timeline byte for byte."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import always_on_support as support
import pytest
from always_on_support import Agent, by_pattern, make_env, quiet, run, say, timeline, wakes

from interplay.errors import InterplayError
from interplay.testing import ScriptedReply, ScriptedRequest
from interplay.values.records import to_json


@pytest.fixture(autouse=True)
def script_user(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")


def alerts(*times: str) -> list[dict[str, Any]]:
    return [{"name": f"alert{i}", "at": at, "actions": [{"kind": "notify", "text": f"a{i}"}]}
            for i, at in enumerate(times)]


async def test_end_time_gives_a_final_check_in_with_what_is_due(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "2025-06-02T12:00",
                              "triggers": alerts("2025-06-02T09:00", "2025-06-02T12:00",
                                                 "2025-06-02T13:00")})
    agent = Agent(lambda text: quiet())
    episode = await run(env, agent)
    ao = episode.results["always_on"]
    last = wakes(episode)[-1]
    assert last["final"] and last["sources"][0].get("text") == "a1"
    assert "[always_on] Final check-in (Mon 2025-06-02 12:00 Europe/Berlin)" in agent.wakes[-1]
    assert ao["end_reason"] == "end_time" and "final check-in" in ao["end_note"]
    # The 13:00 alert never came: its trigger is still ahead.
    assert ao["summary"]["pending"]["alerts_never_delivered"]["first"] == [
        {"at": "2025-06-02T13:00:00+02:00", "trigger": "alert2"}]
    assert episode.trace("assistant").stop_condition == "always_on_end_time"
    assert ao["conversation"][-1] == {"from": "step", "kind": "end", "reason": "end_time",
                                      "note": ao["end_note"], "at": "2025-06-02T12:00:00+02:00",
                                      "t": 14400.0}


async def test_a_done_with_text_in_one_sitting_ends_after_the_agents_turn(tmp_path: Path,
                                                                           ) -> None:
    env = make_env(tmp_path, {"tasks": [{"prompt": "book a table"}],
                              "triggers": alerts("2025-06-02T09:00")},
                   user={"answers": [{"text": "Perfect, thanks!", "done": True}],
                         "reply_delays": {"free": "PT2M"}})
    agent = Agent(by_pattern({"book a table": say("Booked for 8pm."),
                              "Perfect": say("Enjoy!")}, default=quiet()))
    episode = await run(env, agent)
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "user_done"
    assert "after the agent's turn" in ao["end_note"]
    assert [w["sources"][-1].get("done") for w in wakes(episode)] == [None, True]
    assert wakes(episode)[-1]["t"] == 120.0  # delivered after her reply delay
    assert [r["text"] for r in ao["response"]] == ["Booked for 8pm.", "Enjoy!"]
    assert support.READS[0].done_ends_run  # a one-sitting run


async def test_a_blank_done_ends_the_run_at_once(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"tasks": [{"prompt": "book a table"}],
                              "triggers": alerts("2025-06-02T09:00")},
                   user={"answers": [{"done": True}]})
    episode = await run(env, Agent(by_pattern({"book a table": say("Booked.")})))
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "user_done" and "at once" in ao["end_note"]
    assert len(wakes(episode)) == 1  # the 09:00 alert never woke the agent
    assert not any(r["last_read"] for r in ao["replies"])


async def test_a_done_in_a_multi_day_run_is_recorded_and_the_run_goes_on(tmp_path: Path,
                                                                          ) -> None:
    env = make_env(tmp_path, {"end": "P2D", "tasks": [{"prompt": "plan it"}],
                              "triggers": alerts("2025-06-03T09:00")},
                   user={"answers": [{"text": "that's all", "done": True}]})
    episode = await run(env, Agent(by_pattern({"plan it": say("On it.")}, default=quiet())))
    ao = episode.results["always_on"]
    assert not support.READS[0].done_ends_run
    assert (ao["replies"][0]["outcome"], ao["replies"][0]["done"]) == ("replied", True)
    assert ao["end_reason"] == "end_time" and len(wakes(episode)) == 4
    # Each of her dones is counted (her wrap-up's, after the run, is not a read that counts).
    assert ao["summary"]["counts"]["user_dones"] == sum(
        r["done"] for r in ao["replies"] if not r["last_read"]) >= 1


async def test_max_wakes_gives_the_last_wake_the_notice(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D", "triggers": alerts(
        "2025-06-02T09:00", "2025-06-02T10:00", "2025-06-02T11:00")},
        always_on={"max_wakes": 2})
    agent = Agent(lambda text: quiet())
    episode = await run(env, agent)
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "max_wakes" and len(wakes(episode)) == 2
    assert wakes(episode)[1]["final"] and "[always_on] This is your last turn" in agent.wakes[1]
    assert ao["summary"]["pending"]["alerts_never_delivered"]["count"] == 1
    assert ao["triggers"]["alert2"]["next"] == "2025-06-02T11:00:00+02:00"


def test_a_budget_that_is_no_time_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(InterplayError, match="budget_s must be a number of seconds more than 0"):
        make_env(tmp_path, {"end": "P1D"}, always_on={"budget_s": 0})


async def test_the_budget_makes_the_closing_wake_fit(tmp_path: Path) -> None:
    seats = {"assistant": {"timeout_s": 0.5}, "user": {"timeout_s": 0.5}}
    env = make_env(tmp_path, {"end": "P1D", "seats": seats, "triggers": alerts(
        *(f"2025-06-02T{h:02d}:00" for h in range(9, 20)))}, always_on={"budget_s": 2.5})
    agent = Agent(lambda text: ScriptedReply.tool_call("stay_quiet", {}, latency_s=0.3))
    t0 = time.monotonic()
    episode = await run(env, agent)
    wall = time.monotonic() - t0
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "budget" and wakes(episode)[-1]["final"]
    assert "closing wake carried the last-turn notice" in ao["end_note"]
    assert 2 <= len(wakes(episode)) < 11
    assert wall < 2.5 + 1.0  # the budget (+ set-up): the closing wake fit in it
    # When and why the budget chose that wake: the reserve did not fit in what was left.
    budget = ao["real"]["budget"]
    closing = budget["closing"]
    assert closing["wake"] == len(wakes(episode)) and closing["at"] == wakes(episode)[-1]["at"]
    assert closing["reserve_s"] > closing["left_s"]
    assert closing["reserve_s"] == pytest.approx(2 * closing["longest_wake_s"], abs=1e-3)
    assert closing["spent_s"] + closing["left_s"] == pytest.approx(2.5, abs=0.01)
    assert budget["ran_out"] is None and budget["cut"] is None


async def test_nothing_left_to_wake_the_agent_finishes_or_is_stuck(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"triggers": alerts("2025-06-02T09:00")})
    episode = await run(env, Agent(lambda text: quiet()))
    assert episode.results["always_on"]["end_reason"] == "finished_nothing_pending"
    # She is never free, so the agent's message stays unread, and only a recurring trigger
    # that wakes nobody is left.
    env = make_env(tmp_path, {
        "triggers": [*alerts("2025-06-02T09:00"),
                     {"name": "tick", "every": "PT1H", "actions": [
                         {"kind": "notify", "to": "phone", "text": "tick"}]}]},
        user={"busy": [{"start": "00:00", "end": "24:00"}]})
    episode = await run(env, Agent(by_pattern({"Alert": say("hello?")})))
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "stuck"
    assert ao["summary"]["pending"]["unread_by_user"]["count"] == 1
    # The wake that sent it, and when: the alert's at 09:00.
    [unread] = ao["summary"]["pending"]["unread_by_user"]["first"]
    assert (unread["n"], unread["wake"], unread["text"]) == (1, 1, "hello?")
    assert unread["at"].startswith("2025-06-02T09:00") and unread["t"] == 3600.0
    assert "1 unread by user" in ao["end_note"]
    assert any(e["kind"] == "read_unreachable" for e in ao["timeline"])
    assert sum(e["kind"] == "jump" for e in ao["timeline"]) == 1 + 20  # 24 idle, 20 listed


async def test_a_failed_turn_ends_the_run_keeping_what_it_sent(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "go"}]})
    agent = Agent(by_pattern({"go": say("sent before the failure")}),
                  after_tools=ScriptedReply.fault(400))
    episode = await run(env, agent)
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "error" and ao["error_type"] is not None
    assert episode.error_type == ao["error_type"]
    [sent] = ao["response"]
    assert sent["leftover"] and not sent["read"]
    assert ao["summary"]["pending"]["unread_by_user"]["first"][0]["leftover"]
    assert ao["conversation"][1]["leftover"] is True
    assert not ao["replies"]  # no wrap-up read after a failed turn


async def test_a_turn_cut_at_the_harness_turn_cap_ends_the_run_unscored(
        tmp_path: Path) -> None:
    """A turn the chat harness stops at its ``max_turns`` (no error type on the trace) ends
    the run as an error, and the episode is given to no verifier."""
    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "go", "answer": "hi"}],
                              "verifiers": [{"kind": "contains"}],
                              "seats": {"assistant": {"harness_config": {"max_turns": 1}}}})
    episode = await run(env, Agent(by_pattern({"go": say("hi")})))
    ao = episode.results["always_on"]
    assert (ao["end_reason"], ao["error_type"]) == ("error", "max_turns")
    assert episode.error_type == "max_turns"
    assert episode.error is not None and "max_turns" in episode.error
    assert episode.reward is None and episode.rewards == []


async def test_a_timed_out_turn_ends_the_run(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "go"}],
                              "seats": {"assistant": {"timeout_s": 0.5}}})
    agent = Agent(by_pattern({"go": say("before the hang")}), after_tools=ScriptedReply.hang())
    episode = await run(env, agent)
    ao = episode.results["always_on"]
    assert (ao["end_reason"], ao["error_type"]) == ("error", "timeout")
    assert ao["response"][0]["leftover"]


async def test_a_failing_user_sim_ends_the_run(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "go"}]},
                   user={"answers": [{"error": "model down"}]})
    episode = await run(env, Agent(by_pattern({"go": say("hi")})))
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "user_error" and "model down" in ao["end_note"]


async def test_what_is_pending_at_the_end(tmp_path: Path) -> None:
    env = make_env(tmp_path, {
        "end": "2025-06-02T12:00",
        "apps": [{"kind": "inbox"}],
        "contacts": [{"name": "slowpoke", "replies": ["later"], "delay": "P1D"},
                     {"name": "friend", "persona": "thinks slowly", "delay": "PT1M"}],
        "triggers": [{"name": "mail", "on_tool": "send_email", "match": {"to": "s@*"},
                      "actions": [{"kind": "reply", "contact": "slowpoke"}]},
                     {"name": "friend", "on_tool": "send_email", "match": {"to": "f@*"},
                      "actions": [{"kind": "reply", "contact": "friend"}]},
                     *alerts("2025-06-02T15:00")],
        "lines": [{"at": "2025-06-02T18:00", "text": "tonight"}],
        "tasks": [{"prompt": "go"}]},
        user={"answers": [{"text": "will do"}], "reply_delays": {"free": "PT6H"}},
        always_on={"checks": True})
    agent = Agent(by_pattern({"go": ScriptedReply.calls([
        ("message_user", {"text": "first"}),
        ("send_email", {"to": "s@example.com", "subject": "?", "body": "?"}),
        ("schedule_check", {"note": "look again", "after": "PT8H"})]),
        "Final check-in": ScriptedReply.calls([
            ("message_user", {"text": "last words"}),
            ("send_email", {"to": "f@example.com", "subject": "?", "body": "?"})])},
        default=quiet()), contact=lambda r: ScriptedReply.text("hm", latency_s=1.0))
    episode = await run(env, agent)
    pending = episode.results["always_on"]["summary"]["pending"]
    got = {k: v["count"] for k, v in pending.items()}
    assert got == {"held_replies": 1, "unread_by_user": 1, "user_lines_not_delivered": 1,
                   "alerts_never_delivered": 2, "checks_not_due": 1,
                   "contact_replies_in_progress": 1}
    assert pending["contact_replies_in_progress"]["first"][0]["contact"] == "friend"
    assert pending["held_replies"]["first"][0]["text"] == "will do"
    # Sent in the final wake: she saw it only in her wrap-up, which is not a read.
    assert pending["unread_by_user"]["first"][0]["text"] == "last words"
    # What never reached the agent ends the conversation, before the end marker.
    tail = episode.results["always_on"]["conversation"][-4:]
    assert [(e["kind"], e.get("why")) for e in tail] == [
        ("undelivered", "held"), ("undelivered", "not due"), ("wrap_up", None), ("end", None)]


async def test_the_llm_user_sim_plays_her_in_always_on(tmp_path: Path) -> None:
    replies = iter(["#1 Yes please, book it", "", "###NOTHING###", "fine", "fine"])

    def user(request: ScriptedRequest) -> str:
        return next(replies)

    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "find a venue"}],
                              "triggers": alerts("2025-06-02T10:00")},
                   user={"user_sim": "llm", "description": "Dana, busy"})
    agent = Agent(by_pattern({"find a venue": say("Shall I book the Lindenhof?"),
                              "Alert": say("Another thing?")}, default=quiet()), user=user)
    episode = await run(env, agent)
    ao = episode.results["always_on"]
    first, second = ao["replies"][:2]
    assert (first["outcome"], first["reply_to"], first["text"]) == (
        "replied", 1, "Yes please, book it")
    assert second["outcome"] == "nothing" and second["used"]["malformed"] == 1
    assert ao["summary"]["counts"]["user_malformed"] == 1
    user_trace = episode.trace("user")
    assert not user_trace.trainable
    shown = user_trace.messages[1].content
    assert "#1 (2025-06-02T08:00:00+02:00): Shall I book the Lindenhof?" in shown
    assert "Earlier (2025-06-02T08:00:00+02:00) you wrote to the assistant: find a venue" in shown


@pytest.mark.parametrize("history", [None, {"keep_wakes": 1}], ids=["whole", "folded"])
async def test_the_same_seed_gives_the_same_timeline_byte_for_byte(
        tmp_path: Path, history: dict[str, Any] | None) -> None:
    env = make_env(tmp_path, {
        "end": "P3D",
        "apps": [{"kind": "inbox"}],
        "contacts": [{"name": "friend", "persona": "Alex", "delay": ["PT1H", "PT5H"]},
                     {"name": "venue", "replies": ["yes"], "delay": ["PT10M", "PT3H"],
                      "hours": ["10:00", "18:00"]}],
        "triggers": [{"name": "mail", "on_tool": "send_email", "actions": [
            {"kind": "reply", "contact": "friend"}, {"kind": "reply", "contact": "venue"}]},
            {"name": "daily", "every": "P1D", "actions": [{"kind": "notify", "text": "day"}]}],
        "tasks": [{"prompt": "ask around"}]},
        user={"user_sim": "llm", "reply_delays": {"free": ["PT1M", "PT30M"]}},
        always_on={"history": history} if history else None)

    def agent() -> Agent:
        return Agent(by_pattern({
            "ask around": ScriptedReply.calls([
                ("send_email", {"to": "a@x.example", "subject": "s", "body": "b"}),
                ("message_user", {"text": "asked"})]),
            "Email from": say("news")}, default=quiet()),
            user=lambda r: "ok", contact=lambda r: "sure")

    one = await run(env, agent(), seed=5)
    two = await run(env, agent(), seed=5)
    other = await run(env, agent(), seed=6)

    def timeline_bytes(episode: Any) -> bytes:
        return json.dumps(episode.results["always_on"]["timeline"],
                          ensure_ascii=False).encode()

    assert timeline_bytes(one) == timeline_bytes(two)
    # The whole record, not only the timeline (save the real time each wake took).
    a, b = (json.loads(to_json(e))["results"]["always_on"] for e in (one, two))
    assert a.pop("real")["wake_s"] != [] and b.pop("real")["wake_s"] != []
    assert a == b
    assert timeline_bytes(one) != timeline_bytes(other)  # the delays are drawn from the seed
    assert len(timeline(one, "wake")) >= 5
    # A folded run replays its folding too: each wake says what its turns were sent.
    folded = [w.get("context", {}).get("folded_wakes", 0) for w in timeline(one, "wake")]
    assert (max(folded) >= 3) == bool(history)


async def test_a_cancelled_run_keeps_its_records(tmp_path: Path) -> None:
    import asyncio

    from interplay.run.episode import LiveEpisodeContext, RunResources
    from interplay.testing import ScriptedModel

    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "go"}]})
    task = next(iter(env.tasks()))
    agent = Agent(by_pattern({"go": say("first")}),
                  after_tools=ScriptedReply.text("slow", latency_s=30))
    busy = threading.Event()  # set once the agent's turn is waiting on its model

    def handler(request: ScriptedRequest) -> ScriptedReply | str:
        if request.messages[-1]["role"] == "tool":
            busy.set()
        return agent(request)

    async with ScriptedModel(handler) as model:
        resources = RunResources(endpoint=model.endpoint)
        ctx = LiveEpisodeContext(env=env, task=task, info=support_info(), resources=resources)
        try:
            steps = env.steps()
            await steps[0].run(ctx)
            running = asyncio.ensure_future(steps[1].run(ctx))
            assert await asyncio.to_thread(busy.wait, 30)
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
        finally:
            ctx.release()
            await resources.aclose()
    record = ctx.results["always_on"]
    assert (record["end_reason"], record["error_type"]) == ("cancelled", "cancelled")
    assert record["end_note"] == "The run was cancelled."
    assert record["response"][0]["text"] == "first"


def support_info() -> Any:
    from interplay.values.records import EpisodeInfo

    return EpisodeInfo(episode_id="cancel-test", env="test-world", task_idx=0)


async def test_checks_are_on_by_default_when_the_run_spans_days(tmp_path: Path) -> None:
    agent = Agent(lambda text: quiet())
    for end, offered in (("PT8H", False), ("P2D", True)):
        env = make_env(tmp_path, {"end": end, "tasks": [{"prompt": "hi"}]})
        agent.requests.clear()
        await run(env, agent)
        names = {t["function"]["name"] for t in agent.requests[0].body["tools"]}
        assert ("schedule_check" in names) is offered, end
        # The rules say so too.
        assert ("schedule_check" in agent.requests[0].messages[0]["content"]) is offered
