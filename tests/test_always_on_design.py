"""The rest of the always_on design: the wrap-up respects her (a read in her sleep waits for
her morning within the run's end, or is recorded unread; none after she ended the run with
her done), she can speak first at a given time (her opening, written by her sim when the
scenario gives no words), ``done_ends_run`` is a setting, and a reminder the step adds to
every wake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import always_on_support as support
import pytest
from always_on_support import Agent, by_pattern, make_env, quiet, run, say, timeline, wakes


@pytest.fixture(autouse=True)
def script_user(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")


def alert(at: str, text: str = "ping") -> dict[str, Any]:
    return {"name": f"alert-{at}", "at": at, "actions": [{"kind": "notify", "text": text}]}


NIGHT = {"awake": ["07:00", "23:00"], "answers": [{"text": "thanks"}]}


# -- the wrap-up -----------------------------------------------------------------------------------


async def test_a_wrap_up_in_her_sleep_waits_for_her_morning_within_the_end(tmp_path: Path,
                                                                           ) -> None:
    env = make_env(tmp_path, {"end": "P2D", "triggers": [alert("2025-06-02T23:30")]},
                   user=NIGHT, always_on={"max_wakes": 1})
    episode = await run(env, Agent(by_pattern({"ping": say("it is late")})))
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "max_wakes"
    [wrap] = [r for r in ao["replies"] if r["last_read"]]
    assert (wrap["read_at"], wrap["mode"]) == ("2025-06-03T07:00:00+02:00", "woken")
    # The run ended at its last wake; her wrap-up came after.
    assert ao["ended_at"] == "2025-06-02T23:30:00+02:00"
    assert ao["conversation"][-1]["at"] == "2025-06-02T23:30:00+02:00"


async def test_a_wrap_up_that_cannot_come_before_the_end_is_recorded_unread(tmp_path: Path,
                                                                            ) -> None:
    env = make_env(tmp_path, {"end": "2025-06-02T23:45", "triggers": [alert("2025-06-02T23:30")]},
                   user=NIGHT)
    episode = await run(env, Agent(by_pattern({"ping": say("it is late")}, default=quiet())))
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "end_time"
    assert not [r for r in ao["replies"] if r["last_read"]]
    [unread] = timeline(episode, "wrap_up_unread")
    assert unread["state"] == "asleep" and unread["free_at"] == "2025-06-03T07:00:00+02:00"
    assert ao["summary"]["pending"]["unread_by_user"]["count"] == 1
    assert support.READS == []  # she never read anything


async def test_no_wrap_up_after_she_ended_a_one_sitting_run_with_her_done(tmp_path: Path,
                                                                          ) -> None:
    env = make_env(tmp_path, {"tasks": [{"prompt": "book a table"}]},
                   user={"answers": [{"text": "Perfect, thanks!", "done": True}]})
    agent = Agent(by_pattern({"book a table": say("Booked."), "Perfect": say("Enjoy!")}))
    episode = await run(env, agent)
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "user_done"
    assert len(support.READS) == 1 and not any(r["last_read"] for r in ao["replies"])


# -- her opening -----------------------------------------------------------------------------------


async def test_she_speaks_first_at_her_openings_time(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D"},
                   user={"opening": {"at": "2025-06-02T09:15", "text": "Morning! Any plans?"}})
    agent = Agent(lambda text: quiet())
    episode = await run(env, agent)
    first = wakes(episode)[0]
    assert first["at"] == "2025-06-02T09:15:00+02:00"
    [line] = [s for s in first["sources"] if s["from"] == "user"]
    assert (line["kind"], line["text"]) == ("opening", "Morning! Any plans?")
    assert "[Mon 2025-06-02 09:15 Europe/Berlin] Dana (the user) wrote: Morning!" in \
        agent.wakes[0]
    assert episode.results["user"]["opening"] == {"at": "2025-06-02T09:15", "text":
                                                  "Morning! Any plans?"}


async def test_her_sim_writes_her_opening_when_the_scenario_gives_no_words(tmp_path: Path,
                                                                           ) -> None:
    env = make_env(tmp_path, {"end": "P1D"},
                   user={"opening": {"at": "PT2H"},
                         "answers": [{"text": "Can you find me a dentist?"}, {"nothing": True}]})
    agent = Agent(lambda text: quiet())
    episode = await run(env, agent)
    first = wakes(episode)[0]
    assert first["at"] == "2025-06-02T10:00:00+02:00"
    [line] = [s for s in first["sources"] if s["from"] == "user"]
    assert (line["kind"], line["text"]) == ("opening", "Can you find me a dentist?")
    opening_read = support.READS[0]
    assert opening_read.text is None and not opening_read.messages
    assert opening_read.local_time.startswith("Mon 2025-06-02 10:00")


async def test_the_person_a_sim_plays_knows_her_opening(tmp_path: Path) -> None:
    from interplay.builtin_envs.user_sim_step import person_from

    env = make_env(tmp_path, {"end": "P1D"}, user={"opening": {"at": "PT1H", "text": "hi"}})
    user_step = env.steps()[0]
    person, _ = person_from(user_step.record(next(iter(env.tasks()))))
    assert person.opening is not None
    assert (person.opening.at, person.opening.text) == ("PT1H", "hi")


# -- done_ends_run and the reminder ----------------------------------------------------------------


@pytest.mark.parametrize(("setting", "reason", "woken"), [(None, "end_time", 2),
                                                          (True, "user_done", 1)])
async def test_done_ends_run_is_a_setting(tmp_path: Path, setting: bool | None, reason: str,
                                          woken: int) -> None:
    env = make_env(tmp_path, {"end": "P2D", "tasks": [{"prompt": "plan it"}]},
                   user={"answers": [{"done": True}]},
                   always_on=None if setting is None else {"done_ends_run": setting})
    episode = await run(env, Agent(by_pattern({"plan it": say("On it.")}, default=quiet())))
    ao = episode.results["always_on"]
    assert ao["end_reason"] == reason and len(wakes(episode)) == woken
    assert support.READS[0].done_ends_run is (setting is True)
    assert ao["summary"]["settings"]["done_ends_run"] is (setting is True)


async def test_the_reminder_is_added_to_every_wake(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "PT6H", "tasks": [{"prompt": "hi"}],
                              "triggers": [alert("2025-06-02T10:00")]},
                   always_on={"reminder": "check the calendar before replying"})
    agent = Agent(lambda text: quiet())
    episode = await run(env, agent)
    assert len(agent.wakes) == 3
    for text in agent.wakes:
        assert "[always_on] Reminder: check the calendar before replying" in text
    for wake in wakes(episode):
        assert {"kind": "reminder", "from": "step",
                "text": "check the calendar before replying"} in wake["sources"]
