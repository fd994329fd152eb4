"""Each part of the world runs on the narrow protocol it is given (interplay.world.protocols),
not on World: a host holding only what its protocol names (a real clock, event queue and
timeline, and a record of what it was asked to do) is enough for an app, the user's chat, the
contacts and the triggers. A part that reached for anything else of the world would fail here
with an AttributeError."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from interplay.values.clock import Clock
from interplay.world import times
from interplay.world.apps import BUILTIN_APPS
from interplay.world.chat import ChatSettings, UserChat
from interplay.world.contacts import Contact, Contacts
from interplay.world.events import Event, EventQueue
from interplay.world.timeline import Timeline
from interplay.world.triggers import Action, Fire, Trigger, TriggerLoop, Triggers

BERLIN = "Europe/Berlin"
START = times.parse_instant("2025-06-02T08:00", BERLIN)


class Host:
    """Exactly the members the protocols name, and a record of what the parts asked for."""

    __slots__ = ("changes", "clock", "delivered", "phase", "queue", "rng", "timeline",
                 "timezone", "wake")

    def __init__(self) -> None:
        self.clock = Clock(START, rate=0.0)
        self.timezone = BERLIN
        self.wake = 3
        self.phase = "turn"
        self.rng = random.Random(7)
        self.queue = EventQueue()
        self.timeline = Timeline(START, BERLIN)
        self.changes: list[tuple[str, str, dict[str, Any]]] = []
        self.delivered: list[tuple[str, str, str, dict[str, Any]]] = []

    def record_change(self, app: str, action: str, data: dict[str, Any]) -> None:
        self.changes.append((app, action, data))

    def deliver(self, app: str, sender: str, text: str, **meta: Any) -> None:
        self.delivered.append((app, sender, text, meta))


def pop(host: Host) -> Event:
    event = host.queue.pop()
    host.clock.advance_to(event.due)
    return event


def test_an_app_records_its_changes_through_its_host() -> None:
    host = Host()
    app = BUILTIN_APPS["calendar"]("cal")
    app.world = host
    app.add_event("Dentist", "2025-06-03T09:00", "2025-06-03T10:00")
    assert json.loads(app.list_events("2025-06-03"))[0]["title"] == "Dentist"
    assert host.changes == [
        ("cal", "event_added", {"id": "e1", "title": "Dentist", "start": "2025-06-03T09:00",
                                "end": "2025-06-03T10:00"})]
    assert app.stamp() == "2025-06-02T08:00:00+02:00"


async def test_the_chat_stamps_messages_and_queues_checks_on_its_host() -> None:
    host = Host()
    chat = UserChat(host, "Mara", ChatSettings())
    tools = {t.name: t for t in chat.tools("assistant")}
    await tools["message_user"].fn(text="Booked.")
    sent = chat.sent[0]
    assert (sent.number, sent.seat, sent.wake, sent.phase) == (1, "assistant", 3, "turn")
    assert await tools["get_time"].fn() == "Mon 2025-06-02 08:00 Europe/Berlin"
    await tools["schedule_check"].fn(note="look again", after="PT4H")
    event = pop(host)
    assert (event.kind, event.due) == ("check", START + 4 * 3600)
    assert chat.check_due(event).status == "due"


async def test_contacts_answer_and_deliver_through_their_host() -> None:
    host = Host()
    contacts = Contacts(host)
    contacts.add(Contact("venue", replies=["Yes, Saturday works."], delay="PT2H", app="inbox",
                         address="venue@example.com"))
    contacts.request("venue", "Saturday for 8?", ("ask", 1), {"subject": "Booking"})
    event = pop(host)
    assert (event.kind, event.due) == ("contact_reply", START + 2 * 3600)
    contacts.deliver(event)
    assert host.delivered == [("inbox", "venue@example.com", "Yes, Saturday works.",
                               {"subject": "Re: Booking"})]
    assert [e["kind"] for e in host.timeline.entries] == ["contact_asked"]


async def test_triggers_fire_on_their_host_and_hand_each_action_to_act() -> None:
    host = Host()
    acted: list[tuple[str, str, int]] = []

    def act(action: Action, fire: Fire) -> None:
        acted.append((action.text, fire.trigger, fire.number))

    calls = [{"contact": "venue", "call": 1, "key": ("hourly", 1, 0), "limit_left_s": 5.0}]
    triggers = Triggers(host, act=act, contact_calls=lambda: calls)
    triggers.add(Trigger("hourly", every="PT1H", count=2,
                         actions=[Action("notify", text="tick {fire}")]))
    triggers.arm(START)
    while host.queue:
        triggers.on_time(pop(host))
    assert acted == [("tick {fire}", "hourly", 1), ("tick {fire}", "hourly", 2)]
    assert [(e["kind"], e["t"]) for e in host.timeline.entries] == [("fire", 3600.0),
                                                                      ("fire", 7200.0)]
    assert triggers.state()["hourly"]["contact_calls"] == [
        {"contact": "venue", "call": 1, "limit_left_s": 5.0}]


def test_a_trigger_loop_is_kept_on_the_triggers_for_the_run_to_raise() -> None:
    host = Host()
    triggers = Triggers(host, act=lambda action, fire: None, contact_calls=list)
    triggers.add(Trigger("again", on_tool="poke", actions=[Action("notify", text="x")]))
    assert triggers.failure is None
    with pytest.raises(TriggerLoop):
        for _ in range(200):
            triggers.on_tool("poke", {})
    assert isinstance(triggers.failure, TriggerLoop)
