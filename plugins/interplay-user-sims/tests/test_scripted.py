"""``scripted``: fixed lines in order or keyed by a regex, in the relay and in always_on, on the
scripted model over real HTTP; a bad script is refused when the env loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from user_sims_support import (
    agent,
    ao,
    first_task,
    relay_env,
    replies,
    run_relay,
    say,
    scenario_env,
    seats,
)
from user_sims_support import user_lines as lines_of

from interplay import InterplayError, Task


async def test_in_order_in_the_relay_the_lines_then_done() -> None:
    env = relay_env("scripted", {"lines": ["Hi, when do you open on Saturday?",
                                          {"text": "And on Sunday?", "delay": "PT2M"}]})
    episode, requests = await run_relay(env, Task(0, prompt="opening hours"),
                                        replies("10 to 16.", "Closed."))
    assert episode.error is None
    assert lines_of(episode) == ["Hi, when do you open on Saturday?", "And on Sunday?"]
    assert episode.results["relay"]["ended_by"] == "user_done"
    assert [t.seat for t in episode.traces] == ["assistant"]  # no model plays her
    assert len(requests) == 2


async def test_keyed_in_the_relay_answers_what_the_assistant_said() -> None:
    env = relay_env("scripted", {"opening": "I need to cancel an order.", "lines": [
        {"match": r"(?i)order (number|id)", "text": "It is #1042."},
        {"match": r"(?i)reason", "text": "I ordered it by mistake."},
        {"match": r"(?i)cancelled", "text": "Thanks!", "done": True}]})
    episode, _ = await run_relay(env, Task(0, prompt="cancel"), replies(
        "Sure, what is the order number?", "And the reason?", "Done: it is cancelled."))
    assert lines_of(episode) == ["I need to cancel an order.", "It is #1042.",
                                 "I ordered it by mistake.", "Thanks!"]
    assert episode.results["relay"]["ended_by"] == "user_done"


async def test_keyed_in_the_relay_is_done_when_no_line_matches() -> None:
    env = relay_env("scripted", {"lines": [{"match": "order", "text": "#1042"}]})
    episode, _ = await run_relay(env, Task(0, prompt="I want a refund"),
                                 replies("How is the weather?"))
    assert lines_of(episode) == ["I want a refund"]  # the opening: her scenario
    assert episode.results["relay"] == {**episode.results["relay"], "turns": 1,
                                        "ended_by": "user_done"}


async def test_the_tasks_lines_take_the_place_of_the_settings() -> None:
    env = relay_env("scripted", {"lines": ["from the settings"]})
    task = Task(0, prompt="p", info={"user_lines": ["from the task", "twice"]})
    episode, _ = await run_relay(env, task, replies("ok"))
    assert lines_of(episode) == ["from the task", "twice"]


@pytest.mark.parametrize(("lines", "message"), [
    (["a", {"match": "x", "text": "b"}], "lines[1]: a script is either in order"),
    ([{"match": "(", "text": "b"}], "lines[0].match: '(' is not a regular expression"),
    ([{"text": "b", "delay": "soon"}], "lines[0].delay: 'soon' is not an ISO-8601 duration"),
    ([{"text": "b", "wait": "PT1M"}], "lines[0]: unknown key wait"),
])
def test_a_bad_script_is_refused_when_the_env_loads(lines: list, message: str) -> None:
    with pytest.raises(InterplayError, match=message.replace("(", r"\(").replace("[", r"\[")):
        relay_env("scripted", {"lines": lines})


async def test_a_bad_script_in_a_task_fails_that_episode_with_its_key() -> None:
    env = relay_env("scripted")
    episode, _ = await run_relay(env, Task(3, prompt="p", info={"user_lines": "hello"}),
                                 replies("ok"))
    assert episode.error_type == "config_error"
    assert "task 3 info.user_lines: expected a list of lines" in (episode.error or "")


async def test_in_order_in_always_on_with_a_delay_per_line(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, {"user_sim": "scripted", "reply_delays": {"free": "PT5M"},
                                  "user_sim_settings": {"lines": [
                                      {"text": "Yes, book it.", "delay": "PT10M"}, "Thanks"]}},
                       end="PT6H", tasks=[{"prompt": "find a table for Friday"}])
    handler = seats(agent({"find a table": say("Shall I book Lindenhof?"),
                           "Yes, book it": say("Booked."), "Thanks": say("Anything else?")}))
    episode, _ = await run_relay(env, first_task(env), handler)
    record = ao(episode)
    first, second, third = record["replies"][:3]
    assert (first["outcome"], first["text"], first["reply_to"]) == ("replied", "Yes, book it.", 1)
    # Her reply delay (5 minutes) and the line's own (10 minutes).
    assert first["wrote_t"] - first["read_t"] == 15 * 60
    assert second["wrote_t"] - second["read_t"] == 5 * 60
    # One sitting: after her last line she is done, and the run ends at once.
    assert third["outcome"] == "done" and record["end_reason"] == "user_done"


async def test_keyed_in_always_on_says_nothing_when_no_line_matches(tmp_path: Path) -> None:
    env = scenario_env(
        tmp_path, {"user_sim": "scripted", "user_sim_settings": {"lines": [
            {"match": r"(?i)book", "text": "Yes please."},
            {"match": r"(?i)budget", "text": "Up to 200 EUR.", "repeat": True}]}},
        end="P2D", tasks=[{"prompt": "find a venue"}],
        triggers=[{"name": "t", "at": "2025-06-02T12:00",
                   "actions": [{"kind": "notify", "text": "ping"}]}])
    handler = seats(agent({"find a venue": say("Working on it."),
                           "ping": say("What is your budget? Shall I book it?")},
                          default=""))
    episode, _ = await run_relay(env, first_task(env), handler)
    outcomes = [(r["outcome"], r["text"], r["reply_to"]) for r in ao(episode)["replies"]]
    assert outcomes[0] == ("nothing", "", None)
    # The first line whose pattern is found in her last message answers it.
    assert outcomes[1] == ("replied", "Yes please.", 2)
