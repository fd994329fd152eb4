"""The virtual clock: simulated time injected into tools, triggers, user sims and the world.

``now`` advances at ``rate`` simulated seconds per real second from the last anchor; rate 0
freezes it. ``advance`` and ``set_time`` jump; ``set_rate`` keeps the anchors (the simulated
time does not move when the rate changes). ``hold_at`` sets a mark a running clock stops at
until the hold moves: a world whose clock runs while an agent thinks holds it at its next
event, so that time never passes an event before the world has carried it out. ``set_time``
also *re-arms*: listeners registered with ``on_set_time`` (relative and recurring triggers)
re-anchor on the new time, so code that only wants to pause the clock freezes it with
``set_rate(0)``, never with ``set_time``.

Times are marks on a microsecond grid: a mark less than 1 us away counts as reached, so a
float computed two ways never misses its moment. Anything waiting on simulated time
(:meth:`Clock.wait_until`) wakes whenever the clock changes and looks again; ``real_waits``
counts the waits that had to sleep in real time. Global time is never patched: code that needs
simulated time takes a Clock.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable

#: The clock's grid: marks closer than this count as reached.
RESOLUTION_S = 1e-6


def to_us(t: float) -> int:
    """A time in seconds as a whole number of microseconds (the world's marks)."""
    return round(t * 1_000_000)


def from_us(us: int) -> float:
    return us / 1_000_000


class Clock:
    """Simulated time: ``now()`` moves at ``rate`` simulated seconds per real second (0:
    frozen) from ``start`` (default: the real time now); ``advance``, ``set_time`` and
    ``set_rate`` move it. One per episode (``ctx.clock``), handed to whatever needs the time of
    the episode's world; see the module docstring for re-arming and waiting."""

    def __init__(self, start: float | None = None, *, rate: float = 1.0,
                 real: Callable[[], float] = time.monotonic) -> None:
        if rate < 0 or not math.isfinite(rate):
            raise ValueError("clock rate must be a finite number >= 0")
        self._real = real
        self._anchor_real = real()
        self._anchor_sim = time.time() if start is None else float(start)
        self._rate = float(rate)
        #: A mark the clock does not pass while it runs (None: no hold).
        self._hold: float | None = None
        self._rearm: list[Callable[[float], None]] = []
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._lock = threading.Lock()
        #: Waits that slept in real time for simulated time to pass (a world that jumps its
        #: clock never makes one).
        self.real_waits = 0

    @property
    def rate(self) -> float:
        return self._rate

    @property
    def frozen(self) -> bool:
        return self._rate == 0.0

    def now(self) -> float:
        """Simulated seconds since the epoch."""
        if self._rate == 0.0:
            return self._anchor_sim
        t = self._anchor_sim + (self._real() - self._anchor_real) * self._rate
        return t if self._hold is None or t < self._hold else max(self._hold, self._anchor_sim)

    @property
    def held_at(self) -> float | None:
        return self._hold

    def hold_at(self, mark: float | None) -> None:
        """While running, stop at ``mark`` (within the 1 us grid) until the hold is moved;
        None lifts it. A hold at or before the current time stops the clock where it is.
        Moving or lifting a hold goes on from where the clock stopped: no time is skipped."""
        self._reanchor()
        self._hold = None if mark is None else float(mark)
        self._changed()

    def now_us(self) -> int:
        """:meth:`now` as a microsecond mark."""
        return to_us(self.now())

    def reached(self, mark: float) -> bool:
        """Has simulated time reached ``mark`` (within the clock's 1 us grid)?"""
        return mark - self.now() < RESOLUTION_S

    def _reanchor(self) -> None:
        self._anchor_sim = self.now()
        self._anchor_real = self._real()

    def set_rate(self, rate: float) -> None:
        """Run at ``rate`` simulated seconds per real second from now on (0 freezes); the
        current simulated time stays where it is."""
        if rate < 0 or not math.isfinite(rate):
            raise ValueError("clock rate must be a finite number >= 0")
        self._reanchor()
        self._rate = float(rate)
        self._changed()

    def freeze(self) -> None:
        self.set_rate(0.0)

    def set_time(self, t: float) -> None:
        """Put the clock at ``t`` and re-arm: every ``on_set_time`` listener re-anchors on it
        (relative and recurring triggers count from the new time)."""
        self._anchor_sim = float(t)
        self._anchor_real = self._real()
        for listener in list(self._rearm):
            listener(self._anchor_sim)
        self._changed()

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._reanchor()
        self._anchor_sim += seconds
        self._changed()

    def advance_to(self, t: float) -> float:
        """Jump forward to ``t`` (no move when the clock is already there or past it); the
        seconds jumped. Nothing re-arms: this is time passing, not a new time."""
        self._reanchor()
        step = t - self._anchor_sim
        if step <= 0:
            return 0.0
        self._anchor_sim = float(t)
        self._changed()
        return step

    def on_set_time(self, listener: Callable[[float], None]) -> Callable[[], None]:
        """Call ``listener(new_time)`` on every :meth:`set_time`; returns the unsubscriber."""
        self._rearm.append(listener)

        def unsubscribe() -> None:
            if listener in self._rearm:
                self._rearm.remove(listener)

        return unsubscribe

    async def wait_until(self, mark: float) -> None:
        """Return once simulated time reaches ``mark``. While the clock runs this sleeps the
        real time left (counted in ``real_waits``); frozen, it waits for the clock to change.
        Either way any change of the clock wakes it to look again."""
        loop = asyncio.get_running_loop()
        while not self.reached(mark):
            future: asyncio.Future[None] = loop.create_future()
            with self._lock:
                self._waiters.append((loop, future))
            try:
                if self._rate > 0:
                    self.real_waits += 1
                    left = (mark - self.now()) / self._rate
                    await asyncio.wait_for(asyncio.shield(future), max(left, 0.0))
                else:
                    await future
            except TimeoutError:
                pass
            finally:
                with self._lock:
                    self._waiters = [w for w in self._waiters if w[1] is not future]

    def _changed(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            if loop.is_closed():
                continue
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                if not future.done():
                    future.set_result(None)
            else:
                loop.call_soon_threadsafe(_settle, future)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
