"""The event loop interplay runs on: uvloop where it is installed (a cheaper loop for many
concurrent HTTP streams), else asyncio's own. Every entry point that starts a loop uses this,
so the CLI, the servers and the benchmarks measure the same thing. Also deadlines
(:func:`call_later`, :class:`Deadline`) that, when long, share one timer per loop."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on :func:`new_event_loop` (Ctrl-C cancels the coroutine, as there)."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


# -- long deadlines --------------------------------------------------------------------------

#: Delays at least this long are not given a timer each: they are checked together on a shared
#: tick and fire up to SWEEP_TICK_S late. A run sets two per model call (the segment's timeout
#: and the HTTP read timeout), minutes long and almost never reached; under uvloop a timer
#: costs about 3 us to set and cancel, a checked deadline well under one.
SWEEP_MIN_S = 30.0
SWEEP_TICK_S = 0.5


class Later(Protocol):
    def cancel(self) -> None: ...


class _Swept:
    """A deadline on the shared tick: ``fire()`` runs at ``when`` unless cancelled first."""

    __slots__ = ("args", "callback", "sweeper", "when")

    def __init__(self, sweeper: _Sweeper, when: float, callback: Callable[..., Any],
                 args: tuple[Any, ...]) -> None:
        self.sweeper = sweeper
        self.when = when
        self.callback = callback
        self.args = args

    def fire(self) -> None:
        self.callback(*self.args)

    def cancel(self) -> None:
        self.sweeper.live.discard(self)


class _Sweeper:
    """The deadlines of one event loop, checked every SWEEP_TICK_S while any is pending."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.live: set[Any] = set()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, handle: Any) -> None:
        """Watch ``handle`` (with ``when``, ``fire()`` and ``cancel()`` like _Swept's)."""
        self.live.add(handle)
        if self._timer is None:
            self._timer = self.loop.call_later(SWEEP_TICK_S, self._tick)

    def _tick(self) -> None:
        self._timer = None
        now = self.loop.time()
        due = [h for h in self.live if h.when <= now]
        for handle in due:
            self.live.discard(handle)
        for handle in sorted(due, key=lambda h: h.when):
            # Run here, not scheduled: a deadline cancelled from now on must not fire.
            try:
                handle.fire()
            except Exception as exc:
                self.loop.call_exception_handler({
                    "message": "exception in a deadline callback", "exception": exc})
        if self.live:
            self._timer = self.loop.call_later(SWEEP_TICK_S, self._tick)


_sweepers: dict[int, _Sweeper] = {}
# Loops in other threads (the interception server's) make theirs at the same time.
_sweepers_lock = threading.Lock()


def _sweeper(loop: asyncio.AbstractEventLoop) -> _Sweeper:
    found = _sweepers.get(id(loop))
    if found is not None and found.loop is loop:
        return found
    with _sweepers_lock:
        for key, old in list(_sweepers.items()):
            if old.loop.is_closed():
                del _sweepers[key]
        found = _sweepers.get(id(loop))
        if found is None or found.loop is not loop:
            found = _sweepers[id(loop)] = _Sweeper(loop)
        return found


def call_later(loop: asyncio.AbstractEventLoop, delay: float, callback: Callable[..., Any],
               *args: Any) -> Later:
    """``loop.call_later`` for a deadline: one SWEEP_MIN_S or longer is checked on the
    loop's shared tick (up to SWEEP_TICK_S late), a shorter one gets a timer of its own."""
    if delay < SWEEP_MIN_S or not math.isfinite(delay):
        return loop.call_later(delay, callback, *args)
    sweeper = _sweeper(loop)
    handle = _Swept(sweeper, loop.time() + delay, callback, args)
    sweeper.add(handle)
    return handle


async def within(delay: float | None, work: Awaitable[T]) -> T:
    """``await work``, cancelled after ``delay`` seconds (None: never) with TimeoutError
    raised, as under ``asyncio.timeout(delay)``; a long delay waits on the loop's shared tick.
    One coroutine where ``async with asyncio.timeout`` makes two: a segment runs under one on
    every model call."""
    deadline = Deadline(delay)
    deadline.start()
    try:
        return await work
    except BaseException as exc:
        if deadline.stop(type(exc)):
            raise TimeoutError from exc  # this deadline's own cancellation
        raise
    finally:
        deadline.stop()


class Deadline:
    """A deadline for the running task: ``delay`` seconds after :meth:`start` the task is
    cancelled, as by ``asyncio.timeout``; one SWEEP_MIN_S or longer waits on the loop's
    shared tick. :func:`within` shows its use."""

    __slots__ = ("_cancelling", "_delay", "_expired", "_handle", "_stopped", "_sweeper",
                 "_task", "when")

    def __init__(self, delay: float | None) -> None:
        # None or an infinite delay: never.
        self._delay = delay if delay is not None and math.isfinite(delay) else None
        self._expired = False
        self._stopped = False
        self._handle: asyncio.TimerHandle | None = None
        self._sweeper: _Sweeper | None = None

    def start(self) -> None:
        if self._delay is None:
            return
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a Deadline needs to be started inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self.when = loop.time() + self._delay
        # call_later's choice, made here with the deadline as its own handle: through
        # call_later (a _Swept and a bound method more) a turn cost 1.3% more instructions.
        if self._delay < SWEEP_MIN_S:
            self._handle = loop.call_at(self.when, self.fire)
        else:
            self._sweeper = _sweeper(loop)
            self._sweeper.add(self)

    def fire(self) -> None:
        self._expired = True
        self._task.cancel()

    def stop(self, exc_type: type[BaseException] | None = None) -> bool:
        """Stop watching, once (later calls do nothing and return False). Returns whether
        the guarded work, ended by ``exc_type`` (None: it returned), was cancelled by this
        deadline rather than from elsewhere; the deadline's cancellation is taken back from
        the task's count either way, as ``asyncio.timeout`` does."""
        if self._stopped:
            return False
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._sweeper is not None:
            self._sweeper.live.discard(self)
            self._sweeper = None
        return (self._expired and self._task.uncancel() <= self._cancelling
                and exc_type is asyncio.CancelledError)
