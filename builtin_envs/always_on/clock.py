"""The world while the agent's turn runs on a running clock (an always_on run at ``rate`` > 0).

The clock is held at the world's next moment (its next event, or a contact's answer still
being computed that is due sooner), and a timer carries out what falls due as the clock reaches
it, at its mark, whatever the agent is doing: a trigger fires, a contact's answer lands, she
reads, her reply is written. Each of the agent's tool calls first brings the world up to the
clock and runs with the clock stopped (a tool takes no task time, and what it queues is due
when it was called), so a tool never sees a world behind its clock, however the call arrived.
What wakes the agent waits for its next wake. :mod:`.arrivals` owns what one event does
(:meth:`.arrivals.Arrivals.take_one`); this module owns only when it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from interplay.contracts.contexts import ChatSession, Reply
from interplay.values.records import Message
from interplay.world.events import Event
from interplay.world.world import World

#: Carries out one event at its mark; the reason the run ends because of it, or None.
TakeOne = Callable[[Event], Awaitable[str | None]]


class TurnClock:
    """When the world acts while a turn runs on a running clock."""

    def __init__(self, world: World, take_one: TakeOne) -> None:
        self.world = world
        self.take_one = take_one
        #: Why the run ends, found while a turn ran (her read failed, her blank done): the run
        #: ends after that turn.
        self.ending: str | None = None
        # One carrier-out of due events at a time; what wakes the timer when an event is
        # queued; how many of the agent's tool calls are running.
        self._busy = asyncio.Lock()
        self._poke = asyncio.Event()
        self._tools_running = 0

    async def turn(self, session: ChatSession, rate: float, message: str, *,
                   tool_choice: str | None, context: list[Message] | None) -> Reply:
        """One turn of the agent's at ``rate``, the world going on at its own times; after it
        (the clock frozen at its end) what fell due by then is carried out too."""
        world = self.world
        mark = self.next_mark_us()
        world.clock.hold_at(None if mark is None else mark / 1e6)
        world.queue.on_push = self._pushed
        world.tool_time = self._tool_time
        world.clock.set_rate(rate)
        timer = asyncio.ensure_future(self._timer())
        try:
            reply = await session.turn(message, tool_choice=tool_choice, context=context)
        except BaseException:
            # Cut (the budget, a cancel) or broken: nothing more is carried out.
            timer.cancel()
            with contextlib.suppress(BaseException):
                await timer
            raise
        finally:
            world.clock.freeze()
            world.tool_time = None
            world.queue.on_push = None
        try:
            await self._stop(timer)
        finally:
            world.clock.hold_at(None)
        return reply

    def next_mark_us(self) -> int | None:
        """The next moment the world must act at: its next event, or a contact's answer still
        being computed that is due sooner (the clock waits for it there, up to its limit)."""
        event = self.world.queue.peek()
        computing = self.world.contacts.first_computing()
        marks = [m.due_us for m in (event, computing) if m is not None]
        return min(marks) if marks else None

    async def run_due(self, *, may_wait: bool) -> None:
        """Carry out, each at its mark, what is due by the clock (held at the first of them).
        ``may_wait``: also her reads and the contacts' answers still being computed, which
        take real time (the timer's part; a tool call's catch-up stops before them)."""
        world, queue = self.world, self.world.queue
        while self.ending is None:
            now_us = world.clock.now_us()
            event = queue.peek()
            computing = world.contacts.first_computing()
            if computing is not None and computing.due_us <= now_us and (
                    event is None or computing.due_us <= event.due_us):
                if not may_wait:
                    return
                await world.contacts.settle_call(computing)
                continue
            if event is None or event.due_us > now_us or (event.kind == "read"
                                                            and not may_wait):
                return
            queue.pop()
            self.ending = await self.take_one(event)

    @contextlib.asynccontextmanager
    async def _tool_time(self) -> AsyncIterator[None]:
        """An agent's tool call: what is due by now takes effect first, and the clock stops
        while the tool runs."""
        clock = self.world.clock
        if not self._busy.locked():
            async with self._busy:
                await self.run_due(may_wait=False)
        self._tools_running += 1
        clock.hold_at(clock.now())
        try:
            yield
        finally:
            self._tools_running -= 1
            if self._tools_running == 0:
                mark = self.next_mark_us()
                clock.hold_at(None if mark is None else mark / 1e6)
                self._poke.set()

    async def _timer(self) -> None:
        """Hold the clock at the world's next moment, and carry out what falls due as the
        clock reaches it."""
        clock = self.world.clock
        while True:
            mark = self.next_mark_us()
            clock.hold_at(None if mark is None else mark / 1e6)
            if mark is not None and clock.reached(mark / 1e6):
                async with self._busy:
                    await self.run_due(may_wait=True)
                if self.ending is not None or self.world.failure is not None:
                    return
                continue
            self._poke.clear()
            left = None if mark is None or clock.rate == 0 else \
                max(0.0, (mark / 1e6 - clock.now()) / clock.rate)
            try:
                await asyncio.wait_for(self._poke.wait(), left)
            except TimeoutError:
                pass

    def _pushed(self, event: Event) -> None:
        """An event queued during the turn: a sooner one holds the clock at once."""
        held = self.world.clock.held_at
        if held is None or event.due < held:
            self.world.clock.hold_at(event.due)
        self._poke.set()

    async def _stop(self, timer: asyncio.Future[None]) -> None:
        """The turn is over: let the timer finish what it is carrying out, then carry out what
        fell due by the turn's end (``after_turn``)."""
        if not timer.done():
            async with self._busy:
                timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer
        if not timer.cancelled() and timer.exception() is not None:
            raise timer.exception()  # type: ignore[misc]
        self.world.enter("after_turn")
        async with self._busy:
            await self.run_due(may_wait=True)
