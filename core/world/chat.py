"""The user's chat with the agent, her phone, and the agent's scheduled checks; and the tools the
agent reaches them with: ``message_user``, ``stay_quiet``, ``get_time``, ``schedule_check``,
``list_checks``, ``cancel_check``.

The tools are plain :class:`interplay.Tool` values (a JSON schema and an async function of JSON
arguments returning text), bound to one world and one sender seat and to nothing of the harness
that calls them, so an in-process tool loop and a tool server for out-of-process harnesses
serve the very same tools. Messages are numbered in the order they are queued and tagged with
the seat that sent them: a message another seat queued is never this agent's.

Of the world, the chat uses the clock, the time zone, the current wake and phase (every
message is stamped with them) and the event queue the agent's checks go on
(:class:`~interplay.world.protocols.ChatHost`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs

from interplay.values.clock import to_us
from interplay.values.tools import Tool
from interplay.world import times
from interplay.world.events import Event
from interplay.world.protocols import ChatHost

#: The agent's scheduled checks.
CHECK_TOOLS = frozenset({"schedule_check", "list_checks", "cancel_check"})
#: The agent's channel to the user: a deny-list never takes them (the settings leave out
#: ``stay_quiet`` and the checks; ``message_user`` and ``get_time`` are always there), and no
#: app or seat tool may take their names, whatever the settings offer: a call by one of these
#: names always reaches her chat.
CHANNEL_TOOLS = frozenset({"message_user", "stay_quiet", "get_time"}) | CHECK_TOOLS


@attrs.define(eq=False)
class Sent:
    """A message queued for the user."""

    number: int
    text: str
    seat: str
    at_us: int
    wake: int
    phase: str
    read_at_us: int | None = None
    #: Seen only in the user's wrap-up read after the last wake (not a read that counts).
    wrap_up: bool = False
    #: Sent in a turn that then failed or timed out.
    leftover: bool = False


@attrs.define(eq=False)
class PhoneItem:
    at_us: int
    channel: str
    sender: str
    text: str
    seen: bool = False


@attrs.define(eq=False)
class Check:
    number: int
    note: str
    due_us: int
    scheduled_us: int
    wake: int
    status: str = "scheduled"  # scheduled, due, cancelled
    event: Event | None = None


@attrs.define
class ChatSettings:
    stay_quiet: bool = True
    checks: bool = True
    min_check_interval_s: float = 3 * 3600.0


class UserChat:
    """What passes between the agent and the user, and the agent's checks."""

    def __init__(self, world: ChatHost, user_name: str, settings: ChatSettings) -> None:
        self.world = world
        self.user_name = user_name
        self.settings = settings
        self.sent: list[Sent] = []
        self.phone: list[PhoneItem] = []
        self.checks: list[Check] = []
        #: Wakes in which the agent called stay_quiet.
        self.quiet_wakes: set[int] = set()
        #: Called with every message queued for the user (the user's side plans her read).
        self.on_message: Callable[[Sent], None] | None = None

    # -- what the world and the loop use ---------------------------------------------------

    def queue(self, text: str, seat: str) -> Sent:
        world = self.world
        message = Sent(number=len(self.sent) + 1, text=text, seat=seat,
                       at_us=world.clock.now_us(), wake=world.wake, phase=world.phase)
        self.sent.append(message)
        if self.on_message is not None:
            self.on_message(message)
        return message

    def unread(self, seat: str | None = None) -> list[Sent]:
        """The messages she has not read (``seat``: that seat's only)."""
        return [m for m in self.sent if m.read_at_us is None and not m.wrap_up
                and (seat is None or m.seat == seat)]

    def add_phone_item(self, channel: str, sender: str, text: str) -> PhoneItem:
        item = PhoneItem(self.world.clock.now_us(), channel, sender, text)
        self.phone.append(item)
        return item

    def sent_by(self, seat: str) -> list[Sent]:
        return [m for m in self.sent if m.seat == seat]

    def check_due(self, event: Event) -> Check:
        check: Check = event.data["check"]
        check.status = "due"
        check.event = None
        return check

    # -- the agent's tools -----------------------------------------------------------------

    def tools(self, seat: str) -> list[Tool]:
        """The chat tools for the agent in ``seat`` (as the settings allow)."""
        out = [self._message_user(seat), self._get_time()]
        if self.settings.stay_quiet:
            out.append(self._stay_quiet())
        if self.settings.checks:
            out += [self._schedule_check(), self._list_checks(), self._cancel_check()]
        return out

    def _message_user(self, seat: str) -> Tool:
        async def message_user(text: str) -> str:
            if not text.strip():
                raise ValueError("the message is empty")
            message = self.queue(text, seat)
            return (f"queued as message #{message.number} for {self.user_name}; she reads it "
                    f"when she next looks at her phone")

        return Tool("message_user",
                    f"Send {self.user_name} (the user) a message. This is the only way to reach "
                    f"her: she never sees your plain replies.",
                    _schema({"text": "the message"}, ["text"]), message_user, timeout_s=10.0)

    def _stay_quiet(self) -> Tool:
        async def stay_quiet(reason: str = "") -> str:
            self.quiet_wakes.add(self.world.wake)
            return "ok: nothing is sent this time"

        return Tool("stay_quiet",
                    f"Say that there is nothing to tell {self.user_name} now (nothing is sent).",
                    _schema({"reason": "why, for the record (optional)"}, []), stay_quiet,
                    timeout_s=10.0)

    def _get_time(self) -> Tool:
        async def get_time() -> str:
            world = self.world
            return times.readable(world.clock.now(), world.timezone)

        return Tool("get_time", "The current date and time in the user's time zone.",
                    _schema({}, []), get_time, timeout_s=10.0)

    def _schedule_check(self) -> Tool:
        minimum = self.settings.min_check_interval_s

        async def schedule_check(note: str, at: str = "", after: str = "") -> str:
            world = self.world
            now = world.clock.now()
            if bool(at) == bool(after):
                raise ValueError("give at (a local date-time such as 2025-06-03T09:00) or "
                                 "after (a duration such as PT4H), one of them")
            due = (times.parse_instant(at, world.timezone) if at
                   else now + times.parse_duration(after))
            if due - now < minimum - 1e-6:
                raise ValueError(f"a check must be at least {times.format_duration(minimum)} "
                                 f"from now; the earliest is "
                                 f"{times.readable(now + minimum, world.timezone)}")
            check = Check(number=len(self.checks) + 1, note=note, due_us=to_us(due),
                          scheduled_us=world.clock.now_us(), wake=world.wake)
            check.event = world.queue.push(Event(check.due_us, "check",
                                                 key=("check", check.number),
                                                 data={"check": check}))
            self.checks.append(check)
            return f"check #{check.number} set for {times.readable(due, world.timezone)}"

        return Tool("schedule_check",
                    "Be woken later to look at something again: at a local date-time, or after "
                    f"a duration (at least {times.format_duration(minimum)} from now).",
                    _schema({"note": "what to look at then",
                             "at": "a local date-time, e.g. 2025-06-03T09:00",
                             "after": "an ISO-8601 duration, e.g. PT4H"}, ["note"]),
                    schedule_check, timeout_s=10.0)

    def _list_checks(self) -> Tool:
        async def list_checks() -> str:
            tz = self.world.timezone
            return json.dumps([{"number": c.number, "note": c.note,
                                "at": times.readable(c.due_us / 1e6, tz)}
                               for c in self.checks if c.status == "scheduled"],
                              ensure_ascii=False)

        return Tool("list_checks", "Your scheduled checks that are not due yet.",
                    _schema({}, []), list_checks, timeout_s=10.0)

    def _cancel_check(self) -> Tool:
        async def cancel_check(number: int) -> str:
            for check in self.checks:
                if check.number == number and check.status == "scheduled":
                    check.status = "cancelled"
                    if check.event is not None:
                        self.world.queue.cancel(check.event)
                    return f"check #{number} cancelled"
            raise ValueError(f"there is no scheduled check #{number}")

        return Tool("cancel_check", "Cancel a scheduled check by its number.",
                    _schema({"number": "the check's number"}, ["number"], ints={"number"}),
                    cancel_check, timeout_s=10.0)


def _schema(props: dict[str, str], required: list[str], *,
            ints: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    return {"type": "object",
            "properties": {name: {"type": "integer" if name in ints else "string",
                                  "description": text} for name, text in props.items()},
            "required": required, "additionalProperties": False}
