"""The World: one episode's simulated world. It owns the clock's use, the one event queue, the
apps and their changelog, the triggers and their fires, the contacts, the user's chat and the
timeline; it carries out what a fire does and wraps the tools the agent (and the user, on her
side) calls, so that every change says who made it (``by``: the agent's seat, her seat,
``others`` or ``none``; ``actor``: ``agent``, ``user``, ``others`` or ``none``), in which
wake and in which phase (``before_turn``, ``turn``, ``nudge``, ``after_turn``, ``end``).

It does not run the agent or the user: the always_on step's loop takes events from the queue,
jumps the clock to each, and decides what wakes the agent and when the user reads.

The parts never import this module: each takes the world as the narrow protocol of
:mod:`interplay.world.protocols` that names what it uses, and :class:`World` implements them
all (the triggers also get :meth:`World.act` and the contacts' :meth:`~Contacts.state`).
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import inspect
import json
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from interplay.values.clock import Clock, to_us
from interplay.values.tools import Tool
from interplay.world import times
from interplay.world.apps import App
from interplay.world.chat import CHANNEL_TOOLS, ChatSettings, UserChat
from interplay.world.contacts import Ask, Contact, Contacts
from interplay.world.events import Event, EventQueue
from interplay.world.timeline import Timeline
from interplay.world.triggers import Action, Fire, Trigger, TriggerLoop, Triggers, render

PHASES = ("before_turn", "turn", "nudge", "after_turn", "end")
ACTORS = ("agent", "others", "none", "user")


class World:
    def __init__(self, *, clock: Clock, timezone: str, start: float, end: float | None = None,
                 rng: random.Random | None = None, user_name: str = "the user",
                 chat: ChatSettings | None = None, ask: Ask | None = None,
                 contacts_side_by_side: bool = True) -> None:
        self.clock = clock
        self.timezone = timezone
        self.start = start
        self.end = end
        self.rng = rng or random.Random(0)
        self.queue = EventQueue()
        self.timeline = Timeline(start, timezone)
        self.apps: dict[str, App] = {}
        self.contacts = Contacts(self, ask, side_by_side=contacts_side_by_side)
        self.triggers = Triggers(self, act=self.act, contact_calls=self.contacts.state)
        self.chat = UserChat(self, user_name, chat or ChatSettings())
        #: The wake the world is in (changes between two wakes count for the coming one).
        self.wake = 1
        self.phase = "before_turn"
        #: The agent's tool calls in the current wake (the loop takes them for its record).
        self.tool_calls: list[dict[str, Any]] = []
        #: Contacts' answers the world had to wait for before a wake.
        self.settled = 0
        #: Each wait for them: the coming wake, the answers, real seconds, triggers at work.
        self.settles: list[dict[str, Any]] = []
        #: While the agent's turn runs on a running clock: what each of the agent's tool calls
        #: runs inside. It brings the world up to the clock first (what fell due is carried
        #: out, at its time) and stops the clock while the tool runs, so a tool never sees a
        #: world behind its clock, whichever way the call arrived, and what it queues is due
        #: at the moment it was called (the loop sets it for the turn; None otherwise).
        self.tool_time: Callable[[], AbstractAsyncContextManager[None]] | None = None
        self._actor: contextvars.ContextVar[str] = contextvars.ContextVar("actor",
                                                                         default="none")
        self._unsubscribe: Callable[[], None] | None = None
        #: The seats that act as ``agent`` and ``user``: a change names its seat in ``by``.
        self.seats: dict[str, str] = {"agent": "agent", "user": "user"}
        #: App changes per ``by`` (a seat, ``others`` or ``none``), every one counted.
        self.changes_by: dict[str, int] = {}

    @property
    def failure(self) -> Exception | None:
        """A scenario error found mid-run (a trigger loop); the loop raises it."""
        return self.triggers.failure

    # -- building ------------------------------------------------------------------------------

    def add_app(self, app: App) -> None:
        app.world = self
        self.apps[app.name] = app

    def add_trigger(self, spec: Trigger) -> None:
        self.triggers.add(spec)

    def add_contact(self, spec: Contact) -> None:
        self.contacts.add(spec)

    def begin(self) -> None:
        """Put the clock at the start, frozen, and arm the time triggers."""
        self.clock.freeze()
        self.clock.set_time(self.start)
        self.triggers.arm(self.start)
        # From here on a new time re-arms the triggers; the start itself is not one.
        self._unsubscribe = self.clock.on_set_time(self._rearm)
        self.timeline.add("start", self.clock.now_us(), end=None if self.end is None
                          else times.iso(self.end, self.timezone))

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _rearm(self, new_time: float) -> None:
        self.triggers.arm(new_time, rearm=True)
        self.timeline.add("set_time", to_us(new_time))

    # -- time ----------------------------------------------------------------------------------

    @staticmethod
    def us(t: float) -> int:
        return to_us(t)

    def jump_to(self, due_us: int, to_kind: str) -> None:
        """Move the clock forward to an event's mark (never past it; never back)."""
        now_us = self.clock.now_us()
        if due_us > now_us:
            self.clock.advance_to(due_us / 1_000_000)
            self.timeline.jump(now_us, due_us, to_kind, self.triggers.at_work())

    def enter(self, phase: str, wake: int | None = None) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}")
        self.phase = phase
        if wake is not None:
            self.wake = wake

    @contextlib.contextmanager
    def acting(self, actor: str) -> Iterator[None]:
        """Changes made inside count as made by ``actor``."""
        if actor not in ACTORS:
            raise ValueError(f"unknown actor {actor!r}")
        token = self._actor.set(actor)
        try:
            yield
        finally:
            self._actor.reset(token)

    # -- changes and events --------------------------------------------------------------------

    def record_change(self, app: str, action: str, data: dict[str, Any]) -> None:
        """Record a change app ``app`` made, with who made it, the wake and the phase; the
        state triggers see it."""
        actor = self._actor.get()
        by = self.seats.get(actor, actor)
        self.changes_by[by] = self.changes_by.get(by, 0) + 1
        change = {"app": app, "action": action, "by": by, "actor": actor,
                  "phase": self.phase, "data": data}
        self.timeline.change(self.clock.now_us(), self.wake, change)
        self.triggers.on_change(change)

    def deliver(self, app: str, sender: str, text: str, **meta: Any) -> None:
        """Hand a contact's answer to app ``app`` (an inbox files it), as a change made by
        ``others``."""
        with self.acting("others"):
            self.apps[app].deliver(sender, text, **meta)

    def run_event(self, event: Event) -> bool:
        """Carry out a world event (a time trigger comes due, a fire's wait ends); False for
        the events the loop handles itself (what wakes the agent, the user's reads)."""
        if event.kind == "trigger":
            self.triggers.on_time(event)
        elif event.kind == "fire_step":
            self.triggers.on_step(event)
        else:
            return False
        return True

    def act(self, action: Action, fire: Fire) -> None:
        """Carry out one action of a fire."""
        context = fire.context
        now_us = self.clock.now_us()
        key = (fire.trigger, fire.number, fire.index)
        if action.kind == "notify":
            text = render(action.text, context)
            if action.to == "agent":
                self.queue.push(Event(now_us, "alert", key=key, data={
                    "source": action.source or fire.trigger, "text": text,
                    "trigger": fire.trigger, "fire": fire.number}))
            elif action.to == "phone":
                self.chat.add_phone_item(action.channel, action.source or fire.trigger, text)
                self.timeline.add("phone", now_us, channel=action.channel,
                                  sender=action.source or fire.trigger, text=text)
            else:
                self.queue.push(Event(now_us, "user_line", key=key, data={
                    "text": text, "trigger": fire.trigger, "fire": fire.number}))
        elif action.kind == "reply":
            message = render(action.message, context) if action.message else _describe(context)
            args = context.get("args") or {}
            self.contacts.request(action.contact, message, key,
                                  {"subject": str(args.get("subject") or "")})
        else:
            app = self.apps[action.app]
            method = next(t.fn for t in app.tools() if t.name == action.tool)
            args = {k: render(v, context) if isinstance(v, str) else v
                    for k, v in action.args.items()}
            try:
                with self.acting(action.by):
                    method(**args)
            except TriggerLoop:
                raise
            except Exception as exc:
                self.timeline.add("action_failed", now_us, trigger=fire.trigger,
                                  fire=fire.number, tool=action.tool,
                                  error=f"{type(exc).__name__}: {exc}")

    async def settle(self) -> None:
        """Let the contacts' answers in progress land (each up to its limit). How many were
        still computing depends on real time, so it is counted (``settled``, and each settle
        that waited in ``settles``: the coming wake, the answers, the real seconds and the
        triggers whose answers or fires were at work), not put in the timeline, which a seed
        replays to the byte."""
        computing = self.contacts.in_progress()
        if not computing:
            return
        asking = {str(c.key[0]) for c in computing}
        at_work = [name for name in self.triggers.runs
                   if name in asking or name in self.triggers.at_work()]
        started = time.monotonic()
        waited = await self.contacts.settle()
        self.settled += waited
        self.settles.append({"wake": self.wake, "calls": waited,
                             "waited_s": round(time.monotonic() - started, 3),
                             "at_work": at_work})

    # -- the agent's tools ---------------------------------------------------------------------

    def tools_for(self, seat: str, deny: Sequence[str] = ()) -> list[Tool]:
        """The user-chat tools and every app's tools, for the agent in ``seat``: each call is
        recorded in the wake, its changes count as the agent's, and action triggers see it.
        ``deny`` names app tools to leave out, or patterns of them (``*``, ``send_*``); the
        chat tools are the agent's channel to the user and stay whatever it says (the
        settings leave out ``stay_quiet`` and the checks)."""
        chat = self.chat.tools(seat)
        apps = [t for app in self.apps.values() for t in app.tools()
                if not denied(t.name, deny)]
        return [self._agent_tool(t) for t in (*chat, *apps)]

    def user_tools(self, names: Sequence[str]) -> list[Tool]:
        """The apps' tools named in ``names``, for the user's side (dual control): her changes
        count as made by ``user``; each call is a ``user_tool`` timeline entry (its name, no
        arguments) and no action trigger sees it (those watch the agent)."""
        wanted = set(names)
        tools = [t for app in self.apps.values() for t in app.tools() if t.name in wanted]
        return [self._user_tool(t) for t in tools]

    def _user_tool(self, inner: Tool) -> Tool:
        async def call(**arguments: Any) -> Any:
            # The timeline names her tool, never its arguments nor an error's text.
            entry = self.timeline.add("user_tool", self.clock.now_us(), name=inner.name)
            return await self._call_as("user", inner, arguments, entry, detail=False)

        return _wrapped(inner, call)

    def _agent_tool(self, inner: Tool) -> Tool:
        async def call(**arguments: Any) -> Any:
            if self.tool_time is None:
                return await run(arguments)
            async with self.tool_time():
                return await run(arguments)

        async def run(arguments: dict[str, Any]) -> Any:
            entry: dict[str, Any] = {"name": inner.name, **self.timeline.stamp(
                self.clock.now_us()), "phase": self.phase, "arguments": arguments}
            self.tool_calls.append(entry)
            result = await self._call_as("agent", inner, arguments, entry, detail=True)
            self.triggers.on_tool(inner.name, arguments)
            return result

        return _wrapped(inner, call)

    async def _call_as(self, actor: str, inner: Tool, arguments: dict[str, Any],
                       entry: dict[str, Any], *, detail: bool) -> Any:
        """``inner`` called with its changes counted as ``actor``'s; a failure is noted in
        ``entry`` (its type, and its text when ``detail``) and raised."""
        with self.acting(actor):
            try:
                result = inner.fn(**arguments)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                entry["error"] = f"{type(exc).__name__}: {exc}" if detail else type(exc).__name__
                raise
        return result

    def take_tool_calls(self) -> list[dict[str, Any]]:
        calls, self.tool_calls = self.tool_calls, []
        return calls


def denied(name: str, deny: Sequence[str]) -> bool:
    """Does a deny-list (names, or ``fnmatch`` patterns such as ``*`` and ``send_*``) take the
    tool ``name``? Never one of the agent's channel tools (:data:`CHANNEL_TOOLS`)."""
    return name not in CHANNEL_TOOLS and any(fnmatch.fnmatchcase(name, p) for p in deny)


def _describe(context: dict[str, Any]) -> str:
    """What a contact is asked when the action gives no message: the tool call's arguments."""
    args = context.get("args")
    if isinstance(args, dict) and args:
        return "\n".join(f"{k}: {v}" for k, v in args.items())
    return json.dumps({k: v for k, v in context.items() if k not in ("trigger", "fire")},
                      ensure_ascii=False)


def _wrapped(inner: Tool, call: Callable[..., Awaitable[Any]]) -> Tool:
    """``call`` as a tool with ``inner``'s name, description, schema and signature."""
    call.__signature__ = inspect.signature(inner.fn)  # type: ignore[attr-defined]
    return Tool(inner.name, inner.description, inner.parameters, call, inner.timeout_s)
