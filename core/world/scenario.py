"""Scenarios: an always_on world written as data (a TOML or JSON file, or a dict).

A scenario gives the start and end, the clock's rate during the agent's turns, the world's time
zone, the user (the ``user_sim`` step's settings), apps with their initial state, contacts,
triggers, the user's scripted lines, messages queued for her before the run, and optionally the
tasks, seats, verifiers and loop settings of the env made from it. docs/always_on.md describes
every key. :func:`load_scenario` reads and checks one; :func:`build_world` makes a fresh
:class:`World` from it for one episode.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from interplay.config import loading as config
from interplay.errors import InterplayError
from interplay.values.clock import Clock
from interplay.world import times
from interplay.world.apps import App, app_class
from interplay.world.chat import CHANNEL_TOOLS, ChatSettings, Sent
from interplay.world.contacts import Ask, Contact
from interplay.world.events import Event
from interplay.world.schedule import Schedule
from interplay.world.triggers import Trigger
from interplay.world.world import World


@attrs.define
class AppSpec:
    kind: str
    name: str = ""
    state: dict[str, Any] = attrs.Factory(dict)


@attrs.define
class Line:
    """A line the user writes to the agent at a task time (a wake source)."""

    at: str
    text: str


@attrs.define
class Queued:
    """A message queued for the user before the run, by another seat."""

    text: str
    seat: str = "earlier-assistant"
    at: str = ""


@attrs.define
class TaskRow:
    """A task of the env made from a scenario: the user's opening request and what grades it."""

    prompt: str | None = None
    system_prompt: str | None = None
    answer: Any = None
    info: dict[str, Any] = attrs.Factory(dict)


@attrs.define
class Scenario:
    start: str
    name: str = ""
    description: str = ""
    #: An ISO-8601 date-time or a duration from the start; empty: no end time.
    end: str = ""
    #: Simulated seconds per real second while the agent takes its turn (0: its turns take
    #: no task time, and a run replays to the byte).
    rate: float = 0.0
    timezone: str = "UTC"
    #: The user's opening request when a task has no prompt.
    opening: str = ""
    user: dict[str, Any] = attrs.Factory(dict)
    apps: list[AppSpec] = attrs.Factory(list)
    contacts: list[Contact] = attrs.Factory(list)
    triggers: list[Trigger] = attrs.Factory(list)
    lines: list[Line] = attrs.Factory(list)
    queued: list[Queued] = attrs.Factory(list)
    #: For the env made from this file: its tasks, seats, verifiers and always_on settings.
    tasks: list[TaskRow] = attrs.Factory(list)
    seats: dict[str, dict[str, Any]] = attrs.Factory(dict)
    verifiers: list[dict[str, Any]] = attrs.Factory(list)
    always_on: dict[str, Any] = attrs.Factory(dict)
    #: Where it was read from (for messages), not a key of the file.
    source: str = ""

    @property
    def start_time(self) -> float:
        return times.parse_instant(self.start, self.timezone)

    @property
    def end_time(self) -> float | None:
        if not self.end:
            return None
        return times.parse_when(self.end, self.timezone, self.start_time)

    def make_apps(self) -> list[App]:
        return [app_class(spec.kind)(spec.name or spec.kind, spec.state) for spec in self.apps]

    def problems(self) -> list[str]:
        out: list[str] = []
        try:
            times.zone(self.timezone)
        except ValueError as exc:
            return [f"timezone: {exc}"]
        try:
            start = self.start_time
        except ValueError as exc:
            return [f"start: {exc}"]
        try:
            end = self.end_time
        except ValueError as exc:
            out.append(f"end: {exc}")
        else:
            if end is not None and end <= start:
                out.append("end: must come after the start")
        if self.rate < 0:
            out.append("rate: must be 0 or more")
        out += self._person_problems()
        apps: dict[str, App] = {}
        try:
            for app in self.make_apps():
                if app.name in apps:
                    out.append(f"apps: two apps are named {app.name!r}")
                apps[app.name] = app
                out += [f"app {app.name!r}: {p}" for p in app.problems()]
        except InterplayError as exc:
            out.append(str(exc))
        seen: dict[str, str] = {}
        for app in apps.values():
            for tool in app.tools():
                if tool.name in CHANNEL_TOOLS:
                    out.append(f"app {app.name!r} has a tool {tool.name!r}, a name always_on "
                               f"keeps for the agent's channel to the user "
                               f"({', '.join(sorted(CHANNEL_TOOLS))}); rename the app's tool "
                               f"(@app_tool(name=...))")
                    continue
                if tool.name in seen:
                    out.append(f"apps {seen[tool.name]!r} and {app.name!r} both have a tool "
                               f"{tool.name!r}")
                seen[tool.name] = app.name
        names = [c.name for c in self.contacts]
        out += [f"contacts: two contacts are named {name!r}" for name in _twice(names)]
        for contact in self.contacts:
            out += contact.problems(apps, self.timezone)
        tnames = [t.name for t in self.triggers]
        out += [f"triggers: two triggers are named {name!r}" for name in _twice(tnames)]
        for trigger in self.triggers:
            out += trigger.problems(apps, set(names), self.timezone)
            if trigger.on_tool and trigger.on_tool not in seen and trigger.on_tool not in (
                    "message_user", "stay_quiet", "schedule_check", "cancel_check"):
                out.append(f"trigger {trigger.name!r}.on_tool: no app has a tool "
                           f"{trigger.on_tool!r}")
            for label, value in (("at", trigger.at), ("until", trigger.until)):
                out += _before_start(f"trigger {trigger.name!r}.{label}", value, start,
                                     self.timezone)
        for i, line in enumerate(self.lines):
            if not line.text.strip():
                out.append(f"lines[{i}].text: empty; a line she writes needs words")
            try:
                times.parse_when(line.at, self.timezone, start)
            except ValueError as exc:
                out.append(f"lines[{i}].at: {exc}")
            else:
                out += _before_start(f"lines[{i}].at", line.at, start, self.timezone)
        for i, item in enumerate(self.queued):
            if not item.text.strip():
                out.append(f"queued[{i}].text: empty; a queued message needs words")
            if item.at:
                try:
                    times.parse_when(item.at, self.timezone, start)
                except ValueError as exc:
                    out.append(f"queued[{i}].at: {exc}")
        for i, task in enumerate(self.tasks):
            if isinstance(task.prompt, str) and not task.prompt.strip():
                out.append(f"tasks[{i}].prompt: empty; give her opening request, or leave "
                           f"prompt out for a task she does not open")
        if self.opening and not self.opening.strip():
            out.append("opening: empty; give her opening request, or leave opening out")
        return out

    def _person_problems(self) -> list[str]:
        """The [user] table's hours (awake, busy, reply_delays, timezone), checked as the
        user_sim step checks them, so a problem names its place in the file (the step checks
        them again with any ``--set env.user...`` laid over them)."""
        hours = {k: self.user[k] for k in ("awake", "busy", "reply_delays", "timezone")
                 if k in self.user}
        hours.setdefault("timezone", self.timezone)
        try:
            schedule = Schedule.from_plain(hours)
        except (TypeError, ValueError, AttributeError):
            return []  # not tables the step takes: it says what does not fit
        return [f"user.{p}" for p in schedule.problems()]


def _twice(names: list[str]) -> list[str]:
    """The names given more than once, each once, in the order they first repeat."""
    seen: set[str] = set()
    out: list[str] = []
    for name in names:
        if name in seen and name not in out:
            out.append(name)
        seen.add(name)
    return out


def _before_start(where: str, value: str, start: float, tz: str) -> list[str]:
    """A date-time before the run's start (a duration from the start never is): refused, since
    the world would run it at the start and record it as due then."""
    if not value or value.strip().upper().startswith("P"):
        return []
    try:
        when = times.parse_instant(value, tz)
    except ValueError:
        return []  # reported where it is parsed
    if when < start - 1e-6:
        return [f"{where}: {value} is before the start ({times.iso(start, tz)}); give a time "
                f"in the run"]
    return []


def scenario_from(data: Mapping[str, Any], *, source: str = "scenario") -> Scenario:
    """A checked Scenario from plain data; a one-line InterplayError naming every problem by
    its place in the file otherwise."""
    if "source" in data:
        raise InterplayError(f"{source}: unknown key source")
    if "start" not in data:
        raise InterplayError(f"{source}: start: missing; when the run starts, a local "
                             f"date-time such as start = \"2025-06-02T08:00\"")
    scenario = config.structure(dict(data), Scenario, path=source)
    scenario.source = source
    problems = scenario.problems()
    if problems:
        raise InterplayError(f"{source}: {'; '.join(problems)}")
    return scenario


def read_scenario_file(path: str | Path) -> dict[str, Any]:
    """The raw data of a scenario file (``.toml`` or ``.json``)."""
    p = Path(path)
    if p.suffix == ".json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InterplayError(f"scenario file {str(p)!r} does not exist") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InterplayError(f"{p}: not a readable JSON scenario: {exc}") from None
        if not isinstance(data, dict):
            raise InterplayError(f"{p}: a scenario is a JSON object")
        return data
    return config.read_toml(p)


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file (``.toml`` or ``.json``). A file read before and not
    changed since is not read again: every episode's steps name it (a Scenario is only read,
    never changed: worlds are built from it)."""
    p = Path(path)
    try:
        stat = p.stat()
    except OSError:
        return scenario_from(read_scenario_file(p), source=str(path))
    return _load_cached(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int, size: int) -> Scenario:
    return scenario_from(read_scenario_file(path), source=path)


def build_world(scenario: Scenario, *, clock: Clock, rng: random.Random,
                user_name: str = "the user", chat: ChatSettings | None = None,
                ask: Ask | None = None, contacts_side_by_side: bool = True) -> World:
    """A fresh world for one episode: apps from their initial state, contacts, triggers, the
    user's scripted lines and the messages queued for her; the clock at the start, frozen."""
    world = World(clock=clock, timezone=scenario.timezone, start=scenario.start_time,
                  end=scenario.end_time, rng=rng, user_name=user_name, chat=chat, ask=ask,
                  contacts_side_by_side=contacts_side_by_side)
    for app in scenario.make_apps():
        world.add_app(app)
    for contact in scenario.contacts:
        world.add_contact(contact)
    for trigger in scenario.triggers:
        world.add_trigger(trigger)
    world.begin()
    start = scenario.start_time
    for i, line in enumerate(scenario.lines):
        due = times.parse_when(line.at, scenario.timezone, start)
        world.queue.push(Event(world.us(due), "user_line", key=("line", i),
                               data={"text": line.text, "scripted": i + 1}))
    for item in scenario.queued:
        at = times.parse_when(item.at, scenario.timezone, start) if item.at else start
        world.chat.sent.append(Sent(number=len(world.chat.sent) + 1, text=item.text,
                                    seat=item.seat, at_us=world.us(at), wake=0,
                                    phase="before_turn"))
    return world
