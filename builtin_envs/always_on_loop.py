"""One always_on run: the loop that takes events from the world's queue, wakes the agent, lets
the user read, and ends the run (see :mod:`interplay.builtin_envs.always_on` for what it does
and docs/always_on.md for the records it leaves). It owns the run's state between wakes; the
world owns the clock, the queue and what events do; the user's side owns her reads.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import TYPE_CHECKING, Any

from interplay.builtin_envs import always_on_prompts as prompts
from interplay.builtin_envs import always_on_records as records
from interplay.builtin_envs.always_on_history import Folder, resolve
from interplay.builtin_envs.user_sim import UserSide, make_sim, person_from
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.records import Task
from interplay.run.agent import ChatSession, Reply
from interplay.run.episode import EpisodeContext
from interplay.usersim import UserSimError, set_up
from interplay.world import times
from interplay.world.chat import ChatSettings
from interplay.world.contacts import Contact
from interplay.world.events import Event
from interplay.world.scenario import Scenario, build_world
from interplay.world.world import World

if TYPE_CHECKING:
    from interplay.builtin_envs.always_on import AlwaysOn, AlwaysOnConfig

log = get_logger("interplay.envs.always_on")


def spans_days(scenario: Scenario) -> bool:
    """Does the run span more than one day in the user's zone?"""
    end = scenario.end_time
    if end is None:
        return False
    tz = str(scenario.user.get("timezone") or scenario.timezone)
    return times.local(end, tz).date() > times.local(scenario.start_time, tz).date()


class Loop:
    """One always_on run."""

    def __init__(self, step: AlwaysOn, ctx: EpisodeContext) -> None:
        self.step = step
        self.cfg: AlwaysOnConfig = step.config
        self.ctx = ctx
        self.scenario = step.scenario()
        self.multi_day = spans_days(self.scenario)
        self.rate = self.cfg.rate if self.cfg.rate is not None else self.scenario.rate
        self.user_record: dict[str, Any] = ctx.results["user"]
        self.person, self.schedule = person_from(self.user_record)
        self.checks = self.cfg.checks if self.cfg.checks is not None else self.multi_day
        self.contact_sessions: dict[str, ChatSession] = {}
        self.world: World = build_world(
            self.scenario, clock=ctx.clock, rng=_world_rng(ctx),
            user_name=self.person.name,
            chat=ChatSettings(stay_quiet=self.cfg.stay_quiet, checks=self.checks,
                              min_check_interval_s=times.parse_duration(
                                  self.cfg.min_check_interval)),
            ask=self._ask)
        self.user = UserSide(self.world, make_sim(self.user_record), self.person, self.schedule,
                             done_ends_run=not self.multi_day,
                             sim_name=self.user_record["user_sim"], step=step.name)
        self.world.chat.on_message = self.user.on_message
        self.wakes: list[dict[str, Any]] = []
        self.wake_real_s: list[float] = []
        self.end_reason = ""
        #: She said done without a word in a one-sitting run: it ended at once.
        self.done_at_once = False
        self.error_type: str | None = None
        self.error: str | None = None
        #: The run ended because an agent turn failed (not because the run itself broke).
        self.turn_failed = False
        self.free_at_us = self.world.clock.now_us()
        self.nudges = 0
        self.late = 0
        self.early = 0
        self.started = time.monotonic()
        #: The agent's context policy (made when its agent is, in run()).
        self.folder: Folder | None = None

    # -- the run -----------------------------------------------------------------------------

    async def run(self) -> None:
        world, ctx = self.world, self.ctx
        log.debug("always_on.start", episode_id=ctx.info.episode_id, triggers=len(
            world.triggers.runs), contacts=len(world.contacts.specs), apps=len(world.apps))
        try:
            if self.user_record.get("tools"):
                for seat in self.user.sim.seats():
                    user_agent = ctx.agent(seat)
                    user_agent.tools = [*user_agent.tools,
                                        *world.user_tools(self.user_record["tools"])]
            await set_up(self.user.sim, self.person, ctx, name=self.user.sim_name,
                         step=self.step.name)
            self._queue_opening()
            agent = ctx.agent(self.cfg.seat)
            deny = set(self.cfg.deny_tools) | set(ctx.task.info.get("deny_tools") or ())
            agent.tools = [*(t for t in agent.tools if t.name not in deny),
                           *world.tools_for(self.cfg.seat, sorted(deny))]
            policy = resolve(self.cfg.history, agent)
            task = self._agent_task()
            self.folder = Folder(policy, tools=agent.tools, timezone=world.timezone,
                                 system=task.system_prompt, user_name=self.person.name,
                                 rules=None if ctx.task.system_prompt else self._rules())
            async with agent.chat(task) as session:
                # Read beside the trace's messages: what each model call was sent may be less.
                session.trace.info["history"] = policy.record()
                try:
                    await self._loop(session)
                except asyncio.CancelledError:
                    self.end_reason, self.error_type = "cancelled", "cancelled"
                    raise
                except Exception as exc:
                    self.end_reason = "error"
                    self.error_type = "config_error" if isinstance(exc, InterplayError) \
                        else "env_error"
                    self.error = f"{type(exc).__name__}: {exc}"
                    raise
                if self.error_type in (None, "user_error"):
                    session.stop(f"always_on_{self.end_reason}")
        except UserSimError as exc:  # her sim could not set up
            self.end_reason = self.error_type = "user_error"
            self.error = str(exc)
            raise
        finally:
            world.enter("end")
            try:
                # She left (a blank done), or the run broke: no wrap-up to read.
                if self.end_reason not in ("error", "user_error", "cancelled", "") \
                        and not self.done_at_once:
                    record = await self.user.wrap_up()
                    if record["outcome"] == "error":
                        self.end_reason = self.error_type = "user_error"
                        self.error = record.get("error")
            finally:
                await self._close()
        if self.error_type == "user_error":
            # Recorded: now the episode is the user sim's failure, never scored.
            raise UserSimError(self.error or "the user sim failed")

    async def _close(self) -> None:
        world, ctx = self.world, self.ctx
        try:
            ctx.results["always_on"] = records.build(self)
            for key, value in records.metrics(ctx.results["always_on"]).items():
                ctx.metrics[key] = value
        finally:
            await world.contacts.aclose()
            for session in self.contact_sessions.values():
                await session.close()
            await self.user.sim.close()
            world.close()
        log.debug("always_on.end", episode_id=ctx.info.episode_id, wakes=len(self.wakes),
                  end_reason=self.end_reason, error_type=self.error_type)

    async def _loop(self, session: ChatSession) -> None:
        n = 0
        while True:
            items, ending = await self._next_wake()
            if items is None:
                self.end_reason = ending or "finished_nothing_pending"
                if self.end_reason == "user_error":
                    self.error_type = "user_error"
                return
            n += 1
            final_reason = ending
            if final_reason is None and n >= self.cfg.max_wakes:
                final_reason = "max_wakes"
            if final_reason is None and self.cfg.budget_s is not None and (
                    time.monotonic() - self.started + self.step.worst_wake_s(self.ctx)
                    > self.cfg.budget_s):
                final_reason = "budget"
            outcome = await self._wake(session, n, items, final_reason)
            if outcome is not None:
                self.end_reason = outcome
                return
            if final_reason is not None:
                self.end_reason = final_reason
                return

    async def _next_wake(self) -> tuple[list[Event] | None, str | None]:
        """The events of the next wake (and, for a final wake, why it is final); None with the
        reason when the run ends without one more wake."""
        world, queue = self.world, self.world.queue
        end = world.end
        idle = 0
        while True:
            await world.settle()
            self._raise_failure()
            now = world.clock.now()
            if end is not None and world.clock.reached(end):
                # The task time is past the end: this wake is the final one, with what is due.
                items = await self._take(world.clock.now_us())
                if isinstance(items, str):
                    return None, items
                return items, "end_time"
            event = queue.peek()
            if event is None or (end is not None and event.due > end):
                if end is None:
                    return None, self._nothing_reason()
                world.jump_to(world.us(end), "end")
                continue
            # Everything due in the minute of the first event (or overdue) comes in one wake.
            last_us = world.us((math.floor(max(event.due, now) / 60) + 1) * 60) - 1
            items = await self._take(last_us if end is None else min(last_us, world.us(end)))
            if isinstance(items, str):
                return None, items
            if items:
                # A wake at the end time is the final one.
                return items, "end_time" if end is not None and world.clock.reached(end) \
                    else None
            if end is None and queue.only_recurring():
                idle += 1
                if idle >= self.cfg.idle_jumps:
                    return None, self._nothing_reason()

    async def _take(self, last_us: int) -> list[Event] | str:
        """Take the events due up to ``last_us``: world events run at their marks, reads
        happen, and the events that wake the agent are returned (or the reason the run ends
        now)."""
        world, queue = self.world, self.world.queue
        items: list[Event] = []
        while (event := queue.peek()) is not None and event.due_us <= last_us:
            queue.pop()
            world.jump_to(event.due_us, event.kind)
            if world.run_event(event):
                self._raise_failure()
                continue
            if event.kind == "read":
                record = await self.user.read(event)
                if record is not None and record["outcome"] == "error":
                    self.error = record.get("error")
                    return "user_error"
                if record is not None and record["outcome"] == "done" and self.user.done_ends_run:
                    self.done_at_once = True
                    return "user_done"
                continue
            items.append(event)
        return items

    def _nothing_reason(self) -> str:
        pending = records.pending(self)
        return "stuck" if any(p["count"] for p in pending.values()) else \
            "finished_nothing_pending"

    def _raise_failure(self) -> None:
        if self.world.failure is not None:
            raise self.world.failure

    # -- one wake ----------------------------------------------------------------------------

    async def _wake(self, session: ChatSession, n: int, items: list[Event],
                    final_reason: str | None) -> str | None:
        world = self.world
        world.enter("before_turn", wake=n)
        now_us = world.clock.now_us()
        sources = [self._deliver(event, n, now_us) for event in items]
        lines = [s.pop("line") for s in sources]
        if n == 1 and not self.ctx.task.system_prompt:
            lines.insert(0, prompts.step_line(self._rules()))
            sources.insert(0, {"kind": "rules", "from": "step", "text": self._rules()})
        if final_reason is not None:
            notice = self._final_notice(final_reason)
            lines.append(prompts.step_line(notice))
            sources.append({"kind": "final_notice", "from": "step", "text": notice})
        entry = world.timeline.add("wake", now_us, wake=n, final=final_reason is not None,
                                   sources=sources)
        done_reply = any(e.kind == "user_reply" and e.data["done"] for e in items)
        t0 = time.monotonic()
        assert self.folder is not None
        self.folder.begin(session.trace.messages)
        reply = await self._turn(session, "\n".join(lines), "turn")
        calls = world.take_tool_calls()
        notes = [reply.text] if reply.text.strip() else []
        nudged = False
        wrote = any(m.wake == n for m in world.chat.sent_by(self.cfg.seat)) or \
            n in world.chat.quiet_wakes
        if self.cfg.nudge and not reply.stopped and not wrote and reply.text.strip():
            nudged = True
            self.nudges += 1
            reply = await self._turn(session, prompts.step_line(self._nudge_text()), "nudge",
                                     tool_choice=self.cfg.nudge_tool_choice or None)
            calls += world.take_tool_calls()
            if reply.text.strip():
                notes.append(reply.text)
        world.enter("after_turn")
        self.free_at_us = world.clock.now_us()
        mine = [m for m in world.chat.sent_by(self.cfg.seat) if m.wake == n]
        entry.update(end_at=world.timeline.stamp(self.free_at_us)["at"],
                     end_t=world.timeline.stamp(self.free_at_us)["t"],
                     sent=[m.number for m in mine],
                     quiet=n in world.chat.quiet_wakes, nudged=nudged, tool_calls=calls,
                     private_note="\n\n".join(notes))
        # Real time is kept beside the timeline, which a seed replays to the byte.
        self.wake_real_s.append(round(time.monotonic() - t0, 3))
        if nudged:
            entry["nudge"] = {"from": "step", "text": self._nudge_text()}
        self.folder.end(entry, [(m.number, m.at_us, m.text) for m in mine])
        self.wakes.append(entry)
        world.timeline.gap()
        log.debug("always_on.wake", episode_id=self.ctx.info.episode_id, wake=n,
                  sources=len(items), tool_calls=len(calls), nudged=nudged,
                  final=final_reason is not None)
        if reply.stopped:
            trace = session.trace
            self.turn_failed = True
            self.error_type = trace.error_type or reply.stop_condition or "error"
            self.error = trace.error
            for message in mine:
                message.leftover = True
            return "error"
        self._raise_failure()
        if done_reply and self.user.done_ends_run:
            return "user_done"
        return None

    async def _turn(self, session: ChatSession, message: str, phase: str, *,
                    tool_choice: str | None = None) -> Reply:
        world = self.world
        world.enter(phase)
        assert self.folder is not None
        context = self.folder.context(session.trace.messages, message)
        world.clock.set_rate(self.rate)
        try:
            return await session.turn(message, tool_choice=tool_choice, context=context)
        finally:
            world.clock.freeze()

    def _deliver(self, event: Event, n: int, wake_us: int) -> dict[str, Any]:
        """What one waking event tells the agent, marking it delivered."""
        world = self.world
        tz = world.timezone
        due = event.due
        late = math.floor(wake_us / 60e6) > math.floor(max(event.due_us, self.free_at_us) / 60e6)
        early = wake_us < event.due_us
        self.late += late
        self.early += early
        source: dict[str, Any] = {"kind": event.kind, "from": "world",
                                  **_due(world, event.due_us)}
        when = times.readable(due, tz)
        name = self.person.name
        if event.kind == "user_line":
            kind = "opening" if event.data.get("opening") else "line"
            self.user.said(due, kind, event.data["text"])
            source.update(kind=kind, **{"from": "user"}, text=event.data["text"])
            source["line"] = prompts.user_line(when, name, event.data["text"])
        elif event.kind == "user_reply":
            record = event.data["record"]
            record.update(reached_at=times.iso(wake_us / 1e6, tz),
                          reached_t=world.timeline.stamp(wake_us)["t"], reached_wake=n)
            target = record["reply_to"]
            source.update({"from": "user"}, text=event.data["text"], read=record["read"],
                          reply_to=target, done=event.data["done"])
            source["line"] = prompts.user_reply_line(when, name, target, event.data["text"])
        elif event.kind == "alert":
            source.update(text=event.data["text"], source=event.data["source"],
                          trigger=event.data["trigger"], fire=event.data["fire"])
            source["line"] = prompts.alert_line(when, event.data["source"], event.data["text"])
        elif event.kind == "contact_reply":
            call = world.contacts.deliver(event)
            spec: Contact = world.contacts.specs[call.contact]
            who = f"{spec.name} <{spec.address}>" if spec.address else spec.name
            source.update(text=call.text or "", contact=call.contact, call=call.number)
            source["line"] = prompts.contact_line(when, spec.channel, who, call.text)
        else:  # check
            check = world.chat.check_due(event)
            source.update(check=check.number, text=check.note)
            source["line"] = prompts.check_line(when, check.number, check.note)
        source["late"] = bool(late)
        return source

    # -- what the step says -------------------------------------------------------------------

    def _queue_opening(self) -> None:
        text = prompts.opening_text(self.ctx.task, self.scenario)
        if text:
            world = self.world
            world.queue.push(Event(world.us(world.start), "user_line", key=("opening",),
                                   data={"text": text, "opening": True}))

    def _agent_task(self) -> Task:
        task = self.ctx.task
        system = prompts.agent_system_prompt(task.system_prompt, self._rules())
        return Task(idx=task.idx, prompt=None, system_prompt=system, answer=task.answer,
                    info=task.info)

    def _rules(self) -> str:
        return prompts.rules_text(self.cfg, self.person.name, self.world.timezone, self.checks)

    def _nudge_text(self) -> str:
        return prompts.nudge_text(self.person.name, self.cfg.stay_quiet)

    def _final_notice(self, reason: str) -> str:
        return prompts.final_notice(reason, self.person.name, self.world.clock.now(),
                                    self.world.timezone)

    async def _ask(self, contact: Contact, message: str) -> str:
        session = self.contact_sessions.get(contact.name)
        if session is None:
            system = prompts.CONTACT_PROMPT.format(name=contact.name, persona=contact.persona,
                                           user=self.person.name)
            agent = self.ctx.agent(contact.seat, name=f"{contact.seat}:{contact.name}")
            session = agent.chat(Task(idx=self.ctx.task.idx, system_prompt=system))
            self.contact_sessions[contact.name] = session
        reply = await session.turn(message)
        if reply.stopped and not reply.text:
            raise RuntimeError(f"the contact's turn stopped ({reply.stop_condition})")
        return reply.text


def _due(world: World, due_us: int) -> dict[str, Any]:
    stamp = world.timeline.stamp(due_us)
    return {"due": stamp["at"], "due_t": stamp["t"]}


def _world_rng(ctx: EpisodeContext) -> random.Random:
    """The world's own generator, seeded from the episode's: its draws (delays) never shift
    the episode's other uses of ``ctx.rng``."""
    return random.Random(ctx.rng.getrandbits(64))
