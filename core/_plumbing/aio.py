"""The event loop interplay runs on: uvloop where it is installed (a cheaper loop for many
concurrent HTTP streams), else asyncio's own. Every entry point that starts a loop uses this,
so the CLI, the servers and the benchmarks measure the same thing."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

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
