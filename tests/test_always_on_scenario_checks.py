"""Scenario files are checked at load as strictly as the world runs them: each problem is named
by its place in the file, on one line; and what a scenario leaves out takes the world's
defaults (her time zone is the world's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import always_on_support as support
import pytest

from interplay.errors import InterplayError
from interplay.run.loader import env_from_toml
from interplay.world import scenario_from, times

BERLIN = "Europe/Berlin"
NOTIFY = [{"kind": "notify", "text": "x"}]


@pytest.fixture(autouse=True)
def script_user(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")


@pytest.mark.parametrize(("change", "message"), [
    # A line with nothing in it would wake the agent with "Dana (the user) wrote: ".
    ({"lines": [{"at": "PT1H", "text": "   "}]}, r"lines\[0\]\.text: empty"),
    ({"lines": [{"at": "PT1H", "text": "ok"}, {"at": "PT2H", "text": ""}]},
     r"lines\[1\]\.text: empty"),
    # Dated before the start: it would fire at the start, recorded as due then.
    ({"lines": [{"at": "2025-06-01T09:00", "text": "hi"}]},
     r"lines\[0\]\.at: 2025-06-01T09:00 is before the start"),
    ({"triggers": [{"name": "t", "at": "2025-06-02T07:59", "actions": NOTIFY}]},
     r"trigger 't'\.at: 2025-06-02T07:59 is before the start"),
    ({"triggers": [{"name": "t", "every": "P1D", "until": "2025-06-01T00:00",
                    "actions": NOTIFY}]}, r"trigger 't'\.until: .* is before the start"),
    ({"triggers": [{"name": "t", "after": "PT1H", "actions": [
        {"kind": "notify", "text": " \n"}]}]}, r"trigger 't'\.actions\[0\]: a notify needs text"),
    # Empty working hours or days are not "any time": leave the key out for that.
    ({"contacts": [{"name": "c", "replies": ["r"], "hours": []}]},
     r"contact 'c'\.hours: empty"),
    ({"contacts": [{"name": "c", "replies": ["r"], "days": []}]}, r"contact 'c'\.days: empty"),
    ({"contacts": [{"name": "c", "replies": ["r"], "days": ["tues"]}]},
     r"contact 'c'\.days: 'tues' is not a day"),
    # Nor are her empty busy days, empty awake hours or a busy block that ends as it starts.
    ({"user": {"busy": [{"start": "09:00", "end": "17:00", "days": ["weekdays"]},
                        {"start": "12:00", "end": "13:00", "days": []}]}},
     r"user\.busy\[1\]\.days: empty; name the days it comes back on, e\.g\. \[\"weekdays\"\], "
     r"or leave days out for every day"),
    ({"user": {"awake": []}}, r"user\.awake: empty; give two times of day, .* or leave awake "
                              r"out for a person who is always awake"),
    ({"user": {"busy": [{"start": "09:00", "end": "9:00"}]}},
     r"user\.busy\[0\]: the start equals the end; for a whole day write start = \"00:00\", "
     r"end = \"24:00\""),
    ({"contacts": [{"name": "c", "replies": ["ok", "  "]}]},
     r"contact 'c'\.replies\[1\]: empty"),
    # Duplicates are named.
    ({"contacts": [{"name": "venue", "replies": ["a"]}, {"name": "venue", "replies": ["b"]}]},
     "contacts: two contacts are named 'venue'"),
    ({"triggers": [{"name": "ping", "after": "PT1H", "actions": NOTIFY},
                   {"name": "ping", "after": "PT2H", "actions": NOTIFY}]},
     "triggers: two triggers are named 'ping'"),
    ({"tasks": [{"prompt": "go"}, {"prompt": "  "}]}, r"tasks\[1\]\.prompt: empty"),
    ({"opening": "   "}, "opening: empty"),
    ({"queued": [{"text": ""}]}, r"queued\[0\]\.text: empty"),
])
def test_each_problem_is_named_by_its_place(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InterplayError, match=message) as info:
        scenario_from({"start": "2025-06-02T08:00", "timezone": BERLIN, **change})
    assert "\n" not in str(info.value)


def test_every_problem_is_named_not_only_the_first() -> None:
    with pytest.raises(InterplayError) as info:
        scenario_from({"start": "2025-06-02T08:00", "timezone": BERLIN,
                       "lines": [{"at": "PT1H", "text": ""}],
                       "contacts": [{"name": "c", "replies": ["r"], "days": ["someday"]}]})
    text = str(info.value)
    assert "lines[0].text: empty" in text and "contact 'c'.days: 'someday'" in text
    assert "\n" not in text


@pytest.mark.parametrize("days", [["tues"], ["mo"], ["thurs"], ["weekday"]])
def test_a_day_that_is_not_one_is_refused_in_her_busy_blocks(tmp_path: Path,
                                                              days: list[str]) -> None:
    with pytest.raises(InterplayError, match=f"{days[0]!r} is not a day"):
        support.make_env(tmp_path, {"end": "P1D"},
                         user={"busy": [{"start": "09:00", "end": "17:00", "days": days}]})


@pytest.mark.parametrize(("user", "message"), [
    ({"busy": [{"start": "09:00", "end": "17:00", "days": []}]}, r"busy\[0\]\.days: empty"),
    ({"awake": []}, "awake: empty"),
])
def test_her_empty_hours_are_refused_from_the_file_and_from_set(
        tmp_path: Path, user: dict[str, Any], message: str) -> None:
    """From the file, the problem names the file and its place there; laid over the file by
    --set (env.user), the user_sim step refuses it the same way."""
    with pytest.raises(InterplayError, match=r"scenario-0\.json: user\." + message) as info:
        support.make_env(tmp_path, {"end": "P1D"}, user=user)
    assert "\n" not in str(info.value)
    env = support.make_env(tmp_path, {"end": "P1D"})
    with pytest.raises(InterplayError, match=r"step 'user_sim': " + message):
        type(env)({"user": user}).check()


def test_a_busy_block_without_days_is_busy_every_day() -> None:
    from interplay.world import BusyBlock, Schedule

    schedule = Schedule(timezone=BERLIN, busy=[BusyBlock("12:00", "13:00"),
                                               BusyBlock("00:00", "24:00", days=["sun"])])
    assert schedule.problems() == []
    monday_noon = 1748858400.0  # 2025-06-02 12:00 Berlin, a Monday
    assert [schedule.state_at(monday_noon + d * 86400) for d in range(7)] == [
        "busy", "busy", "busy", "busy", "busy", "busy", "busy"]
    assert schedule.state_at(monday_noon + 6 * 86400 + 3 * 3600) == "busy"  # all Sunday
    assert schedule.state_at(monday_noon + 5 * 86400 + 3 * 3600) == "free"


@pytest.mark.parametrize(("days", "weekdays"), [
    (["mon", "Tuesday", "weekend"], {0, 1, 5, 6}),
    (["weekdays"], {0, 1, 2, 3, 4}),
    (["SUN", "friday"], {4, 6}),
    (["daily"], set(range(7))),
])
def test_the_day_names_that_are_days_are_taken(days: list[str], weekdays: set[int]) -> None:
    scenario = scenario_from({"start": "2025-06-02T08:00", "contacts": [
        {"name": "c", "replies": ["r"], "hours": ["09:00", "17:00"], "days": days}]})
    [contact] = scenario.contacts
    assert times.parse_days(contact.days) == weekdays


def test_a_scenario_file_without_a_start_says_so(tmp_path: Path) -> None:
    path = tmp_path / "week.toml"
    path.write_text('end = "P7D"\ntimezone = "Europe/Berlin"\n[user]\nname = "Dana"\n'
                    '[[apps]]\nkind = "calendar"\n')
    with pytest.raises(InterplayError, match=r"week\.toml: start: missing; when the run "
                                             r"starts") as info:
        env_from_toml(path)
    assert "unknown key" not in str(info.value)
    as_json = tmp_path / "week.json"
    as_json.write_text(json.dumps({"end": "P7D", "apps": [{"kind": "calendar"}]}))
    with pytest.raises(InterplayError, match=r"week\.json: start: missing"):
        env_from_toml(as_json)


async def test_her_time_zone_is_the_worlds_when_the_scenario_gives_none(tmp_path: Path,
                                                                         ) -> None:
    path = tmp_path / "tokyo.json"
    path.write_text(json.dumps({
        "start": "2025-06-02T08:00", "end": "PT4H", "timezone": "Asia/Tokyo",
        "user": {"name": "Aiko", "user_sim": "script"},
        "lines": [{"at": "PT1H", "text": "hello"}]}))
    env = env_from_toml(path)()
    env.check()  # not refused as a zone that disagrees with the world's
    agent = support.Agent(lambda text: support.quiet())
    episode = await support.run(env, agent)
    assert episode.error is None, episode.error
    assert episode.results["user"]["timezone"] == "Asia/Tokyo"
    assert support.wakes(episode)[0]["at"] == "2025-06-02T09:00:00+09:00"
    assert "[Mon 2025-06-02 09:00 Asia/Tokyo] Aiko (the user) wrote: hello" in agent.wakes[0]
