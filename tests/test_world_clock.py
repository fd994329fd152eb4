"""The virtual clock: microsecond marks, rate changes that keep the anchors, set_time re-arming,
and waits on simulated time that wake when the clock changes."""

from __future__ import annotations

import asyncio

import pytest

from interplay.values.clock import Clock, from_us, to_us


class FakeReal:
    """A real-time source a test moves by hand."""

    def __init__(self) -> None:
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value


def test_marks_less_than_a_microsecond_away_count_as_reached() -> None:
    clock = Clock(100.0, rate=0)
    assert clock.reached(100.0)
    assert clock.reached(100.0 + 0.9e-6)
    assert not clock.reached(100.0 + 2e-6)
    # A time computed two ways lands on the same mark.
    assert to_us(0.1 + 0.2) == to_us(0.3) and from_us(to_us(12.5)) == 12.5


def test_set_rate_keeps_the_anchors_and_zero_freezes() -> None:
    real = FakeReal()
    clock = Clock(0.0, rate=2.0, real=real)
    real.value += 10
    assert clock.now() == pytest.approx(20.0)
    clock.set_rate(0.5)
    assert clock.now() == pytest.approx(20.0)  # changing the rate does not move time
    real.value += 10
    assert clock.now() == pytest.approx(25.0)
    clock.freeze()
    real.value += 1000
    assert clock.now() == pytest.approx(25.0) and clock.frozen


def test_set_time_re_arms_while_advance_does_not() -> None:
    clock = Clock(0.0, rate=0)
    seen: list[float] = []
    unsubscribe = clock.on_set_time(seen.append)
    clock.advance(5)
    assert clock.advance_to(30.0) == 25.0
    assert clock.advance_to(10.0) == 0.0 and clock.now() == 30.0  # never back
    assert seen == []
    clock.set_time(500.0)
    assert seen == [500.0]
    unsubscribe()
    clock.set_time(600.0)
    assert seen == [500.0]
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.set_rate(-1)


async def test_a_frozen_wait_wakes_when_the_clock_changes_without_sleeping() -> None:
    clock = Clock(0.0, rate=0)
    waiter = asyncio.ensure_future(clock.wait_until(60.0))
    await asyncio.sleep(0)
    clock.advance(30)
    await asyncio.sleep(0)
    assert not waiter.done()  # woke, looked, waits again
    clock.advance_to(60.0)
    await asyncio.wait_for(waiter, 1)
    assert clock.real_waits == 0


async def test_a_running_wait_sleeps_real_time_and_is_counted() -> None:
    clock = Clock(0.0, rate=1000.0)  # 1000 simulated seconds per real second
    await asyncio.wait_for(clock.wait_until(20.0), 2)  # about 20 ms of real time
    assert clock.reached(20.0)
    assert clock.real_waits >= 1


async def test_a_change_from_another_thread_wakes_a_wait() -> None:
    clock = Clock(0.0, rate=0)
    waiter = asyncio.ensure_future(clock.wait_until(10.0))
    await asyncio.sleep(0)
    await asyncio.to_thread(clock.advance, 10)
    await asyncio.wait_for(waiter, 1)
    assert waiter.done() and clock.now() == 10.0


def test_a_running_clock_stops_at_its_hold_and_goes_on_from_there() -> None:
    real = FakeReal()
    clock = Clock(0.0, rate=10.0, real=real)
    clock.hold_at(30.0)
    real.value += 2
    assert clock.now() == pytest.approx(20.0)
    real.value += 5  # 70 simulated seconds on, but the hold is at 30
    assert clock.now() == 30.0 and clock.reached(30.0)
    clock.hold_at(100.0)  # moved on: time goes on from 30, nothing is skipped
    assert clock.now() == 30.0
    real.value += 1
    assert clock.now() == pytest.approx(40.0)
    clock.hold_at(clock.now())  # a hold at the current time stops it there
    real.value += 3
    assert clock.now() == pytest.approx(40.0)
    clock.hold_at(None)
    real.value += 1
    assert clock.now() == pytest.approx(50.0)
