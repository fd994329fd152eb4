"""Triggers: what makes the world move on its own, and what each fire does.

A trigger fires on time (``at`` an instant, ``after`` a duration from the start, ``every`` a
period), on state (``on_change``: an app change matching an app, an action, who made it and
field values) or on an action (``on_tool``: the agent's call of a tool whose arguments match).
Each fire runs the trigger's actions in order, each after its own ``wait``: ``notify`` (an
alert to the agent, an item on the user's phone, or a line the user writes in the chat),
``reply`` (a contact answers) and ``tool`` (an app's tool is called, by nobody in particular).

Fires of one trigger run side by side when every action is a notify or a reply; a trigger with a
tool action runs one fire at a time and queues the others (two read-then-write fires side by
side could lose a write). Every fire keeps its own number and its own wait.

This module owns the specs and the fires. Of the world, they use the clock, the time zone, the
event queue their events go on and the timeline each fire is noted in
(:class:`~interplay.world.protocols.TriggersHost`); what an action does (``act``) and the
contacts' answers still computing (``contact_calls``, for :meth:`Triggers.state`) are the
world's, handed to :class:`Triggers` as functions. A trigger loop found mid-run is kept in
:attr:`Triggers.failure` for the run to raise.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from interplay.values.clock import to_us
from interplay.world import times
from interplay.world.events import Event
from interplay.world.protocols import TriggersHost

#: Fires of one trigger at one instant before it is taken for a loop (an action that sets
#: its own trigger off again).
MAX_FIRES_PER_INSTANT = 100


class TriggerLoop(RuntimeError):
    """A trigger set itself off again and again at one instant: the scenario has a loop."""


@attrs.define
class Action:
    """One thing a fire does, after waiting ``wait`` (an ISO-8601 duration)."""

    kind: Literal["notify", "reply", "tool"]
    wait: str = ""
    #: notify: ``agent`` (an alert that wakes it), ``phone`` (an item on the user's phone) or
    #: ``chat`` (a line the user writes to the agent).
    to: Literal["agent", "phone", "chat"] = "agent"
    text: str = ""
    #: notify: where an alert comes from, or who sent a phone item.
    source: str = ""
    #: notify to phone: the channel (sms, email, call, app, ...).
    channel: str = "app"
    #: reply: the contact who answers, and what they are answering (a template; by default
    #: the arguments of the tool call that set the trigger off).
    contact: str = ""
    message: str = ""
    #: tool: the app, its tool and the arguments (string values are templates).
    app: str = ""
    tool: str = ""
    args: dict[str, Any] = attrs.Factory(dict)
    #: tool: who the change counts as made by.
    by: Literal["none", "others"] = "none"


@attrs.define
class ChangeMatch:
    """Which app changes set a state trigger off."""

    app: str
    action: str = ""
    by: Literal["any", "agent", "others", "none", "user"] = "any"


@attrs.define
class Trigger:
    name: str
    actions: list[Action] = attrs.Factory(list)
    at: str = ""
    after: str = ""
    every: str = ""
    #: A recurring trigger stops after this instant or this many fires.
    until: str = ""
    count: int | None = None
    on_tool: str = ""
    on_change: ChangeMatch | None = None
    #: Field values a tool call's arguments or a change's data must have (strings compare
    #: case-insensitively, with * and ? as wildcards).
    match: dict[str, Any] = attrs.Factory(dict)

    @property
    def timed(self) -> bool:
        return bool(self.at or self.after or self.every)

    @property
    def queues(self) -> bool:
        return any(a.kind == "tool" for a in self.actions)

    def problems(self, apps: Mapping[str, Any], contacts: set[str], tz: str) -> list[str]:
        where = f"trigger {self.name!r}"
        out: list[str] = []
        kinds = sum([self.timed, bool(self.on_tool), self.on_change is not None])
        if kinds != 1:
            out.append(f"{where}: give exactly one of at/after/every (time), on_tool (action) "
                       f"or on_change (state)")
        if not self.actions:
            out.append(f"{where}: has no actions")
        for label, value in (("at", self.at), ("until", self.until)):
            if value:
                try:
                    times.parse_instant(value, tz)
                except ValueError as exc:
                    out.append(f"{where}.{label}: {exc}")
        for label, value in (("after", self.after), ("every", self.every)):
            if value:
                try:
                    seconds = times.parse_duration(value)
                except ValueError as exc:
                    out.append(f"{where}.{label}: {exc}")
                    continue
                if label == "every" and seconds < 60:
                    out.append(f"{where}.every: at least PT1M")
        if (self.until or self.count is not None) and not self.every:
            out.append(f"{where}: until and count apply to a recurring trigger (every)")
        if self.at and self.after:
            out.append(f"{where}: give at or after, not both")
        if self.on_change is not None and self.on_change.app not in apps:
            out.append(f"{where}.on_change.app: no app named {self.on_change.app!r}")
        for i, action in enumerate(self.actions):
            out += _action_problems(action, f"{where}.actions[{i}]", apps, contacts)
        return out


def _action_problems(action: Action, where: str, apps: Mapping[str, Any],
                     contacts: set[str]) -> list[str]:
    out: list[str] = []
    if action.wait:
        try:
            times.parse_duration(action.wait)
        except ValueError as exc:
            out.append(f"{where}.wait: {exc}")
    if action.kind == "notify" and not action.text.strip():
        out.append(f"{where}: a notify needs text")
    if action.kind == "reply" and action.contact not in contacts:
        out.append(f"{where}.contact: no contact named {action.contact!r} "
                   f"(contacts: {', '.join(sorted(contacts)) or 'none'})")
    if action.kind == "tool":
        app = apps.get(action.app)
        if app is None:
            out.append(f"{where}.app: no app named {action.app!r}")
        elif action.tool not in {t.name for t in app.tools()}:
            out.append(f"{where}.tool: app {action.app!r} has no tool {action.tool!r}")
    return out


def matches(pattern: Mapping[str, Any], data: Mapping[str, Any]) -> bool:
    """Does ``data`` have every field ``pattern`` asks for?"""
    for key, want in pattern.items():
        if key not in data:
            return False
        got = data[key]
        if isinstance(want, str):
            if not fnmatch.fnmatchcase(str(got).strip().casefold(), want.strip().casefold()):
                return False
        elif got != want:
            return False
    return True


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)\}")


def render(template: str, context: Mapping[str, Any]) -> str:
    """Fill ``{name}`` and ``{args.field}`` placeholders from a fire's context; unknown ones
    stay as written."""

    def lookup(match: re.Match[str]) -> str:
        value: Any = context
        for part in match[1].split("."):
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            else:
                return match[0]
        return str(value)

    return _PLACEHOLDER.sub(lookup, template)


@attrs.define(eq=False)
class Fire:
    """One fire of a trigger: its number, where it is in the actions, and what it waits for."""

    trigger: str
    number: int
    context: dict[str, Any]
    started_us: int
    index: int = 0
    waited: bool = False
    waiting_until_us: int | None = None
    event: Event | None = None


@attrs.define(eq=False)
class TriggerRun:
    """A trigger's state in one episode."""

    spec: Trigger
    fired: int = 0
    running: list[Fire] = attrs.Factory(list)
    backlog: list[tuple[int, dict[str, Any]]] = attrs.Factory(list)
    next_event: Event | None = None
    #: The instant of the last fires and how many there were then (a loop guard).
    burst: tuple[int, int] = (0, 0)


#: Carries out one action of a fire (the world's effects: an alert, a phone item, a contact
#: asked, an app's tool called).
Act = Callable[[Action, Fire], None]


class Triggers:
    """Every trigger of a world, and the engine that runs their fires: ``act`` carries out an
    action, ``contact_calls`` lists the contacts' answers still being computed (each with the
    ``key`` of the fire that asked, as :meth:`Contacts.state` gives them)."""

    def __init__(self, world: TriggersHost, act: Act,
                 contact_calls: Callable[[], list[dict[str, Any]]]) -> None:
        self.world = world
        self.act = act
        self.contact_calls = contact_calls
        self.runs: dict[str, TriggerRun] = {}
        #: A trigger loop found mid-run (the run raises it: raised inside an agent's tool call
        #: it would only reach the model as the tool's error).
        self.failure: TriggerLoop | None = None

    def add(self, spec: Trigger) -> None:
        self.runs[spec.name] = TriggerRun(spec)

    # -- time triggers ---------------------------------------------------------------------

    def arm(self, anchor: float, *, rearm: bool = False) -> None:
        """Queue each time trigger's next fire, counted from ``anchor``: the start, or with
        ``rearm`` the new time after ``Clock.set_time``, on which relative and recurring
        triggers re-anchor (an absolute ``at`` stays where it is)."""
        for run in self.runs.values():
            if not run.spec.timed:
                continue
            if rearm:
                if run.next_event is None:
                    continue  # fired for good, or past its until/count
                self.world.queue.cancel(run.next_event)
                run.next_event = None
            elif run.next_event is not None:
                continue
            self._schedule(run, self._first_due(run, anchor))

    def _first_due(self, run: TriggerRun, anchor: float) -> float:
        spec = run.spec
        if spec.at and not run.fired:
            return times.parse_instant(spec.at, self.world.timezone)
        if spec.after and not run.fired:
            return anchor + times.parse_duration(spec.after)
        return anchor + times.parse_duration(spec.every)

    def _schedule(self, run: TriggerRun, due: float) -> None:
        spec = run.spec
        if spec.until and due > times.parse_instant(spec.until, self.world.timezone):
            return
        if spec.count is not None and run.fired >= spec.count:
            return
        run.next_event = self.world.queue.push(Event(
            to_us(due), "trigger", key=(spec.name, run.fired + 1),
            data={"trigger": spec.name}, recurring=bool(spec.every)))

    def on_time(self, event: Event) -> None:
        run = self.runs[event.data["trigger"]]
        run.next_event = None
        self.fire(run, {})
        if run.spec.every:
            self._schedule(run, event.due + times.parse_duration(run.spec.every))

    # -- state and action triggers ---------------------------------------------------------

    def on_change(self, change: Mapping[str, Any]) -> None:
        for run in self.runs.values():
            want = run.spec.on_change
            if want is None or want.app != change["app"]:
                continue
            if want.action and want.action != change["action"]:
                continue
            if want.by != "any" and want.by != change.get("actor", change["by"]):
                continue
            if matches(run.spec.match, change["data"]):
                self.fire(run, {"change": dict(change["data"]), "app": change["app"]})

    def on_tool(self, name: str, args: Mapping[str, Any]) -> None:
        for run in self.runs.values():
            if run.spec.on_tool == name and matches(run.spec.match, args):
                self.fire(run, {"args": dict(args), "tool": name})

    # -- fires -----------------------------------------------------------------------------

    def fire(self, run: TriggerRun, context: dict[str, Any]) -> None:
        now_us = self.world.clock.now_us()
        instant, count = run.burst
        count = count + 1 if instant == now_us else 1
        run.burst = (now_us, count)
        if count > MAX_FIRES_PER_INSTANT:
            loop = TriggerLoop(f"trigger {run.spec.name!r} fired {count} times at one instant; "
                               f"one of its actions sets it off again")
            self.failure = loop
            raise loop
        run.fired += 1
        number = run.fired
        context = {**context, "trigger": run.spec.name, "fire": number}
        self.world.timeline.add("fire", now_us, trigger=run.spec.name, fire=number,
                                queued=bool(run.spec.queues and run.running))
        if run.spec.queues and run.running:
            run.backlog.append((number, context))
            return
        self._start(run, number, context)

    def _start(self, run: TriggerRun, number: int, context: dict[str, Any]) -> None:
        fire = Fire(run.spec.name, number, context, self.world.clock.now_us())
        run.running.append(fire)
        self._advance(run, fire)

    def on_step(self, event: Event) -> None:
        """A fire's wait is over: go on with its actions."""
        run = self.runs[event.data["trigger"]]
        fire = next((f for f in run.running if f.number == event.data["fire"]), None)
        if fire is not None:
            fire.event = None
            fire.waiting_until_us = None
            self._advance(run, fire)

    def _advance(self, run: TriggerRun, fire: Fire) -> None:
        actions = run.spec.actions
        while fire.index < len(actions):
            action = actions[fire.index]
            if action.wait and not fire.waited:
                fire.waited = True
                due = self.world.clock.now() + times.parse_duration(action.wait)
                fire.waiting_until_us = to_us(due)
                fire.event = self.world.queue.push(Event(
                    fire.waiting_until_us, "fire_step", key=(run.spec.name, fire.number,
                                                             fire.index),
                    data={"trigger": run.spec.name, "fire": fire.number}))
                return
            fire.waited = False
            self.act(action, fire)
            fire.index += 1
        run.running.remove(fire)
        if run.backlog and not (run.spec.queues and run.running):
            number, context = run.backlog.pop(0)
            self._start(run, number, context)

    # -- reports ---------------------------------------------------------------------------

    def at_work(self) -> list[str]:
        """The triggers with a fire running (waiting out an action's ``wait``) or queued, in
        the scenario's order."""
        return [name for name, run in self.runs.items() if run.running or run.backlog]

    def state(self) -> dict[str, Any]:
        """Each trigger's fires so far, running fires with their waits (when each goes on),
        queued fires, and its contacts' answers still being computed with the real time left
        of their limits."""
        tz = self.world.timezone
        calls: dict[str, list[dict[str, Any]]] = {}
        for call in self.contact_calls():
            calls.setdefault(str(call["key"][0]), []).append(
                {k: v for k, v in call.items() if k != "key"})
        out: dict[str, Any] = {}
        for name, run in self.runs.items():
            entry: dict[str, Any] = {"settings": _settings(run.spec), "fired": run.fired,
                                     "running": [
                {"fire": f.number, "action": f.index,
                 "waiting_until": None if f.waiting_until_us is None
                 else times.iso(f.waiting_until_us / 1e6, tz)} for f in run.running]}
            if run.backlog:
                entry["queued"] = [number for number, _ in run.backlog]
            if run.next_event is not None:
                entry["next"] = times.iso(run.next_event.due, tz)
            if name in calls:
                entry["contact_calls"] = calls[name]
            out[name] = entry
        return out


def _settings(spec: Trigger) -> dict[str, Any]:
    """A trigger as its scenario set it: its name and the fields that differ from their
    defaults, the same for each of its actions and its ``on_change``."""
    def given(value: Any) -> Any:
        if attrs.has(type(value)):
            defaults = {f.name: f.default for f in attrs.fields(type(value))}
            out: dict[str, Any] = {}
            for name, field_value in attrs.asdict(value, recurse=False).items():
                default = defaults[name]
                if isinstance(default, attrs.Factory):
                    default = default.factory()
                if field_value != default:
                    out[name] = given(field_value)
            return out
        if isinstance(value, list):
            return [given(v) for v in value]
        return value

    return {"name": spec.name, **given(spec)}
