"""Deadlines (interplay._aio.call_later and Deadline): long ones on a shared tick fire, late by
at most a tick, never once cancelled, and a Deadline keeps asyncio.timeout's semantics. The
tick and the threshold are lowered so that a test's deadlines take the shared path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from interplay import _aio as aio
from interplay.env import SeatSpec
from interplay.harness import Harness, Segment
from interplay.model.client import ModelClient
from interplay.model.endpoint import Endpoint
from interplay.records import Task
from interplay.run.agent import Agent, SegmentContext

TICK = 0.02


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(aio, "SWEEP_MIN_S", 0.05)
    monkeypatch.setattr(aio, "SWEEP_TICK_S", TICK)
    yield


async def test_a_long_deadline_fires_within_a_tick_and_a_cancelled_one_never(
        swept: None) -> None:
    loop = asyncio.get_running_loop()
    fired: dict[str, float] = {}
    t0 = loop.time()
    handle = aio.call_later(loop, 0.1, lambda name: fired.setdefault(name, loop.time()), "kept")
    assert not isinstance(handle, asyncio.TimerHandle)  # the shared path
    dropped = aio.call_later(loop, 0.1, lambda: fired.setdefault("dropped", loop.time()))
    dropped.cancel()
    short = aio.call_later(loop, 0.01, lambda: fired.setdefault("short", loop.time()))
    assert isinstance(short, asyncio.TimerHandle)  # below the threshold: a timer of its own
    await asyncio.sleep(0.1 + 3 * TICK)
    assert set(fired) == {"kept", "short"}
    assert 0.1 <= fired["kept"] - t0 <= 0.1 + 2 * TICK
    handle.cancel()  # after firing: nothing happens


async def test_a_failing_callback_goes_to_the_loop_and_the_others_still_fire(
        swept: None) -> None:
    loop = asyncio.get_running_loop()
    reported: list[Any] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["exception"]))
    fired: list[str] = []
    try:
        aio.call_later(loop, 0.06, lambda: 1 / 0)
        aio.call_later(loop, 0.06, fired.append, "after")
        await asyncio.sleep(0.06 + 3 * TICK)
    finally:
        loop.set_exception_handler(None)
    assert fired == ["after"]
    assert [type(e) for e in reported] == [ZeroDivisionError]


async def test_a_long_deadline_raises_timeout_error_and_leaves_the_task_uncancelled(
        swept: None) -> None:
    with pytest.raises(TimeoutError):
        await aio.within(0.06, asyncio.sleep(10))
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert await aio.within(0.06, asyncio.sleep(0.01, "done")) == "done"  # in time: left alone
    await asyncio.sleep(0.06 + 3 * TICK)  # and its deadline does not fire later


async def test_a_cancellation_from_outside_stays_a_cancellation(swept: None) -> None:
    task = asyncio.ensure_future(aio.within(5.0, asyncio.sleep(10)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_work_that_swallows_the_deadline_s_cancellation_leaves_no_count_behind(
        swept: None) -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "swallowed"
        return "slept"

    assert await aio.within(0.06, stubborn()) == "swallowed"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_short_deadline_has_a_timer_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # With the shared tick an hour long, only a timer of its own can end this in time.
    monkeypatch.setattr(aio, "SWEEP_TICK_S", 3600.0)

    async def outcome() -> str:
        try:
            await aio.within(0.05, asyncio.sleep(10))
        except TimeoutError:
            return "deadline"
        return "slept"

    assert await asyncio.wait_for(outcome(), timeout=5) == "deadline"


async def test_no_deadline_or_an_endless_one_never_fires() -> None:
    for delay in (None, float("inf")):
        assert await aio.within(delay, asyncio.sleep(0.01, "done")) == "done"


class HangingHarness(Harness):
    name = "test_hanging"

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        await asyncio.sleep(60)
        return Segment()


async def test_a_segment_past_its_timeout_ends_with_timeout_on_the_shared_tick(
        swept: None) -> None:
    client = ModelClient(Endpoint(base_url="http://127.0.0.1:9/v1"))
    agent = Agent(name="assistant", harness=HangingHarness(), client=client,
                  spec=SeatSpec(timeout_s=0.1))
    try:
        async with agent.chat(Task(0, prompt="hi")) as chat:
            reply = await chat.turn()
    finally:
        await client.aclose()
    assert reply.stopped and reply.stop_condition == "timeout"
    assert chat.trace.error_type == "timeout"
