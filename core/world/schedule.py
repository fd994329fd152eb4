"""When a person is around: awake hours, busy blocks and reply delays per mode, in her zone.

A :class:`Schedule` answers what she is doing at a time (``free``, ``busy`` or ``asleep``),
when she is next free, and when and in which mode she reads a message that reaches her at a
time: at once when free (mode ``free``), at the end of a busy block (``busy``), or when she
wakes (``woken``). Reply delays are per mode; a delay for a mode her schedule can never put her
in (``busy`` without busy blocks, ``woken`` without awake hours) is refused, never ignored.

It uses nothing of the world but the time helpers (:mod:`interplay.world.times`): a schedule is
plain data the user's side reads (a user sim gets it in ``Person.schedule``).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Mapping
from typing import Any

import attrs

from interplay.world import times

MODES = ("free", "busy", "woken")
#: How far ahead :meth:`Schedule.next_free` looks before it gives up.
HORIZON_DAYS = 14


@attrs.define
class BusyBlock:
    """A recurring busy block: ``start``-``end`` (``HH:MM``, local) on ``days`` (left out:
    every day; an empty list is refused, not read as every day). An end before the start runs
    past midnight; an end equal to the start is refused (``00:00``-``24:00`` is a whole day)."""

    #: When the block starts, HH:MM local.
    start: str
    #: When it ends, HH:MM local (before the start: past midnight).
    end: str
    #: The days it comes back on (Monday..Sunday, weekdays, weekend, daily); left out: every day.
    days: list[str] | None = None
    #: A name for the block, shown in the records (e.g. meetings).
    label: str = ""


@attrs.define
class Schedule:
    """When the person is around. ``awake`` None means always awake."""

    timezone: str = "UTC"
    awake: tuple[str, str] | None = None
    busy: list[BusyBlock] = attrs.Factory(list)
    #: Reply delay per mode (``free``, ``busy``, ``woken``): an ISO-8601 duration or
    #: ``[low, high]`` drawn between the two. A mode without one replies at once.
    reply_delays: dict[str, times.Delay] = attrs.Factory(dict)

    def problems(self) -> list[str]:
        """What is wrong with this schedule (empty when it is usable)."""
        out: list[str] = []
        try:
            times.zone(self.timezone)
        except ValueError as exc:
            out.append(f"timezone: {exc}")
        if self.awake is not None:
            if not self.awake:
                out.append("awake: empty; give two times of day, e.g. [\"07:00\", \"23:00\"], "
                           "or leave awake out for a person who is always awake")
            elif len(self.awake) != 2:
                out.append("awake: give two times of day, e.g. [\"07:00\", \"23:00\"]")
            else:
                for value in self.awake:
                    out += _time_problem(value, "awake")
                if not out and self.awake[0] == self.awake[1]:
                    out.append("awake: the start equals the end; leave awake out for a "
                               "person who never sleeps")
        for i, block in enumerate(self.busy):
            clock = _time_problem(block.start, f"busy[{i}].start")
            clock += _time_problem(block.end, f"busy[{i}].end")
            if not clock and times.parse_clock_time(block.start) == times.parse_clock_time(
                    block.end):
                clock.append(f"busy[{i}]: the start equals the end; for a whole day write "
                             f"start = \"00:00\", end = \"24:00\"")
            out += clock
            if block.days is not None and not block.days:
                out.append(f"busy[{i}].days: empty; name the days it comes back on, e.g. "
                           f"[\"weekdays\"], or leave days out for every day")
                continue
            try:
                times.parse_days(block.days or ())
            except ValueError as exc:
                out.append(f"busy[{i}].days: {exc}")
        for mode, spec in self.reply_delays.items():
            if mode not in MODES:
                out.append(f"reply_delays.{mode}: unknown mode; the modes are "
                           f"{', '.join(MODES)}")
                continue
            out += times.check_delay(spec, f"reply_delays.{mode}")
        if "busy" in self.reply_delays and not self.busy:
            out.append("reply_delays.busy is set but the schedule has no busy blocks, so it "
                       "would never apply; add busy blocks or drop it")
        if "woken" in self.reply_delays and self.awake is None:
            out.append("reply_delays.woken is set but the schedule has no awake hours, so it "
                       "would never apply; add awake = [\"07:00\", \"23:00\"] or drop it")
        return out

    # -- what she is doing ---------------------------------------------------------------

    def state_at(self, t: float) -> str:
        """``free``, ``busy`` or ``asleep`` at epoch second ``t``."""
        if not _inside(t, self._awake_spans(t)):
            return "asleep"
        if _inside(t, self._busy_spans(t)):
            return "busy"
        return "free"

    def next_free(self, t: float) -> float | None:
        """The first moment at or after ``t`` when she is awake and not busy (None when
        there is none within two weeks)."""
        if self.state_at(t) == "free":
            return t
        horizon = t + HORIZON_DAYS * 86400.0
        candidates = sorted({edge for span in (*self._awake_spans(t, HORIZON_DAYS),
                                               *self._busy_spans(t, HORIZON_DAYS))
                             for edge in span if t < edge <= horizon})
        for edge in candidates:
            if self.state_at(edge) == "free":
                return edge
        return None

    def next_awake(self, t: float) -> float | None:
        """The first moment at or after ``t`` when she is awake, busy or not (None when there
        is none within two weeks)."""
        if self.state_at(t) != "asleep":
            return t
        horizon = t + HORIZON_DAYS * 86400.0
        return min((a for a, _ in self._awake_spans(t, HORIZON_DAYS) if t < a <= horizon),
                   default=None)

    def awake_seconds(self, start: float, end: float) -> float:
        """How many seconds between epoch seconds ``start`` and ``end`` she is awake (the
        whole span when she has no awake hours)."""
        if end <= start:
            return 0.0
        if self.awake is None:
            return end - start
        days = int((end - start) // 86400) + 2
        return sum(max(0.0, min(b, end) - max(a, start))
                   for a, b in self._awake_spans(start, days))

    def read_plan(self, t: float) -> tuple[float | None, str]:
        """When she reads a message that reaches her at ``t``, and the mode she reads it in."""
        state = self.state_at(t)
        mode = {"free": "free", "busy": "busy", "asleep": "woken"}[state]
        return self.next_free(t), mode

    def reply_delay(self, mode: str, rng: random.Random) -> float:
        spec = self.reply_delays.get(mode)
        return 0.0 if spec is None else times.draw_delay(spec, rng)

    @classmethod
    def from_plain(cls, data: Mapping[str, Any]) -> Schedule:
        """A schedule from plain data: :meth:`describe`'s, or settings with the same keys."""
        awake = data.get("awake")
        # Kept as given, so problems() refuses an empty or odd list rather than reading it as
        # "always awake".
        return cls(timezone=str(data.get("timezone") or "UTC"),
                   awake=None if awake is None else tuple(awake),  # type: ignore[arg-type]
                   busy=[b if isinstance(b, BusyBlock) else BusyBlock(**b)
                         for b in data.get("busy") or ()],
                   reply_delays=dict(data.get("reply_delays") or {}))

    def describe(self) -> dict[str, Any]:
        """The schedule as plain data (for records and prompts)."""
        return {"timezone": self.timezone, "awake": list(self.awake) if self.awake else None,
                "busy": [attrs.asdict(b) for b in self.busy],
                "reply_delays": dict(self.reply_delays)}

    def busy_near(self, t: float, within_s: float = 0.0,
                  ) -> tuple[BusyBlock, float, float] | None:
        """The busy block she is in at ``t``, else the first to start within ``within_s``
        after it: the block and its start and end (epoch seconds); None when there is none."""
        near: tuple[BusyBlock, float, float] | None = None
        for block in self.busy:
            days = times.parse_days(block.days or ())
            for day in self._days(t, 1):
                if day.weekday() not in days:
                    continue
                a, b = self._span(day, block.start, block.end)
                if (a <= t < b or t <= a <= t + within_s) and (near is None or a < near[1]):
                    near = (block, a, b)
        return near

    # -- spans ---------------------------------------------------------------------------

    def _days(self, t: float, ahead: int) -> list[dt.date]:
        today = times.local(t, self.timezone).date()
        return [today + dt.timedelta(days=d) for d in range(-1, ahead + 1)]

    def _span(self, day: dt.date, start: str, end: str) -> tuple[float, float]:
        tz = times.zone(self.timezone)
        a, b = times.parse_clock_time(start), times.parse_clock_time(end)
        begin = dt.datetime.combine(day, dt.time(), tz) + dt.timedelta(minutes=a)
        stop_day = day if b > a else day + dt.timedelta(days=1)
        stop = dt.datetime.combine(stop_day, dt.time(), tz) + dt.timedelta(minutes=b)
        # Local wall times across a DST change: through UTC so a span is what the clock shows.
        return (_wall(begin).timestamp(), _wall(stop).timestamp())

    def _awake_spans(self, t: float, ahead: int = 1) -> list[tuple[float, float]]:
        if self.awake is None:
            return [(float("-inf"), float("inf"))]
        return [self._span(day, self.awake[0], self.awake[1]) for day in self._days(t, ahead)]

    def _busy_spans(self, t: float, ahead: int = 1) -> list[tuple[float, float]]:
        out = []
        for block in self.busy:
            days = times.parse_days(block.days or ())
            out += [self._span(day, block.start, block.end) for day in self._days(t, ahead)
                    if day.weekday() in days]
        return out


def _wall(value: dt.datetime) -> dt.datetime:
    """A local wall time made real: normalized through UTC (a time a DST jump skips moves
    forward)."""
    return value.astimezone(dt.UTC).astimezone(value.tzinfo)


def _inside(t: float, spans: list[tuple[float, float]]) -> bool:
    return any(a <= t < b for a, b in spans)


def _time_problem(value: Any, where: str) -> list[str]:
    try:
        times.parse_clock_time(value)
    except ValueError as exc:
        return [f"{where}: {exc}"]
    return []

