"""The event loop interplay runs on: uvloop where it is installed (a cheaper loop for many
concurrent HTTP streams), else asyncio's own. Every entry point that starts a loop uses this,
so the CLI, the servers and the benchmarks measure the same thing. Also long deadlines
(:func:`call_later`, :func:`timeout`) that share one timer per loop."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
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
    __slots__ = ("args", "callback", "sweeper", "when")

    def __init__(self, sweeper: _Sweeper, when: float, callback: Callable[..., Any],
                 args: tuple[Any, ...]) -> None:
        self.sweeper = sweeper
        self.when = when
        self.callback = callback
        self.args = args

    def cancel(self) -> None:
        self.sweeper.live.discard(self)


class _Sweeper:
    """The deadlines of one event loop, checked every SWEEP_TICK_S while any is pending."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.live: set[_Swept] = set()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, delay: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> _Swept:
        handle = _Swept(self, self.loop.time() + delay, callback, args)
        self.live.add(handle)
        if self._timer is None:
            self._timer = self.loop.call_later(SWEEP_TICK_S, self._tick)
        return handle

    def _tick(self) -> None:
        self._timer = None
        now = self.loop.time()
        due = [h for h in self.live if h.when <= now]
        for handle in due:
            self.live.discard(handle)
        for handle in sorted(due, key=lambda h: h.when):
            # Run here, not scheduled: a deadline cancelled from now on must not fire.
            try:
                handle.callback(*handle.args)
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
    return _sweeper(loop).add(delay, callback, args)


class _LongTimeout:
    """``asyncio.timeout`` on a swept deadline (same semantics: the block is cancelled at the
    deadline and TimeoutError raised from it; a cancellation from elsewhere stays one)."""

    __slots__ = ("_cancelling", "_delay", "_expired", "_handle", "_task")

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._expired = False
        self._handle: Later | None = None

    async def __aenter__(self) -> _LongTimeout:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("timeout() should be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._handle = call_later(asyncio.get_running_loop(), self._delay, self._expire)
        return self

    def _expire(self) -> None:
        self._expired = True
        self._task.cancel()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: Any) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if (self._expired and self._task.uncancel() <= self._cancelling
                and exc_type is asyncio.CancelledError):
            raise TimeoutError from exc


def timeout(delay: float | None) -> AbstractAsyncContextManager[Any]:
    """``asyncio.timeout(delay)``, on a swept deadline when ``delay`` is SWEEP_MIN_S or more."""
    if delay is None or delay < SWEEP_MIN_S or not math.isfinite(delay):
        return asyncio.timeout(delay)
    return _LongTimeout(delay)
