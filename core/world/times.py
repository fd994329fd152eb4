"""Reading and writing the world's times: ISO-8601 durations and instants, time zones, clock
times of day, delays drawn from a range, and the stamps records carry.

Every parser raises ValueError with a message that says what was expected; the scenario loader
turns it into a one-line InterplayError naming the field.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import zoneinfo
from collections.abc import Sequence
from functools import cache
from typing import Any

_DURATION = re.compile(
    r"^P(?:(?P<weeks>\d+(?:\.\d+)?)W)?(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$")
_UNITS = {"weeks": 604800.0, "days": 86400.0, "hours": 3600.0, "minutes": 60.0, "seconds": 1.0}
_CLOCK_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_SETS = {"weekdays": DAYS[:5], "weekend": DAYS[5:], "daily": DAYS, "every day": DAYS}


def parse_duration(text: str) -> float:
    """Seconds in an ISO-8601 duration (``PT3H``, ``P1DT12H``, ``PT90S``, ``P2W``). Years and
    months are refused: their length depends on the date, so write days."""
    value = str(text).strip().upper()
    match = _DURATION.match(value)
    if not match or value in ("P", "PT") or value.endswith("T"):
        if re.match(r"^P(\d+Y|.*\d+M.*T|\d+M)", value):
            raise ValueError(f"{text!r}: years and months have no fixed length; write days "
                             f"(e.g. P30D)")
        raise ValueError(f"{text!r} is not an ISO-8601 duration such as PT3H, P1DT12H or "
                         f"PT45M")
    return sum(float(v) * _UNITS[k] for k, v in match.groupdict().items() if v)


def format_duration(seconds: float) -> str:
    """An ISO-8601 duration for a number of seconds (``PT3H``, ``P1DT2H30M``)."""
    seconds = round(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    out = "P" + (f"{days}D" if days else "")
    clock = "".join(f"{n}{u}" for n, u in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    if clock:
        out += "T" + clock
    return out if out != "P" else "PT0S"


@cache
def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone ``name``; ValueError naming it when there is no such zone."""
    try:
        return zoneinfo.ZoneInfo(str(name))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}; use an IANA name such as "
                         f"'Europe/Berlin' or 'UTC'") from exc


def parse_instant(text: str, tz: str) -> float:
    """Epoch seconds of an ISO-8601 date-time. One without an offset is a local time in
    ``tz``; a date alone is its midnight."""
    raw = str(text).strip()
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an ISO-8601 date-time such as "
                         f"2025-06-02T09:00 (local) or 2025-06-02T07:00Z") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone(tz))
    return value.timestamp()


def parse_when(text: str, tz: str, now: float) -> float:
    """An instant (ISO date-time) or, when ``text`` is a duration, ``now`` plus it."""
    raw = str(text).strip()
    if raw.upper().startswith("P"):
        return now + parse_duration(raw)
    return parse_instant(raw, tz)


def parse_clock_time(text: str) -> int:
    """Minutes after midnight of ``HH:MM`` (``24:00`` is the day's end)."""
    match = _CLOCK_TIME.match(str(text).strip())
    if not match or int(match[1]) > 24 or int(match[2]) > 59 or (
            int(match[1]) == 24 and int(match[2]) != 0):
        raise ValueError(f"{text!r} is not a time of day such as 07:30")
    return int(match[1]) * 60 + int(match[2])


def parse_days(days: Sequence[str] | str) -> frozenset[int]:
    """Weekday numbers (Monday 0) from names (``mon``, ``tuesday``: the three-letter or the
    full name, any case) or ``weekdays``, ``weekend``, ``daily``; none given means every day.
    Anything else (``tues``, ``thurs``) is refused rather than guessed."""
    items = [days] if isinstance(days, str) else list(days)
    out: set[int] = set()
    for item in items:
        key = str(item).strip().lower()
        if key in _DAY_SETS:
            out.update(DAYS.index(d) for d in _DAY_SETS[key])
        elif key in DAYS:
            out.add(DAYS.index(key))
        elif key in _FULL_DAYS:
            out.add(_FULL_DAYS.index(key))
        else:
            raise ValueError(f"{item!r} is not a day; use mon..sun (or monday..sunday), "
                             f"weekdays, weekend or daily")
    return frozenset(out) if out else frozenset(range(7))


def local(t: float, tz: str) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, zone(tz))


def iso(t: float, tz: str) -> str:
    """``t`` as an ISO-8601 local time with its offset (microseconds only when not zero)."""
    return local(t, tz).isoformat()


def readable(t: float, tz: str) -> str:
    """``t`` as a person reads it: ``Tue 2025-06-03 09:05`` plus the zone (``UTC`` or the
    IANA name)."""
    return f"{local(t, tz):%a %Y-%m-%d %H:%M} {'UTC' if tz == 'UTC' else tz}"


Delay = str | list[str]


def delay_bounds(spec: Delay) -> tuple[float, float]:
    """(low, high) seconds of a delay: one duration, or ``[low, high]`` drawn uniformly."""
    if isinstance(spec, str):
        seconds = parse_duration(spec)
        return seconds, seconds
    if isinstance(spec, list | tuple) and len(spec) == 2:
        low, high = parse_duration(spec[0]), parse_duration(spec[1])
        if high < low:
            raise ValueError(f"{list(spec)!r}: the upper bound is below the lower one")
        return low, high
    raise ValueError(f"{spec!r}: a delay is one ISO-8601 duration (\"PT2H\") or two "
                     f"(\"[PT1H, PT3H]\", drawn between them)")


def draw_delay(spec: Delay, rng: random.Random) -> float:
    """Seconds of a delay, drawn from the world's seeded generator when it is a range."""
    low, high = delay_bounds(spec)
    return low if high == low else rng.uniform(low, high)


def check_delay(spec: Any, where: str) -> list[str]:
    try:
        delay_bounds(spec)
    except ValueError as exc:
        return [f"{where}: {exc}"]
    return []
