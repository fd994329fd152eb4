"""What an always_on run records beyond its wakes, on the scripted model: contacts' answers
computed side by side or one at a time, what her user sim knows at setup, who changed the apps,
her retried answers, how a reply found its message, the final check-in's wording, what settles
and jumps waited for, and the repeats that were all a run without an end had left."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import always_on_support as support
import pytest
from always_on_support import (
    Agent,
    ScriptUser,
    by_pattern,
    make_env,
    quiet,
    run,
    say,
    timeline,
    wakes,
)

from interplay.builtin_envs.user_sim_step import UserSide, reply_match
from interplay.contracts.usersim import Answer, Person
from interplay.testing import ScriptedReply
from interplay.values.clock import Clock
from interplay.world import times
from interplay.world.chat import Sent
from interplay.world.events import Event
from interplay.world.schedule import BusyBlock, Schedule
from interplay.world.world import World


@pytest.fixture(autouse=True)
def script_user(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")


@pytest.mark.parametrize("side_by_side", [True, False])
async def test_contacts_answer_side_by_side_or_one_at_a_time(
        tmp_path: Path, side_by_side: bool) -> None:
    # Each answer takes 2 s of its 3 s limit: one at a time, the second's limit starts when
    # its computing does, so both land either way.
    env = make_env(tmp_path, {
        "end": "P1D",
        "apps": [{"kind": "inbox"}],
        "contacts": [{"name": name, "persona": f"{name}, a friend", "delay": "PT30M",
                      "limit_s": 3.0} for name in ("Alex", "Sam")],
        "triggers": [{"name": "mail", "on_tool": "send_email", "actions": [
            {"kind": "reply", "contact": "Alex"}, {"kind": "reply", "contact": "Sam"}]}],
        "tasks": [{"prompt": "write to both"}]},
        always_on={"contacts_side_by_side": side_by_side})
    started: list[float] = []

    def contact(request: Any) -> ScriptedReply:
        started.append(time.monotonic())
        return ScriptedReply.text("count me in", latency_s=2.0)

    agent = Agent(by_pattern({"write to both": ScriptedReply.tool_call(
        "send_email", {"to": "all@example.com", "subject": "party", "body": "Saturday?"})},
        default=quiet()), contact=contact)
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    record = episode.results["always_on"]
    assert record["summary"]["settings"]["contacts_side_by_side"] is side_by_side
    assert "contact_timed_out" not in [e["kind"] for e in timeline(episode)]
    replies = [s for w in wakes(episode) for s in w["sources"] if s["kind"] == "contact_reply"]
    assert sorted(s["contact"] for s in replies) == ["Alex", "Sam"]
    assert {s["due_t"] for s in replies} == {1800.0}  # the same task times either way
    first, second = started
    # One at a time, the second is asked once the first has answered.
    assert (second - first >= 2.0) is not side_by_side


async def test_a_contact_asked_twice_in_a_row_answers_both_within_its_limit(
        tmp_path: Path) -> None:
    # Each answer takes 0.6 s of Alex's 0.9 s limit; Alex answers one at a time, so the
    # second is computed after the first: its limit runs from then (from the ask, 1.2 s in,
    # it would be cut off).
    env = make_env(tmp_path, {
        "end": "P1D",
        "apps": [{"kind": "inbox"}],
        "contacts": [{"name": "Alex", "persona": "Alex, a friend", "delay": "PT30M",
                      "limit_s": 0.9}],
        "triggers": [{"name": "mail", "on_tool": "send_email", "actions": [
            {"kind": "reply", "contact": "Alex"}]}],
        "tasks": [{"prompt": "ask twice"}]})
    asked: list[str] = []

    def contact(request: Any) -> ScriptedReply:
        asked.append(str(request.messages[-1]["content"]))
        return ScriptedReply.text(f"answer {len(asked)}", latency_s=0.6)

    mail = [("send_email", {"to": "alex@example.com", "subject": s, "body": s})
            for s in ("cake?", "music?")]
    agent = Agent(by_pattern({"ask twice": ScriptedReply.calls(mail)}, default=quiet()),
                  contact=contact)
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    assert "contact_timed_out" not in [e["kind"] for e in timeline(episode)]
    replies = [s["text"] for w in wakes(episode) for s in w["sources"]
               if s["kind"] == "contact_reply"]
    assert sorted(replies) == ["answer 1", "answer 2"] and len(asked) == 2


@pytest.mark.parametrize(("end", "setting", "expected"), [
    ("PT8H", None, True), ("P3D", None, False), ("P3D", True, True), ("PT8H", False, False)])
async def test_her_user_sim_knows_at_setup_whether_her_done_ends_the_run(
        tmp_path: Path, end: str, setting: bool | None, expected: bool) -> None:
    env = make_env(tmp_path, {"end": end, "tasks": [{"prompt": "hello"}]},
                   user={"answers": [{"text": "thanks", "done": True}]},
                   always_on=None if setting is None else {"done_ends_run": setting})
    agent = Agent(by_pattern({"hello": say("Hi Dana!")}, default=quiet()))
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    [person] = support.PEOPLE
    assert person.done_ends_run is expected
    assert [r.done_ends_run for r in support.READS] == [expected] * len(support.READS)
    assert support.READS
    assert (episode.results["always_on"]["end_reason"] == "user_done") is expected


async def test_app_changes_name_the_seat_that_made_them_and_are_counted_by_it(
        tmp_path: Path) -> None:
    env = make_env(tmp_path, {
        "end": "P1D",
        "apps": [{"kind": "notes"}],
        "triggers": [{"name": "mine", "on_change": {"app": "notes", "by": "agent"},
                      "actions": [{"kind": "notify", "text": "noted"}]}],
        "tasks": [{"prompt": "note it"}]})
    agent = Agent(by_pattern({"note it": ScriptedReply.calls([
        ("add_note", {"text": "one"}), ("add_note", {"text": "two"}),
        ("message_user", {"text": "noted twice"})])}, default=quiet()))
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    record = episode.results["always_on"]
    changes = [e for e in record["timeline"] if e["kind"] == "change"]
    assert [(c["by"], c["actor"]) for c in changes] == [("assistant", "agent")] * 2
    assert record["summary"]["app_changes_by"] == {"assistant": 2}
    assert record["summary"]["counts"]["app_changes"] == 2
    # An on_change trigger's by still matches the role.
    assert [e["trigger"] for e in timeline(episode, "fire")] == ["mine", "mine"]


async def test_a_retried_answer_keeps_her_first_reply_in_the_read_record(
        tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "PT8H", "tasks": [{"prompt": "hello"}]},
                   user={"user_sim": "llm"})
    replies = iter(["", "Sounds good.", "Thanks."])
    agent = Agent(by_pattern({"hello": say("Shall I book Friday?")}, default=quiet()),
                  user=lambda request: next(replies))
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    first, *rest = episode.results["always_on"]["replies"]
    assert first["text"] == "Sounds good." and first["used"]["malformed"] == 1.0
    assert first["first_reply"] == ""  # the blank reply she was asked again after
    assert all(r["first_reply"] is None for r in rest)


@pytest.mark.parametrize(("her_reply", "match"), [
    ("#2 Friday works", (2, "named")), ("> the calendar\nthanks", (1, "quoted")),
    ("Yes please.", (2, "only_question"))])
async def test_a_reply_record_says_how_its_message_was_found(
        tmp_path: Path, her_reply: str, match: tuple[int, str]) -> None:
    env = make_env(tmp_path, {"end": "PT8H", "tasks": [{"prompt": "hello"}]},
                   user={"user_sim": "llm"})
    agent = Agent(by_pattern({"hello": ScriptedReply.calls([
        ("message_user", {"text": "I checked the calendar."}),
        ("message_user", {"text": "Shall I book Friday?"})])}, default=quiet()),
        user=lambda request: her_reply)
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    first = episode.results["always_on"]["replies"][0]
    assert first["messages"] == [1, 2]
    assert (first["reply_to"], first["reply_to_by"]) == match


def test_reply_match_names_the_only_message_and_no_match() -> None:
    def sent(n: int, text: str) -> Sent:
        return Sent(number=n, text=text, seat="assistant", at_us=0, wake=1, phase="turn")

    assert reply_match(Answer("ok"), [sent(1, "done")]) == (1, "only_message")
    assert reply_match(Answer("ok"), [sent(1, "a?"), sent(2, "b?")]) == (None, "none")


@pytest.mark.parametrize("check_in", ["", "Time is up at {time}: send {name} the {plan}."])
async def test_the_final_check_in_is_worded_by_the_scenario(
        tmp_path: Path, check_in: str) -> None:
    env = make_env(tmp_path, {"end": "PT2H", "tasks": [{"prompt": "hello"}]},
                   always_on={"final_check_in": check_in} if check_in else None)
    agent = Agent(by_pattern({"hello": say("Hi Dana!")}, default=quiet()))
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    record = episode.results["always_on"]
    assert record["end_reason"] == "end_time"
    final = wakes(episode)[-1]
    [notice] = [s for s in final["sources"] if s["kind"] == "final_notice"]
    expected = ("Time is up at Mon 2025-06-02 10:00 Europe/Berlin: send Dana the {plan}."
                if check_in else "Final check-in (Mon 2025-06-02 10:00 Europe/Berlin): the "
                "task's time is up. This is your last turn; tell Dana what she needs to know "
                "with message_user.")
    assert notice["text"] == expected
    assert agent.wakes[-1].endswith(f"[always_on] {expected}")
    assert record["summary"]["settings"]["final_check_in"] == check_in


async def test_settles_and_jumps_say_what_they_waited_for(tmp_path: Path) -> None:
    env = make_env(tmp_path, {
        "end": "P1D",
        "apps": [{"kind": "inbox"}],
        "contacts": [{"name": "Alex", "persona": "Alex, a friend", "delay": "PT30M",
                      "limit_s": 10.0}],
        "triggers": [{"name": "mail", "on_tool": "send_email", "actions": [
            {"kind": "reply", "contact": "Alex"},
            {"kind": "notify", "text": "no answer yet?", "wait": "PT3H"}]},
            {"name": "daily", "every": "P1D", "actions": [{"kind": "notify", "text": "day"}]}],
        "tasks": [{"prompt": "write to Alex"}]})
    agent = Agent(by_pattern({"write to Alex": ScriptedReply.tool_call(
        "send_email", {"to": "alex@example.com", "subject": "party", "body": "Saturday?"})},
        default=quiet()), contact=lambda r: ScriptedReply.text("yes", latency_s=2.0))
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    record = episode.results["always_on"]
    # The answer took 2 s of real time: the world waited for it before the next wake.
    [settle] = record["real"]["settles"]
    assert settle["wake"] == 2 and settle["calls"] == 1 and settle["at_work"] == ["mail"]
    assert settle["waited_s"] > 0
    jumps = timeline(episode, "jump")
    # While the fire waits out its 3 hours, each jump says the trigger is at work.
    to_reply = next(j for j in jumps if j["next"] == "contact_reply")
    assert to_reply["seconds"] == 1800.0 and to_reply["at_work"] == ["mail"]
    after = [j for j in jumps if j["t"] >= 3 * 3600]
    assert after and all("at_work" not in j for j in after)


async def test_a_run_without_an_end_names_the_repeats_that_were_all_that_remained(
        tmp_path: Path) -> None:
    # She is busy until 12:00, reads then and says nothing; an hourly tick wakes nobody.
    env = make_env(tmp_path, {
        "triggers": [{"name": "tick", "every": "PT1H", "actions": [
            {"kind": "notify", "to": "phone", "text": "tick"}]}],
        "tasks": [{"prompt": "hello"}]},
        user={"busy": [{"start": "08:00", "end": "12:00"}]}, always_on={"idle_jumps": 3})
    episode = await run(env, Agent(by_pattern({"hello": say("Hi Dana!")}, default=quiet())))
    assert episode.error is None, episode.error
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "finished_nothing_pending"
    [read, wrap_up] = timeline(episode, "read")
    assert wrap_up["last_read"]
    assert read["at"] == "2025-06-02T12:00:00+02:00"
    # Her read at 12:00 started the count again: three idle jumps after it, not two.
    [repeats] = timeline(episode, "world_only_repeats")
    assert repeats["at"] == "2025-06-02T15:00:00+02:00"
    assert (repeats["jumps"], repeats["triggers"]) == (3, ["tick"])


@pytest.mark.parametrize(("read_at", "expected"), [
    ("2025-06-02T17:00", ("busy", "busy", 0.0)),       # at its time: the mode it was planned in
    ("2025-06-02T18:00", ("free", "busy", 3600.0)),    # an hour late, she is free: free
    ("2025-06-02T23:30", None)])                       # late and she is asleep: it waits
async def test_an_overdue_read_that_finds_her_free_takes_the_mode_she_is_in_now(
        read_at: str, expected: tuple[str, str, float] | None) -> None:
    tz = "Europe/Berlin"
    start = times.parse_when("2025-06-02T08:00", tz, 0.0)
    world = World(clock=Clock(start, rate=0.0), timezone=tz, start=start)
    world.begin()
    schedule = Schedule(timezone=tz, awake=("07:00", "23:00"),
                        busy=[BusyBlock(start="09:00", end="17:00")])
    sim = ScriptUser()
    sim.configure({"answers": [{"text": "ok"}]})
    person = Person(name="Dana", timezone=tz, schedule=schedule)
    await sim.setup(person, None)  # type: ignore[arg-type]
    user = UserSide(world, sim, person, schedule, done_ends_run=False)
    world.chat.sent.append(Sent(number=1, text="Shall I book Friday?", seat="assistant",
                                at_us=world.us(start + 3600), wake=1, phase="turn"))
    due = times.parse_when("2025-06-02T17:00", tz, start)
    event = Event(world.us(due), "read", key=("read", 1), data={"mode": "busy"})
    world.jump_to(world.us(times.parse_when(read_at, tz, start)), "read")
    record = await user.read(event)
    if expected is None:
        assert record is None and [e["kind"] for e in world.timeline.entries][-1] == \
            "read_deferred"
        return
    assert record is not None
    assert (record["mode"], record["planned_mode"], record["overdue_s"]) == expected


@pytest.mark.parametrize(("end", "checks", "expected"), [
    ("P3D", None, (True, "run_length")), ("PT8H", None, (False, "run_length")),
    ("PT8H", True, (True, "settings"))])
async def test_the_trigger_state_carries_its_settings_and_checks_say_where_they_came_from(
        tmp_path: Path, end: str, checks: bool | None, expected: tuple[bool, str]) -> None:
    env = make_env(tmp_path, {
        "end": end,
        "apps": [{"kind": "notes"}],
        "triggers": [{"name": "daily", "every": "P1D", "actions": [
            {"kind": "notify", "text": "day"}]},
            {"name": "mine", "on_change": {"app": "notes", "by": "agent"},
             "match": {"text": "buy*"}, "actions": [{"kind": "notify", "text": "noted",
                                                     "wait": "PT1M"}]}],
        "tasks": [{"prompt": "hello"}]},
        always_on=None if checks is None else {"checks": checks})
    episode = await run(env, Agent(by_pattern({"hello": say("Hi!")}, default=quiet())))
    assert episode.error is None, episode.error
    ao = episode.results["always_on"]
    assert ao["triggers"]["daily"]["settings"] == {
        "name": "daily", "every": "P1D", "actions": [{"kind": "notify", "text": "day"}]}
    assert ao["triggers"]["mine"]["settings"] == {
        "name": "mine", "on_change": {"app": "notes", "by": "agent"},
        "match": {"text": "buy*"},
        "actions": [{"kind": "notify", "text": "noted", "wait": "PT1M"}]}
    settings = ao["summary"]["settings"]
    assert (settings["checks"], settings["checks_from"]) == expected


async def test_the_budget_keeps_the_longest_contact_limit_in_reserve(tmp_path: Path) -> None:
    # Alex (played by a seat) may take 30 s to answer, nearly the whole budget (a budget
    # that cannot hold it is refused at load): after the first wake (0.1 s or more) the
    # reserve, twice that wake and Alex's limit, no longer fits, so the second wake closes.
    env = make_env(tmp_path, {
        "end": "P1D",
        "contacts": [{"name": "Alex", "persona": "a friend", "limit_s": 30.0},
                     {"name": "venue", "replies": ["yes"], "limit_s": 99.0}],
        "triggers": [{"name": f"alert{h}", "at": f"2025-06-02T{h:02d}:00", "actions": [
            {"kind": "notify", "text": f"a{h}"}]} for h in range(9, 20)]},
        always_on={"budget_s": 30.1})
    episode = await run(env, Agent(lambda text: ScriptedReply.tool_call(
        "stay_quiet", {}, latency_s=0.1)))
    assert episode.error is None, episode.error
    ao = episode.results["always_on"]
    # A scripted contact computes nothing, so only Alex's limit is kept back.
    assert ao["summary"]["settings"]["longest_contact_limit_s"] == 30.0
    assert ao["summary"]["settings"]["turn_timeout_s"] == 600.0  # the seat's default
    assert ao["end_reason"] == "budget"
    assert [w["final"] for w in wakes(episode)] == [False, True]


async def test_a_final_check_in_on_a_running_clock_ends_past_the_end_time(
        tmp_path: Path) -> None:
    # A real second of a turn is an hour: the final check-in at 10:00 takes its first call's
    # real time and 0.2 s more (12 minutes) after its message, so the run ends past 10:00.
    env = make_env(tmp_path, {"end": "PT2H", "rate": 3600.0, "tasks": [{"prompt": "hello"}]},
                   user={"answers": [{"text": "thanks"}]})
    agent = Agent(by_pattern({"hello": quiet(), "Final check-in": say("All done.")},
                             default=quiet()),
                  after_tools=ScriptedReply.text("wrapped up", latency_s=0.2))
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    ao = episode.results["always_on"]
    end = times.parse_when("2025-06-02T10:00", "Europe/Berlin", 0.0)
    assert ao["end_reason"] == "end_time" and ao["end"] == "2025-06-02T10:00:00+02:00"
    final = wakes(episode)[-1]
    assert final["final"] and final["at"] == ao["end"]
    assert ao["overran_s"] >= 12 * 60  # the turn's second call alone
    assert ao["ended_at"] == final["end_at"] > ao["end"]
    sent = ao["response"][-1]
    assert sent["text"] == "All done." and sent["t"] >= 2 * 3600
    # She is free at the end: her wrap-up comes when the run ended, past the end time.
    [wrap_up] = [r for r in ao["replies"] if r["last_read"]]
    assert wrap_up["read_at"] == ao["ended_at"] and wrap_up["text"] == "thanks"
    assert end < times.parse_when(wrap_up["read_at"], "Europe/Berlin", 0.0)
