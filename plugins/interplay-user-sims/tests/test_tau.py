"""``tau``: the tau2-bench user on the scripted model: an instruction set, its stop, transfer and
out-of-scope tokens (exact, never a substring), a malformed reply asked for again once and
counted, a model failure ending the exchange, and her own tools (dual control) on the
tau-shaped builtin env ``user-sim-tools`` and on an always_on world's apps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from user_sims_support import (
    agent,
    ao,
    first_task,
    is_user,
    relay_env,
    replies,
    run_relay,
    say,
    scenario_env,
    seats,
)
from user_sims_support import user_lines as lines_of

from interplay import EpisodeContext, InterplayError, SeatSpec, Task, Tool, lookup, tool
from interplay.testing import ScriptedReply, ScriptedRequest

INSTRUCTIONS = {"reason_for_call": "You want order #1042 cancelled.",
                "known_info": "You ordered it by mistake.",
                "unknown_info": "You do not know the order's total.",
                "task_instructions": "Confirm the cancellation when asked."}


def shop_task(**info: Any) -> Task:
    (task, *_) = lookup("envs", "user-sim-tools")().tasks()
    return Task(task.idx, prompt=task.prompt, system_prompt=task.system_prompt,
                info={**task.info, **info})


def shop_assistant(request: ScriptedRequest) -> ScriptedReply | str:
    last = request.messages[-1]
    if last["role"] == "tool":
        return "It is cancelled." if "cancelled" in str(last["content"]) else \
            "I found order #1042. Why do you want it cancelled?"
    text = str(last["content"])
    if "mistake" in text:
        return ScriptedReply.tool_call("cancel_order", {"order_id": "1042",
                                                        "reason": "ordered by mistake"})
    return ScriptedReply.tool_call("find_order", {"order_id": "1042"})


async def test_tau_on_user_sim_tools_reveals_when_asked_and_stops() -> None:
    env = relay_env("tau", env="user-sim-tools")
    user = replies("I want order #1042 cancelled.", "I ordered it by mistake.",
                   "Great, thank you! ###STOP###")
    episode, requests = await run_relay(env, shop_task(instructions=INSTRUCTIONS),
                                        seats(shop_assistant, user))
    assert episode.error is None
    assert episode.reward == 1.0  # the order database, not the words
    assert episode.results["relay"]["ended_by"] == "user_done"
    assert episode.results["relay"]["done_reason"] == "stop"
    system = next(r for r in requests if is_user(r)).messages[0]["content"]
    for section, text in (("Reason for your call", INSTRUCTIONS["reason_for_call"]),
                          ("What you know", INSTRUCTIONS["known_info"]),
                          ("What you do not know", INSTRUCTIONS["unknown_info"]),
                          ("How to go about it", INSTRUCTIONS["task_instructions"])):
        assert f"{section}: {text}" in system
    assert "only when the assistant asks" in system and "Never make up anything" in system
    assert "###STOP###" in system and "###TRANSFER###" in system
    # The stop token never reaches the assistant; her words before it do not either (the
    # relay ends on her done): they are recorded.
    assert lines_of(episode) == ["I want order #1042 cancelled.", "I ordered it by mistake."]
    assert episode.results["relay"]["closing_line"] == "Great, thank you!"


async def test_tau2_user_scenario_and_the_scenario_as_the_reason() -> None:
    env = relay_env("tau")
    task = Task(0, prompt="You want the opening hours.",
                info={"instructions": {"instructions": {"reason_for_call": "tau2 shape"}}})
    _, requests = await run_relay(env, task, seats(replies("ok"), replies("###STOP###")))
    assert "Reason for your call: tau2 shape" in requests[0].messages[0]["content"]
    _, requests = await run_relay(env, Task(0, prompt="You want the opening hours."),
                                  seats(replies("ok"), replies("###STOP###")))
    assert "Reason for your call: You want the opening hours." in \
        requests[0].messages[0]["content"]


async def test_placeholders_in_her_persona_and_instructions_stay_as_written() -> None:
    # Every placeholder is filled in one pass: a persona or an instruction that holds a
    # placeholder's text is never filled again, so the stop token cannot land inside her
    # description.
    env = relay_env("tau", persona="someone who writes {stop} and {instructions} in notes")
    task = Task(0, prompt="p", info={"instructions": {
        "reason_for_call": "Ask about {transfer} and {persona}."}})
    _, requests = await run_relay(env, task, seats(replies("ok"), replies("###STOP###")))
    system = requests[0].messages[0]["content"]
    assert "Who you are: someone who writes {stop} and {instructions} in notes" in system
    assert "Reason for your call: Ask about {transfer} and {persona}." in system
    assert system.count("###STOP###") == 1 and system.count("###TRANSFER###") == 1


@pytest.mark.parametrize(("last", "reason"), [("###TRANSFER###", "transfer"),
                                              ("Okay. ###OUT-OF-SCOPE###", "out_of_scope")])
async def test_the_transfer_and_out_of_scope_tokens_end_it(last: str, reason: str) -> None:
    episode, _ = await run_relay(relay_env("tau"), Task(0, prompt="p"),
                                 seats(replies("ok"), replies("Hello.", last)))
    assert (episode.results["relay"]["ended_by"], episode.results["relay"]["done_reason"]) == (
        "user_done", reason)


async def test_the_stop_token_is_an_exact_match_and_misplaced_is_malformed() -> None:
    # "stop" in prose and a lower-cased token end nothing; a token inside a message is asked
    # for again once, and counted.
    user = replies("Hello.", "Please stop calling me ###stop###", "I'll ###STOP### now",
                   "Fine, goodbye. ###STOP###")
    episode, requests = await run_relay(relay_env("tau", max_turns=5), Task(0, prompt="p"),
                                        seats(replies("ok"), user))
    assert lines_of(episode) == ["Hello.", "Please stop calling me ###stop###"]
    assert episode.results["relay"]["done_reason"] == "stop"
    assert episode.metrics["user_malformed"] == 1.0
    retry = [r for r in requests if is_user(r)][-1].last_user_text()
    assert "###STOP### may only end it" in retry


async def test_a_model_failure_ends_the_relay_as_an_error_not_done() -> None:
    episode, _ = await run_relay(relay_env("tau"), Task(0, prompt="p"),
                                 seats(replies("ok"), replies("Hello.",
                                                              ScriptedReply.fault(400))))
    assert episode.results["relay"]["ended_by"] == "user_error"
    assert episode.trace("user").error_type == "bad_request"


def test_tokens_that_collide_are_refused_when_the_env_loads() -> None:
    with pytest.raises(InterplayError, match="must be set and differ"):
        relay_env("tau", {"stop_token": "###X###", "transfer_token": "###X###"})


# -- dual control --------------------------------------------------------------------------------

def shop_with_user_tools() -> Any:
    base = lookup("envs", "user-sim-tools")

    class ShopWithApp(base):  # type: ignore[misc, valid-type]
        """user-sim-tools, with the customer's app on her side."""

        seats = {"assistant": SeatSpec(harness="chat"),
                 "user": SeatSpec(harness="chat", trainable=False)}

        def tools(self, seat: str, ctx: EpisodeContext) -> list[Tool]:
            if seat != "user":
                return super().tools(seat, ctx)
            app = ctx.results["world"].setdefault("customer", {})

            @tool
            def set_email_updates(on: bool) -> str:
                """Turn e-mail updates about your orders on or off in your shop app."""
                app["email_updates"] = bool(on)
                return json.dumps(app)

            return [set_email_updates]

    env = ShopWithApp(base.Config(relay=base.Config().relay.__class__(user_sim="tau")))
    env.check()
    return env


async def test_dual_control_in_the_relay_changes_her_side_of_the_world() -> None:
    env = shop_with_user_tools()
    task = shop_task(instructions=INSTRUCTIONS)
    task.info["world"] = {**task.info["world"], "customer": {"email_updates": False}}
    task.info["expected_world"] = {**task.info["expected_world"],
                                   "customer": {"email_updates": True}}

    def assistant(request: ScriptedRequest) -> ScriptedReply | str:
        last = request.messages[-1]
        if last["role"] == "tool" and "cancelled" not in str(last["content"]):
            return "Please turn on e-mail updates in your app first. Why cancel?"
        return shop_assistant(request)

    def user(request: ScriptedRequest) -> ScriptedReply | str:
        last = request.messages[-1]
        if last["role"] == "tool":
            return "Done, updates are on. I ordered it by mistake."
        if "e-mail updates" in str(last["content"]):
            return ScriptedReply.tool_call("set_email_updates", {"on": True})
        if "cancelled" in str(last["content"]):
            return "###STOP###"
        return "I want order #1042 cancelled."

    episode, requests = await run_relay(env, task, seats(assistant, user))
    assert episode.error is None
    assert episode.results["world"]["customer"] == {"email_updates": True}
    assert episode.reward == 1.0
    assert [t.name for t in episode.trace("user").tool_runs] == ["set_email_updates"]
    system = next(r for r in requests if is_user(r)).messages[0]["content"]
    assert "your tools (set_email_updates)" in system
    # Her tools are offered to her seat only.
    assert all("set_email_updates" not in json.dumps(r.body.get("tools") or [])
               for r in requests if not is_user(r))


async def test_her_tools_on_a_tool_less_harness_are_refused() -> None:
    env = shop_with_user_tools()
    episode, _ = await run_relay(env, shop_task(), seats(shop_assistant, replies("hi")),
                                 seats={"user": {"harness": "null"}})
    assert episode.error_type == "config_error"
    assert "set seats.user.harness = \"chat\"" in (episode.error or "")


CALENDAR = [{"kind": "calendar", "state": {"events": [
    {"id": "e1", "title": "Dentist", "start": "2025-06-02T15:00", "end": "2025-06-02T16:00",
     "where": "Praxis"}]}}]


async def test_dual_control_in_always_on_with_the_worlds_apps(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, {"user_sim": "tau", "tools": ["cancel_event"]},
                       end="PT8H", apps=CALENDAR, tasks=[{"prompt": "I can't make the dentist"}],
                       seats={"user": {"harness": "chat", "trainable": False}})

    def user(request: ScriptedRequest) -> ScriptedReply | str:
        last = request.messages[-1]
        if last["role"] == "tool":
            return "#1 Done, it is gone from my calendar. ###STOP###"
        if "cancel the dentist" in str(last["content"]):
            return ScriptedReply.tool_call("cancel_event", {"event_id": "e1"})
        return "Thanks."  # the wrap-up

    handler = seats(agent({"dentist": say("Please cancel the dentist on your side, I can't.")},
                          default=""), user)
    episode, _ = await run_relay(env, first_task(env), handler)
    record = ao(episode)
    assert record["apps"]["calendar"]["events"] == []
    changes = [e for e in record["timeline"] if e["kind"] == "change"]
    assert [(c["action"], c["by"]) for c in changes] == [("event_cancelled", "user")]
    assert [e["name"] for e in record["timeline"] if e["kind"] == "user_tool"] == [
        "cancel_event"]
    reply = record["replies"][0]
    assert (reply["text"], reply["done"], reply["done_reason"], reply["reply_to"]) == (
        "Done, it is gone from my calendar.", True, "stop", 1)
    assert record["end_reason"] == "user_done"
    # The agent was not offered her tool as its own call (it has the app's tools anyway), and
    # her call is not the agent's.
    assert all(c["name"] != "cancel_event" for w in record["timeline"] if w["kind"] == "wake"
               for c in w["tool_calls"])


def test_user_tools_no_app_offers_are_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(InterplayError, match=r"user_sim\.tools: no app of the scenario "
                                             r"offers toggle_wifi"):
        scenario_env(tmp_path, {"user_sim": "tau", "tools": ["toggle_wifi"]}, apps=CALENDAR)
    with pytest.raises(InterplayError, match="plays her with no seat"):
        scenario_env(tmp_path, {"user_sim": "scripted", "tools": ["cancel_event"]},
                     apps=CALENDAR)


async def test_tau_in_always_on_malformed_once_then_stops(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, {"user_sim": "tau"}, end="PT8H",
                       tasks=[{"prompt": "book a table", "info": {"instructions": INSTRUCTIONS}}])
    user = replies("", "#1 Yes please. ###STOP###")
    episode, requests = await run_relay(env, first_task(env), seats(
        agent({"book a table": say("Shall I book it?")}), user))
    record = ao(episode)
    (reply, *_) = record["replies"]
    assert (reply["outcome"], reply["text"], reply["done_reason"]) == (
        "replied", "Yes please.", "stop")
    assert reply["used"] == {"model_calls": 2.0, "malformed": 1.0}
    assert record["summary"]["counts"]["user_malformed"] == 1
    assert record["end_reason"] == "user_done"
    shown = next(r for r in requests if is_user(r)).last_user_text()
    assert "#1 (2025-06-02T08:00:00+02:00): Shall I book it?" in shown
    assert "end your message with ###STOP###" in shown and "###DONE###" not in shown
