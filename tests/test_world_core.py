"""The world's parts on their own: times, the event queue, the user's schedule, triggers and
their fires, contacts, the user-chat tools, the changelog and the timeline's folding."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from interplay.errors import InterplayError
from interplay.values.clock import Clock
from interplay.values.tools import Tool
from interplay.world import BusyBlock, Schedule, build_world, load_scenario, scenario_from, times
from interplay.world.events import Event, EventQueue
from interplay.world.timeline import CHANGES_KEPT, JUMPS_KEPT, Timeline
from interplay.world.world import World

BERLIN = "Europe/Berlin"
MONDAY_8 = times.parse_instant("2025-06-02T08:00", BERLIN)  # a Monday


def world_from(data: dict[str, Any], **kwargs: Any) -> World:
    base = {"start": "2025-06-02T08:00", "timezone": BERLIN}
    return build_world(scenario_from({**base, **data}), clock=Clock(),
                       rng=random.Random(7), **kwargs)


def tools_of(world: World, seat: str = "assistant", deny: tuple[str, ...] = ()) -> dict[str, Tool]:
    return {t.name: t for t in world.tools_for(seat, deny)}


async def drain(world: World, until: float) -> list[Event]:
    """Run world events up to ``until`` the way the loop does, returning the others."""
    out = []
    while (event := world.queue.peek()) is not None and event.due <= until:
        world.queue.pop()
        world.jump_to(event.due_us, event.kind)
        if not world.run_event(event):
            out.append(event)
    return out


# -- times -------------------------------------------------------------------------------------


def test_durations_instants_and_days() -> None:
    assert times.parse_duration("PT3H") == 10800
    assert times.parse_duration("P1DT12H30M") == 131400
    assert times.parse_duration("P2W") == 14 * 86400
    assert times.parse_duration("PT1.5S") == 1.5
    assert times.format_duration(131400) == "P1DT12H30M"
    for bad in ("3h", "P", "PT", "P1Y", "P1M"):
        with pytest.raises(ValueError):
            times.parse_duration(bad)
    with pytest.raises(ValueError, match="no fixed length"):
        times.parse_duration("P1M")
    # A naive date-time is local to the zone; an offset wins.
    assert times.parse_instant("2025-06-02T06:00Z", BERLIN) == MONDAY_8
    assert times.iso(MONDAY_8, BERLIN) == "2025-06-02T08:00:00+02:00"
    assert times.readable(MONDAY_8, BERLIN) == "Mon 2025-06-02 08:00 Europe/Berlin"
    assert times.readable(MONDAY_8, "UTC") == "Mon 2025-06-02 06:00 UTC"
    with pytest.raises(ValueError, match="unknown time zone"):
        times.zone("Mars/Olympus")
    assert times.parse_days(["weekdays"]) == frozenset(range(5))
    assert times.parse_days(["Sat", "sunday"]) == frozenset({5, 6})
    assert times.parse_days([]) == frozenset(range(7))
    low, high = times.delay_bounds(["PT1H", "PT3H"])
    draws = {times.draw_delay(["PT1H", "PT3H"], random.Random(s)) for s in range(20)}
    assert all(low <= d <= high for d in draws) and len(draws) > 1


# -- the event queue -----------------------------------------------------------------------------


def test_same_mark_events_come_in_a_fixed_order_whatever_the_queueing_order() -> None:
    def make() -> list[Event]:
        return [Event(10, "read", key=("read", 1)), Event(10, "alert", key=("b", 1, 0)),
                Event(10, "alert", key=("a", 2, 0)), Event(10, "trigger", key=("t", 1)),
                Event(5, "check", key=("check", 1)), Event(10, "contact_reply",
                                                           key=("contact", "venue", 2))]

    orders = []
    for seed in range(5):
        queue = EventQueue()
        events = make()
        random.Random(seed).shuffle(events)
        for event in events:
            queue.push(event)
        orders.append([(e.kind, e.key) for e in (queue.pop() for _ in range(len(events)))])
    assert all(order == orders[0] for order in orders)
    assert [kind for kind, _ in orders[0]] == ["check", "trigger", "contact_reply", "alert",
                                              "alert", "read"]
    assert orders[0][3][1] == ("a", 2, 0)


def test_cancelled_events_are_skipped_and_recurring_ones_told_apart() -> None:
    queue = EventQueue()
    one = queue.push(Event(1, "alert"))
    queue.push(Event(2, "trigger", recurring=True))
    assert not queue.only_recurring()
    queue.cancel(one)
    assert len(queue) == 1 and queue.only_recurring()
    assert queue.pop().kind == "trigger" and not queue
    with pytest.raises(ValueError):
        queue.push(Event(1, "nonsense"))


# -- the user's schedule -----------------------------------------------------------------------


def dana() -> Schedule:
    return Schedule(timezone=BERLIN, awake=("07:00", "23:00"),
                    busy=[BusyBlock("09:00", "17:00", ["weekdays"], "work")],
                    reply_delays={"free": "PT5M", "busy": ["PT10M", "PT20M"], "woken": "PT30M"})


def at(text: str) -> float:
    return times.parse_instant(text, BERLIN)


def test_what_she_is_doing_and_when_she_reads() -> None:
    s = dana()
    assert s.problems() == []
    assert s.state_at(at("2025-06-02T08:00")) == "free"
    assert s.state_at(at("2025-06-02T10:00")) == "busy"
    assert s.state_at(at("2025-06-02T23:30")) == "asleep"
    assert s.state_at(at("2025-06-07T10:00")) == "free"  # Saturday: no work
    # At work: she reads when work ends, in the busy mode.
    assert s.read_plan(at("2025-06-02T10:00")) == (at("2025-06-02T17:00"), "busy")
    # At night: when she wakes; on a weekday morning before work that is at once free.
    assert s.read_plan(at("2025-06-02T23:30")) == (at("2025-06-03T07:00"), "woken")
    # Friday night, asleep: Saturday 07:00.
    assert s.next_free(at("2025-06-06T23:59")) == at("2025-06-07T07:00")
    assert s.reply_delay("free", random.Random(1)) == 300
    assert 600 <= s.reply_delay("busy", random.Random(1)) <= 1200


def test_the_busy_block_she_is_in_or_that_comes_soon() -> None:
    s = dana()
    work = s.busy[0]
    assert s.busy_near(at("2025-06-02T10:00")) == (work, at("2025-06-02T09:00"),
                                                   at("2025-06-02T17:00"))
    assert s.busy_near(at("2025-06-02T08:00"), within_s=3600) == (
        work, at("2025-06-02T09:00"), at("2025-06-02T17:00"))
    assert s.busy_near(at("2025-06-02T07:30"), within_s=1800) is None
    assert s.busy_near(at("2025-06-07T08:30"), within_s=3600) is None  # Saturday


def test_awake_hours_across_midnight() -> None:
    owl = Schedule(timezone="UTC", awake=("10:00", "02:00"))
    assert owl.state_at(times.parse_instant("2025-06-02T01:00", "UTC")) == "free"
    assert owl.state_at(times.parse_instant("2025-06-02T03:00", "UTC")) == "asleep"
    assert owl.next_free(times.parse_instant("2025-06-02T03:00", "UTC")) == \
        times.parse_instant("2025-06-02T10:00", "UTC")


def test_reply_delays_her_schedule_can_never_use_are_refused() -> None:
    no_schedule = Schedule(reply_delays={"busy": "PT10M", "woken": "PT1H"})
    problems = no_schedule.problems()
    assert any("reply_delays.busy" in p and "no busy blocks" in p for p in problems)
    assert any("reply_delays.woken" in p and "no awake hours" in p for p in problems)
    assert Schedule(reply_delays={"free": "PT5M"}).problems() == []
    assert any("unknown mode" in p for p in Schedule(reply_delays={"lazy": "PT1M"}).problems())
    assert any("unknown time zone" in p for p in Schedule(timezone="Nowhere/X").problems())


# -- triggers ----------------------------------------------------------------------------------


async def test_time_triggers_at_after_every_with_count() -> None:
    world = world_from({"triggers": [
        {"name": "at", "at": "2025-06-02T12:00", "actions": [
            {"kind": "notify", "text": "noon"}]},
        {"name": "after", "after": "PT1H", "actions": [{"kind": "notify", "text": "one hour"}]},
        {"name": "daily", "every": "P1D", "count": 2, "actions": [
            {"kind": "notify", "text": "day {fire}"}]}]})
    alerts = await drain(world, MONDAY_8 + 5 * 86400)
    assert [(e.data["text"], e.due - MONDAY_8) for e in alerts] == [
        ("one hour", 3600), ("noon", 4 * 3600), ("day 1", 86400), ("day 2", 2 * 86400)]
    assert world.triggers.state()["daily"]["fired"] == 2


async def test_set_time_re_anchors_relative_and_recurring_triggers() -> None:
    world = world_from({"triggers": [
        {"name": "after", "after": "PT2H", "actions": [{"kind": "notify", "text": "a"}]},
        {"name": "hourly", "every": "PT1H", "actions": [{"kind": "notify", "text": "h"}]},
        {"name": "fixed", "at": "2025-06-05T08:00", "actions": [{"kind": "notify",
                                                                  "text": "f"}]}]})
    new = MONDAY_8 + 86400 + 1800
    world.clock.set_time(new)
    due = {e.data.get("trigger"): e.due for e in world.queue}
    assert due["after"] == new + 7200
    assert due["hourly"] == new + 3600
    assert due["fixed"] == at("2025-06-05T08:00")
    assert any(e["kind"] == "set_time" for e in world.timeline.entries)


async def test_notify_and_reply_fires_run_side_by_side_each_with_its_own_wait() -> None:
    world = world_from({
        "apps": [{"kind": "inbox", "state": {"address": "dana@example.com"}}],
        "triggers": [{"name": "ack", "on_tool": "send_email", "match": {"to": "*@venue.example"},
                      "actions": [{"kind": "notify", "wait": "PT30M",
                                   "text": "receipt {fire} for {args.subject}"}]}]})
    tools = tools_of(world)
    await tools["send_email"].call({"to": "a@venue.example", "subject": "one", "body": "x"})
    world.clock.advance(600)
    await tools["send_email"].call({"to": "b@venue.example", "subject": "two", "body": "y"})
    await tools["send_email"].call({"to": "c@elsewhere.example", "subject": "no", "body": "z"})
    state = world.triggers.state()["ack"]
    assert [f["fire"] for f in state["running"]] == [1, 2]  # side by side
    assert state["running"][0]["waiting_until"] != state["running"][1]["waiting_until"]
    alerts = await drain(world, MONDAY_8 + 86400)
    assert [(e.data["text"], round(e.due - MONDAY_8)) for e in alerts] == [
        ("receipt 1 for one", 1800), ("receipt 2 for two", 2400)]


async def test_a_trigger_with_a_tool_action_queues_its_fires() -> None:
    world = world_from({
        "apps": [{"kind": "shop", "state": {"items": {"cake": {"name": "cake", "price": 30,
                                                                "stock": 5}}}}],
        "triggers": [{"name": "reprice", "on_change": {"app": "shop", "action": "bought",
                                                       "by": "agent"},
                      "actions": [{"kind": "notify", "to": "phone", "text": "bought {fire}"},
                                  {"kind": "tool", "wait": "PT1H", "app": "shop",
                                   "tool": "set_price", "args": {"sku": "cake", "price": 35}}]}]})
    tools = tools_of(world)
    await tools["buy"].call({"sku": "cake"})
    await tools["buy"].call({"sku": "cake"})
    state = world.triggers.state()["reprice"]
    assert [f["fire"] for f in state["running"]] == [1] and state["queued"] == [2]
    await drain(world, MONDAY_8 + 86400)
    changes = [e for e in world.timeline.entries if e["kind"] == "change"]
    assert [(c["action"], c["by"]) for c in changes] == [
        ("bought", "agent"), ("bought", "agent"), ("price_changed", "none"),
        ("price_changed", "none")]
    # The second fire started only when the first finished: its tool ran an hour later.
    assert changes[3]["t"] - changes[2]["t"] == 3600
    assert [p.text for p in world.chat.phone] == ["bought 1", "bought 2"]


async def test_a_trigger_that_sets_itself_off_is_stopped() -> None:
    world = world_from({
        "apps": [{"kind": "notes"}],
        "triggers": [{"name": "echo", "on_change": {"app": "notes"}, "actions": [
            {"kind": "tool", "app": "notes", "tool": "add_note", "args": {"text": "again"}}]}]})
    with pytest.raises(RuntimeError, match="sets it off again"):
        await tools_of(world)["add_note"].call({"text": "first"})


# -- contacts ----------------------------------------------------------------------------------


async def test_a_scripted_contact_answers_after_its_delay_inside_working_hours() -> None:
    world = world_from({
        "apps": [{"kind": "inbox"}],
        "contacts": [{"name": "venue", "replies": ["Free on Saturday.", "Booked."],
                      "delay": "PT3H", "hours": ["10:00", "18:00"], "days": ["weekdays"],
                      "app": "inbox", "address": "events@venue.example"}],
        "triggers": [{"name": "ask", "on_tool": "send_email", "actions": [
            {"kind": "reply", "contact": "venue"}]}]})
    world.clock.advance_to(at("2025-06-06T16:00"))  # Friday: 19:00 is past closing
    await tools_of(world)["send_email"].call({"to": "events@venue.example",
                                              "subject": "party", "body": "Saturday?"})
    [reply] = await drain(world, at("2025-06-10T00:00"))
    assert reply.kind == "contact_reply" and reply.due == at("2025-06-09T10:00")  # Monday
    call = world.contacts.deliver(reply)
    assert call.text == "Free on Saturday."
    inbox = world.apps["inbox"].state["messages"]
    assert inbox[-1]["from"] == "events@venue.example" and inbox[-1]["subject"] == "Re: party"
    change = [e for e in world.timeline.entries if e["kind"] == "change"][-1]
    assert (change["action"], change["by"]) == ("email_received", "others")


@pytest.mark.parametrize("side_by_side", [True, False])
async def test_a_contact_asked_twice_has_its_whole_limit_for_each_answer(
        side_by_side: bool) -> None:
    # Each answer takes 0.3 s of a 0.4 s limit; the contact answers one question at a time,
    # so the second waits 0.3 s for the first: its limit runs from when it starts, not from
    # when it was asked (0.6 s after it, past the limit and the grace, it would be cut off).
    running: list[str] = []

    async def ask(contact: Any, message: str) -> str:
        assert not running, "a contact computed two answers at once"
        running.append(message)
        await asyncio.sleep(0.3)
        running.remove(message)
        return f"about {message}"

    world = world_from({
        "contacts": [{"name": "alex", "persona": "a friend", "delay": "PT10M", "limit_s": 0.4}],
        "triggers": [{"name": "go", "after": "PT1M", "actions": [
            {"kind": "reply", "contact": "alex", "message": m} for m in ("cake", "music")]}]},
        ask=ask, contacts_side_by_side=side_by_side)
    await drain(world, MONDAY_8 + 60)
    await world.settle()
    assert [(c.number, c.status, c.text) for c in world.contacts.calls] == [
        (1, "scheduled", "about cake"), (2, "scheduled", "about music")]
    assert "contact_timed_out" not in [e["kind"] for e in world.timeline.entries]


async def test_seat_contacts_are_settled_up_to_their_limit() -> None:
    asked: list[str] = []

    async def ask(contact: Any, message: str) -> str:
        asked.append(contact.name)
        await asyncio.sleep({"quick": 0.0, "late": 0.25, "slow": 30.0}[contact.name])
        return f"{contact.name} says hi"

    world = world_from({
        "contacts": [{"name": n, "persona": "someone", "delay": "PT10M", "limit_s": limit}
                     for n, limit in (("quick", 5.0), ("late", 0.2), ("slow", 0.3))],
        "triggers": [{"name": "go", "after": "PT1M", "actions": [
            {"kind": "reply", "contact": n, "message": "hello"}
            for n in ("quick", "late", "slow")]}]}, ask=ask)
    await drain(world, MONDAY_8 + 60)
    assert {c["contact"] for c in world.contacts.state()} == {"quick", "late", "slow"}
    assert all(0 < c["limit_left_s"] <= 5 for c in world.contacts.state())
    # The trigger that asked reports them too, with the time left of each limit.
    in_progress = world.triggers.state()["go"]["contact_calls"]
    assert [c["contact"] for c in in_progress] == ["quick", "late", "slow"]
    await world.settle()
    status = {c.contact: c.status for c in world.contacts.calls}
    # Past its limit but inside the grace: kept. Far past: dropped and recorded.
    assert status == {"quick": "scheduled", "late": "scheduled", "slow": "timed_out"}
    kinds = [e["kind"] for e in world.timeline.entries]
    assert "contact_timed_out" in kinds and world.settled == 3
    replies = await drain(world, MONDAY_8 + 3600)
    assert sorted(e.data["call"].contact for e in replies) == ["late", "quick"]
    assert all(e.due == MONDAY_8 + 60 + 600 for e in replies)


# -- the user-chat tools -----------------------------------------------------------------------


async def test_chat_tools_are_plain_tools_numbering_and_tagging_messages() -> None:
    world = world_from({"queued": [{"text": "old news", "seat": "other"}]})
    queued: list[int] = []
    world.chat.on_message = lambda m: queued.append(m.number)
    tools = tools_of(world)
    for t in tools.values():
        json.dumps(t.spec())  # a JSON schema a tool server can serve as it is
    assert "queued as message #2" in await tools["message_user"].call({"text": "hello"})
    assert queued == [2]
    assert [m.seat for m in world.chat.sent] == ["other", "assistant"]
    assert [m.number for m in world.chat.sent_by("assistant")] == [2]
    assert await tools["stay_quiet"].call({}) and world.chat.quiet_wakes == {1}
    with pytest.raises(ValueError, match="at least PT3H"):
        await tools["schedule_check"].call({"note": "soon", "after": "PT1H"})
    assert "check #1" in await tools["schedule_check"].call({"note": "venue", "after": "PT4H"})
    assert json.loads(await tools["list_checks"].call({}))[0]["note"] == "venue"
    assert await tools["cancel_check"].call({"number": 1}) == "check #1 cancelled"
    assert json.loads(await tools["list_checks"].call({})) == []
    assert not world.queue  # the cancelled check is gone from the queue
    calls = world.take_tool_calls()
    assert [c["name"] for c in calls][:2] == ["message_user", "stay_quiet"]
    assert "error" in calls[2] and calls[2]["arguments"] == {"note": "soon", "after": "PT1H"}


def test_a_deny_list_never_takes_the_agents_channel() -> None:
    world = world_from({"apps": [{"kind": "notes"}, {"kind": "inbox"}]})
    names = set(tools_of(world, deny=("get_time", "add_note", "schedule_check", "*_email*")))
    assert {"get_time", "schedule_check", "message_user", "list_notes"} <= names
    assert not names & {"add_note", "list_emails", "read_email", "send_email"}
    assert set(tools_of(world, deny=("*",))) == {"message_user", "stay_quiet", "get_time",
                                                 "schedule_check", "list_checks",
                                                 "cancel_check"}


def test_checks_and_stay_quiet_can_be_left_out() -> None:
    from interplay.world.chat import ChatSettings

    world = world_from({}, chat=ChatSettings(stay_quiet=False, checks=False))
    assert set(tools_of(world)) == {"message_user", "get_time"}


# -- the changelog and the timeline ------------------------------------------------------------


async def test_changes_say_who_in_which_wake_and_phase() -> None:
    world = world_from({"apps": [{"kind": "notes"}]})
    world.enter("turn", wake=3)
    await tools_of(world)["add_note"].call({"text": "x"})
    world.enter("end")
    with world.acting("others"):
        world.apps["notes"].add_note("y")
    changes = [e for e in world.timeline.entries if e["kind"] == "change"]
    assert [(c["by"], c["wake"], c["phase"]) for c in changes] == [
        ("agent", 3, "turn"), ("others", 3, "end")]


def test_the_timeline_folds_jumps_and_changes() -> None:
    timeline = Timeline(0.0, "UTC")
    for i in range(JUMPS_KEPT + 5):
        timeline.jump(i * 1_000_000, (i + 1) * 1_000_000, "read" if i % 2 else "trigger",
                      ["digest"] if i == JUMPS_KEPT + 1 else None)
    kinds = [e["kind"] for e in timeline.entries]
    assert kinds.count("jump") == JUMPS_KEPT and kinds.count("jumps_folded") == 1
    fold = timeline.entries[-1]
    assert fold["count"] == 5 and fold["seconds"] == 5.0
    # A folded jump keeps its reason: what it went to, and the triggers at work across it.
    assert fold["next"] == {"trigger": 3, "read": 2} and fold["at_work"] == ["digest"]
    assert fold["until"] == times.iso(JUMPS_KEPT + 5, "UTC")
    timeline.gap()
    timeline.jump(100_000_000, 101_000_000, "alert")
    assert timeline.entries[-1]["kind"] == "jump" and timeline.jumps == JUMPS_KEPT + 6
    for i in range(CHANGES_KEPT + 3):
        timeline.change(i, 1, {"app": "notes", "action": "note_added"})
    timeline.change(0, 2, {"app": "notes", "action": "note_added"})
    kinds = [e["kind"] for e in timeline.entries]
    assert kinds.count("change") == CHANGES_KEPT + 1
    [folded] = [e for e in timeline.entries if e["kind"] == "changes_folded"]
    assert folded["count"] == 3 and folded["wake"] == 1
    assert timeline.changes == CHANGES_KEPT + 4


# -- scenarios ---------------------------------------------------------------------------------


def test_scenarios_read_from_toml_and_json(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text('start = "2025-06-02T08:00"\nend = "P7D"\ntimezone = "Europe/Berlin"\n'
                    '[[apps]]\nkind = "calendar"\n'
                    '[[triggers]]\nname = "hi"\nafter = "PT1H"\n'
                    '[[triggers.actions]]\nkind = "notify"\ntext = "hello"\n')
    scenario = load_scenario(toml)
    assert scenario.end_time == MONDAY_8 + 7 * 86400 and scenario.triggers[0].after == "PT1H"
    as_json = tmp_path / "s.json"
    as_json.write_text(json.dumps({"start": "2025-06-02T08:00", "timezone": BERLIN}))
    assert load_scenario(as_json).start_time == MONDAY_8


@pytest.mark.parametrize(("change", "message"), [
    ({"timezone": "Moon/Base"}, "unknown time zone"),
    ({"end": "2025-06-01T00:00"}, "end: must come after the start"),
    ({"apps": [{"kind": "spaceship"}]}, "unknown app kind 'spaceship'"),
    ({"apps": [{"kind": "no.such.module:App"}]}, "cannot be imported"),
    ({"triggers": [{"name": "t", "actions": [{"kind": "notify", "text": "x"}]}]},
     "exactly one of at/after/every"),
    ({"triggers": [{"name": "t", "after": "PT1H", "actions": [
        {"kind": "reply", "contact": "nobody"}]}]}, "no contact named 'nobody'"),
    ({"triggers": [{"name": "t", "after": "1 hour", "actions": [
        {"kind": "notify", "text": "x"}]}]}, "not an ISO-8601 duration"),
    ({"contacts": [{"name": "c", "persona": "p", "replies": ["r"]}]}, "not both"),
    ({"triggers": [{"name": "t", "on_tool": "fly", "actions": [
        {"kind": "notify", "text": "x"}]}]}, "no app has a tool 'fly'"),
    ({"rate": "fast"}, "rate"),
    ({"surprise": 1}, "surprise"),
])
def test_a_bad_scenario_is_one_line_naming_what_to_change(change: dict[str, Any],
                                                         message: str) -> None:
    data = {"start": "2025-06-02T08:00", "timezone": BERLIN, **change}
    with pytest.raises(InterplayError, match=message) as info:
        scenario_from(data)
    assert "\n" not in str(info.value)


async def test_an_app_never_hands_out_an_id_the_scenario_gave() -> None:
    world = world_from({"apps": [
        {"kind": "calendar", "state": {"events": [
            {"id": f"e{i}", "title": t, "start": "2025-06-03T09:00", "end": "2025-06-03T10:00"}
            for i, t in ((1, "gym"), (3, "dentist"))]}},
        {"kind": "inbox", "state": {"messages": [{"id": "m1", "from": "a@b.example"}]}}]})
    tools = tools_of(world)
    await tools["cancel_event"].call({"event_id": "e3"})
    added = json.loads(await tools["add_event"].call(
        {"title": "plumber", "start": "2025-06-04T09:00", "end": "2025-06-04T10:00"}))
    # Not e2 (a number between the scenario's), not e3 (gone, but the scenario's).
    assert added["id"] == "e4"
    assert "sent m2" in await tools["send_email"].call(
        {"to": "x@y.example", "subject": "hi", "body": "hello"})
