"""Contacts: people other than the user who answer the agent (a venue, a friend).

A contact is played by a seat (an untrainable agent with a persona; one chat session per contact
per episode, its turns taken one at a time) or by a script (its ``replies`` in order, the last
one repeated). Asked something at task time t, a contact answers after a delay drawn from the
world's seeded generator, moved into its working hours, and is given ``limit_s`` real seconds
to compute the answer. :meth:`Contacts.settle` waits for the answers in progress, each up to its
limit; an answer that lands just past its limit is kept, a later one is dropped and recorded.
Contacts compute their answers side by side, or (``side_by_side=False``) one at a time in the
order they were asked; a contact answers its own questions one at a time. Each answer's limit
starts when its computing does.

The world hands a seat-played answer to an ``ask`` function the step supplies (so this module
opens no sessions itself).

Of the world, the contacts use the clock, the time zone, the seeded generator their delays are
drawn from, the event queue their answers go on, the timeline, and the world's ``deliver``,
which hands an answer to an app as a change made by ``others``
(:class:`~interplay.world.protocols.ContactsHost`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from interplay.log import get_logger
from interplay.values.clock import to_us
from interplay.world import times
from interplay.world.events import Event
from interplay.world.protocols import ContactsHost

log = get_logger("interplay.world.contacts")

#: How long past its limit an answer in progress is still waited for (and kept): a share of
#: the limit, between GRACE_MIN_S and GRACE_MAX_S.
GRACE_SHARE = 0.05
GRACE_MIN_S = 0.1
GRACE_MAX_S = 1.0


@attrs.define
class Contact:
    """A contact as a scenario writes it."""

    name: str
    #: Who they are, for a seat-played contact.
    persona: str = ""
    #: Scripted answers, in order (the last repeats); set these or a persona.
    replies: list[str] = attrs.Factory(list)
    #: The seat that plays a persona (its model and sampling).
    seat: str = "contact"
    #: How long they take to answer: one ISO-8601 duration or [low, high].
    delay: Any = "PT1H"
    #: Working hours (local, ``HH:MM``, e.g. ``["09:00", "18:00"]``) and the days they work
    #: (``mon``..``sun``, ``weekdays``, ``weekend``, ``daily``); left out: any time, any day.
    #: An empty list is refused: it is not a way to say "any time".
    hours: list[str] | None = None
    days: list[str] | None = None
    timezone: str = ""
    #: Real seconds a seat-played answer may take to compute.
    limit_s: float = 120.0
    #: The app their answers land in (an inbox); empty: an alert only.
    app: str = ""
    address: str = ""
    channel: str = "email"

    def problems(self, apps: dict[str, Any], tz: str) -> list[str]:
        where = f"contact {self.name!r}"
        out = times.check_delay(self.delay, f"{where}.delay")
        if bool(self.persona) == bool(self.replies):
            out.append(f"{where}: give a persona (played by a seat) or replies (scripted), "
                       f"not both and not neither")
        for i, reply in enumerate(self.replies):
            if not str(reply).strip():
                out.append(f"{where}.replies[{i}]: empty; a contact's answer needs words")
        if self.hours is not None:
            if not self.hours:
                out.append(f"{where}.hours: empty; give two times of day, e.g. "
                           f"[\"09:00\", \"18:00\"], or leave hours out for any time")
            elif len(self.hours) != 2:
                out.append(f"{where}.hours: two times of day, e.g. [\"09:00\", \"18:00\"]")
            else:
                for value in self.hours:
                    try:
                        times.parse_clock_time(value)
                    except ValueError as exc:
                        out.append(f"{where}.hours: {exc}")
        if self.days is not None:
            if not self.days:
                out.append(f"{where}.days: empty; name the days they work, e.g. "
                           f"[\"weekdays\"], or leave days out for every day")
            else:
                try:
                    times.parse_days(self.days)
                except ValueError as exc:
                    out.append(f"{where}.days: {exc}")
        try:
            times.zone(self.timezone or tz)
        except ValueError as exc:
            out.append(f"{where}.timezone: {exc}")
        if self.limit_s <= 0:
            out.append(f"{where}.limit_s: must be more than 0")
        if self.app and self.app not in apps:
            out.append(f"{where}.app: no app named {self.app!r}")
        return out

    def next_working(self, t: float, tz: str) -> float:
        """The first moment at or after ``t`` inside this contact's working hours."""
        if not self.hours and not self.days:
            return t
        zone_name = self.timezone or tz
        zone = times.zone(zone_name)
        days = times.parse_days(self.days or ())
        start, end = (times.parse_clock_time(h) for h in (self.hours or ["00:00", "24:00"]))
        today = times.local(t, zone_name).date()
        for offset in range(0, 15):
            day = today + dt.timedelta(days=offset)
            if day.weekday() not in days:
                continue
            midnight = dt.datetime.combine(day, dt.time(), zone)
            opens = (midnight + dt.timedelta(minutes=start)).timestamp()
            closes = (midnight + dt.timedelta(minutes=end)).timestamp()
            if t < closes:
                return max(t, opens)
        return t


Ask = Callable[[Contact, str], Awaitable[str]]


@attrs.define(eq=False)
class Call:
    """One question to a contact and its answer."""

    contact: str
    number: int
    key: tuple[Any, ...]
    message: str
    requested_us: int
    delay_s: float
    limit_s: float
    started_real: float
    #: When the answer lands (its delay from the request, moved into working hours): known
    #: when asked, so a running clock is held there while a seat still computes it.
    due_us: int = 0
    task: asyncio.Task[str] | None = None
    text: str | None = None
    status: str = "computing"  # computing, scheduled, delivered, timed_out, failed
    event: Event | None = None
    context: dict[str, Any] = attrs.Factory(dict)
    #: Set once its computing has started (its limit runs from then).
    began: asyncio.Event = attrs.Factory(asyncio.Event)


class Contacts:
    def __init__(self, world: ContactsHost, ask: Ask | None = None, *,
                 side_by_side: bool = True) -> None:
        self.world = world
        self.ask = ask
        #: Compute seat-played answers side by side; False: one at a time, in asking order.
        self.side_by_side = side_by_side
        self._one_at_a_time = asyncio.Lock()
        #: Per contact: held while it computes an answer (it answers one question at a time).
        self._answering: dict[str, asyncio.Lock] = {}
        self.specs: dict[str, Contact] = {}
        self.calls: list[Call] = []
        self._counts: dict[str, int] = {}
        self._scripted_next: dict[str, int] = {}

    def add(self, spec: Contact) -> None:
        self.specs[spec.name] = spec

    def request(self, name: str, message: str, key: tuple[Any, ...],
                context: dict[str, Any]) -> Call:
        """Ask contact ``name``; the answer is scheduled once computed."""
        spec = self.specs[name]
        self._counts[name] = self._counts.get(name, 0) + 1
        requested_us = self.world.clock.now_us()
        delay_s = times.draw_delay(spec.delay, self.world.rng)
        due = spec.next_working(requested_us / 1e6 + delay_s, self.world.timezone)
        call = Call(contact=name, number=self._counts[name], key=key, message=message,
                    requested_us=requested_us, delay_s=delay_s, limit_s=spec.limit_s,
                    started_real=time.monotonic(), due_us=to_us(due), context=context)
        self.calls.append(call)
        self.world.timeline.add("contact_asked", call.requested_us, contact=name,
                                call=call.number, chars=len(message))
        if spec.replies:
            i = self._scripted_next.get(name, 0)
            self._scripted_next[name] = i + 1
            self._answered(call, spec.replies[min(i, len(spec.replies) - 1)])
        elif self.ask is None:
            call.status = "failed"
            self.world.timeline.add("contact_failed", call.requested_us, contact=name,
                                    call=call.number, error="no seat can play this contact")
        else:
            call.task = asyncio.ensure_future(self._compute(call, spec, message))
            call.task.add_done_callback(lambda task, c=call: self._computed(c, task))
        return call

    async def _compute(self, call: Call, spec: Contact, message: str) -> str:
        """Compute one answer. A contact answers one question at a time (one chat session
        per contact), so a call waits for the contact's earlier calls; one at a time
        (``side_by_side`` off), for every earlier call. Its limit runs from when the contact
        starts on it, never from when it was asked: a contact asked twice in a row is not
        cut off on its second answer for the time the first took."""
        assert self.ask is not None
        answering = self._answering.setdefault(call.contact, asyncio.Lock())
        async with contextlib.AsyncExitStack() as held:
            if not self.side_by_side:
                await held.enter_async_context(self._one_at_a_time)
            await held.enter_async_context(answering)
            call.started_real = time.monotonic()
            call.began.set()
            return await self.ask(spec, message)

    def _computed(self, call: Call, task: asyncio.Task[str]) -> None:
        if call.status != "computing":
            return
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            call.status = "failed"
            log.warning("contacts.answer_failed", contact_name=call.contact, call=call.number,
                        exception_type=type(exc).__name__)
            self.world.timeline.add("contact_failed", self.world.clock.now_us(),
                                    contact=call.contact, call=call.number,
                                    error=type(exc).__name__)
            return
        self._answered(call, task.result())

    def _answered(self, call: Call, text: str) -> None:
        call.text = text
        call.status = "scheduled"
        call.event = self.world.queue.push(Event(
            call.due_us, "contact_reply", key=("contact", call.contact, call.number),
            data={"call": call}))

    def in_progress(self) -> list[Call]:
        return [c for c in self.calls if c.status == "computing"]

    async def settle(self) -> int:
        """Wait for the answers being computed, each up to its limit (plus a short grace, so
        an answer landing just past it is kept); the rest are dropped. Returns how many were
        waited for."""
        waiting = self.in_progress()
        for call in waiting:
            await self.settle_call(call)
        return len(waiting)

    def first_computing(self) -> Call | None:
        """The answer still being computed that is due first (None when none is)."""
        return min(self.in_progress(), key=lambda c: (c.due_us, c.key), default=None)

    async def settle_call(self, call: Call) -> None:
        """Wait for one answer being computed, up to its limit and a short grace; an answer
        that does not come by then is dropped (``contact_timed_out``). The answers its
        computing waits for are settled first: the same contact's earlier calls, and one at a
        time every earlier call."""
        for earlier in self.in_progress():
            if earlier is call:
                break
            if not self.side_by_side or earlier.contact == call.contact:
                await self._settle_one(earlier)
        await self._settle_one(call)

    async def _settle_one(self, call: Call) -> None:
        assert call.task is not None
        if not call.began.is_set() and not call.task.done():
            began = asyncio.ensure_future(call.began.wait())
            await asyncio.wait({call.task, began}, return_when=asyncio.FIRST_COMPLETED)
            began.cancel()
        left = call.started_real + call.limit_s - time.monotonic()
        if left > 0 and not call.task.done():
            await asyncio.wait({call.task}, timeout=left)
        if not call.task.done():
            grace = min(GRACE_MAX_S, max(GRACE_MIN_S, call.limit_s * GRACE_SHARE))
            await asyncio.wait({call.task}, timeout=grace)
        if not call.task.done():
            call.task.cancel()
            call.status = "timed_out"
            log.info("contacts.answer_timed_out", contact_name=call.contact, call=call.number,
                     limit_s=call.limit_s)
            self.world.timeline.add("contact_timed_out", self.world.clock.now_us(),
                                    contact=call.contact, call=call.number,
                                    limit_s=call.limit_s)
        else:
            # The done callback may not have run yet when wait() returns.
            self._computed(call, call.task)

    def deliver(self, event: Event) -> Call:
        """The answer reaches the user's side: into the contact's app, if it has one."""
        call: Call = event.data["call"]
        call.status = "delivered"
        spec = self.specs[call.contact]
        if spec.app:
            self.world.deliver(spec.app, spec.address or spec.name, call.text or "",
                               subject=f"Re: {call.context.get('subject', '')}"
                               if call.context.get("subject") else "")
        return call

    def state(self) -> list[dict[str, Any]]:
        """Answers being computed, with the real time left of their limits."""
        now = time.monotonic()
        return [{"contact": c.contact, "call": c.number, "key": c.key,
                 "limit_left_s": round(max(0.0, c.started_real + c.limit_s - now), 3)
                 if c.began.is_set() else c.limit_s}
                for c in self.in_progress()]

    async def aclose(self) -> None:
        for call in self.in_progress():
            assert call.task is not None
            call.task.cancel()
        tasks = [c.task for c in self.calls if c.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
