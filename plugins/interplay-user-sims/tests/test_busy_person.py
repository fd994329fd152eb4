"""``busy-person`` on the scripted model: her local time and schedule in each read, terse when
pressed (a long reply asked for again once, counted), the message she answers named or quoted,
reads that ask nothing sometimes left unanswered, done only in a one-sitting run, a model
failure ending the run; and in the relay."""

from __future__ import annotations

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

from interplay import InterplayError, Task
from interplay.testing import ScriptedReply

WORK = {"start": "09:00", "end": "17:30", "days": ["weekdays"], "label": "work"}


def busy_user(**settings: Any) -> dict[str, Any]:
    return {"user_sim": "busy-person", "awake": ["07:00", "23:00"], "busy": [WORK],
            "description": "Dana, a nurse on day shifts",
            "user_sim_settings": {"pressed_within": "PT90M", **settings}}


async def test_pressed_before_work_she_is_terse_and_knows_her_day(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, busy_user(terse_words=6), end="PT10H",
                       tasks=[{"prompt": "find a plumber"}])
    long = "Yes that sounds good to me, please go ahead and book the plumber for Thursday"
    user = replies(long, "Yes, book Thursday. ###DONE###")
    episode, requests = await run_relay(env, first_task(env), seats(
        agent({"find a plumber": say("Shall I book Thursday?")}), user))
    record = ao(episode)
    reply = record["replies"][0]
    assert (reply["outcome"], reply["text"], reply["reply_to"], reply["done"]) == (
        "replied", "Yes, book Thursday.", 1, True)
    assert reply["used"] == {"model_calls": 2.0, "malformed": 1.0}
    assert record["end_reason"] == "user_done"  # one sitting: her done ends it
    first, retry = [r.last_user_text() for r in requests if is_user(r)][:2]
    assert "It is Mon 2025-06-02 08:00 Europe/Berlin." in first
    assert "Your day: awake 07:00-23:00; work 09:00-17:30 (weekdays)." in first
    assert "You have work at 09:00." in first
    assert "at most 6 words" in first and "end your message with ###DONE###" in first
    assert "That was 15 words" in retry


async def test_several_messages_she_names_the_one_she_answers(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, busy_user(), end="P2D", tasks=[{"prompt": "plan Friday"}])
    two = ScriptedReply.calls([("message_user", {"text": "I booked the table."}),
                               ("message_user", {"text": "Shall I invite Alex?"})])
    user = replies("Sure", "> Shall I invite Alex?\nYes, invite him.")
    episode, requests = await run_relay(env, first_task(env),
                                        seats(agent({"plan Friday": two}), user))
    reply = ao(episode)["replies"][0]
    assert (reply["text"], reply["reply_to"]) == ("Yes, invite him.", 2)
    assert reply["used"]["malformed"] == 1.0
    retry = [r for r in requests if is_user(r)][1].last_user_text()
    assert retry.startswith("Say which message you answer")


async def test_after_work_a_read_that_asks_nothing_may_go_unanswered(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, busy_user(skip_chance=1.0), end="P2D",
                       tasks=[{"prompt": "find a plumber"}],
                       triggers=[{"name": "t", "at": "2025-06-02T10:00",
                                  "actions": [{"kind": "notify", "text": "news"}]}])
    handler = seats(agent({"find a plumber": quiet_say(), "news": say("The plumber is booked.")}),
                    replies("unused"))
    episode, requests = await run_relay(env, first_task(env), handler)
    reply = ao(episode)["replies"][0]
    # Sent during work, read when work ended, pressed: left unanswered without a model call.
    assert (reply["mode"], reply["read_at"], reply["outcome"]) == (
        "busy", "2025-06-02T17:30:00+02:00", "nothing")
    assert reply["used"] == {"model_calls": 0.0, "skipped": 1.0}
    assert not [r for r in requests if is_user(r) and "plumber is booked" in str(r.messages)]


def quiet_say() -> ScriptedReply:
    return ScriptedReply.tool_call("stay_quiet", {})


async def test_a_question_is_answered_even_when_she_would_skip(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, busy_user(skip_chance=1.0), end="P2D",
                       tasks=[{"prompt": "find a plumber"}])
    episode, _ = await run_relay(env, first_task(env), seats(
        agent({"find a plumber": say("Thursday or Friday?")}), replies("#1 Friday")))
    reply = ao(episode)["replies"][0]
    assert (reply["outcome"], reply["text"]) == ("replied", "Friday")


async def test_in_a_multi_day_run_she_never_says_done(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, busy_user(skip_chance=0.0), end="P2D",
                       tasks=[{"prompt": "find a plumber"}])
    episode, requests = await run_relay(env, first_task(env), seats(
        agent({"find a plumber": say("Booked for Thursday.")}), replies("Great ###DONE###")))
    record = ao(episode)
    reply = record["replies"][0]
    assert (reply["text"], reply["done"]) == ("Great", False)
    assert record["end_reason"] != "user_done"
    first = next(r for r in requests if is_user(r))
    assert "###DONE###" not in str(first.messages)


async def test_a_model_failure_ends_the_run_as_user_error(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, busy_user(), end="PT10H", tasks=[{"prompt": "hi"}])
    episode, _ = await run_relay(env, first_task(env), seats(
        agent({"hi": say("Hello?")}), replies(ScriptedReply.fault(400))))
    assert episode.results["always_on"]["end_reason"] == "user_error"
    assert episode.results["always_on"]["replies"][0]["outcome"] == "error"


async def test_in_the_relay_she_is_a_terse_user_who_says_done() -> None:
    env = relay_env("busy-person")
    episode, requests = await run_relay(env, Task(0, prompt="You want the opening hours."),
                                        seats(replies("10 to 16."),
                                              replies("Opening hours?", "ok ###DONE###")))
    assert lines_of(episode) == ["Opening hours?"]
    assert episode.results["relay"]["ended_by"] == "user_done"
    system = requests[0].messages[0]["content"]
    assert "You want the opening hours." in system and "###DONE###" in system


def test_bad_settings_are_refused_when_the_env_loads() -> None:
    with pytest.raises(InterplayError, match="skip_chance must be between 0 and 1"):
        relay_env("busy-person", {"skip_chance": 2})
    with pytest.raises(InterplayError, match="pressed_within: 'soon'"):
        relay_env("busy-person", {"pressed_within": "soon"})
