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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from interplay.builtin_envs.always_on import prompts
from interplay.builtin_envs.always_on.clock import TurnClock
from interplay.builtin_envs.always_on.history import Folder, resolve
from interplay.builtin_envs.user_sim import UserSide, make_sim, person_from
from interplay.contracts.contexts import ChatSession, EpisodeContext, Reply
from interplay.contracts.usersim import UserSimError, set_up
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.values.records import Task
from interplay.values.tools import Tool
from interplay.world import times
from interplay.world.chat import CHANNEL_TOOLS, CHECK_TOOLS, ChatSettings, Sent
from interplay.world.contacts import Contact
from interplay.world.events import Event
from interplay.world.scenario import Scenario, build_world
from interplay.world.world import World, denied

if TYPE_CHECKING:
    from interplay.builtin_envs.always_on.config import AlwaysOnConfig

log = get_logger("interplay.envs.always_on")

#: The next wake is the closing one once the budget's time left is under this many times the
#: longest wake so far (what runs past the budget is cut).
CLOSING_MARGIN = 2.0

#: Items of each pending kind listed by name (the rest are counted).
PENDING_LISTED = 20


def spans_days(scenario: Scenario) -> bool:
    """Does the run span more than one day in the user's zone?"""
    end = scenario.end_time
    if end is None:
        return False
    tz = str(scenario.user.get("timezone") or scenario.timezone)
    try:
        times.zone(tz)
    except ValueError:
        tz = scenario.timezone  # her zone is refused where it is checked
    return times.local(end, tz).date() > times.local(scenario.start_time, tz).date()


def deny_problems(deny: Sequence[str], where: str, *, stay_quiet: bool,
                  checks: bool) -> list[str]:
    """A deny-list that names one of the agent's ways to the user: ``message_user``,
    ``stay_quiet``, ``get_time`` or a check tool while checks are on. (A pattern such as ``*``
    never takes them: only a name can, and that is refused here, so it is never by accident.)"""
    out = []
    for name in deny:
        if name == "message_user":
            out.append(f"{where}: message_user is the agent's only way to reach the user; a "
                       f"deny-list never takes it")
        elif name == "get_time":
            out.append(f"{where}: get_time is always there while the clock is set; a "
                       f"deny-list never takes it")
        elif name == "stay_quiet":
            out.append(f"{where}: stay_quiet is how the agent says there is nothing to tell "
                       f"her; to not offer it, set always_on.stay_quiet = false")
        elif name in CHECK_TOOLS and checks:
            out.append(f"{where}: {name} is one of the agent's scheduled checks; to not offer "
                       f"them, set always_on.checks = false")
        elif not isinstance(name, str) or not name.strip():
            out.append(f"{where}: {name!r} is not a tool name or a pattern")
    return out


class Loop:
    """One always_on run."""

    def __init__(self, cfg: AlwaysOnConfig, scenario: Scenario, ctx: EpisodeContext, *,
                 step: str) -> None:
        #: The step's name, as her sim and the logs know it.
        self.step = step
        self.cfg = cfg
        self.ctx = ctx
        self.scenario = scenario
        self.multi_day = spans_days(self.scenario)
        self.rate = self.cfg.rate if self.cfg.rate is not None else self.scenario.rate
        self.user_record: dict[str, Any] = ctx.results["user"]
        done_ends_run = self.cfg.done_ends_run if self.cfg.done_ends_run is not None \
            else not self.multi_day
        person, self.schedule = person_from(self.user_record)
        self.person = attrs.evolve(person, done_ends_run=done_ends_run)
        self.checks = self.cfg.checks if self.cfg.checks is not None else self.multi_day
        self.contact_sessions: dict[str, ChatSession] = {}
        self.world: World = build_world(
            self.scenario, clock=ctx.clock, rng=_world_rng(ctx),
            user_name=self.person.name,
            chat=ChatSettings(stay_quiet=self.cfg.stay_quiet, checks=self.checks,
                              min_check_interval_s=times.parse_duration(
                                  self.cfg.min_check_interval)),
            ask=self._ask, contacts_side_by_side=self.cfg.contacts_side_by_side)
        self.user = UserSide(self.world, make_sim(self.user_record), self.person, self.schedule,
                             done_ends_run=done_ends_run,
                             sim_name=self.user_record["user_sim"], step=step,
                             reply_lands=self.user_record.get("reply_lands", "anyway"),
                             seat=self.cfg.seat)
        self.world.chat.on_message = self.user.on_message
        # A change the agent or she makes names the seat that made it.
        self.world.seats = {"agent": self.cfg.seat,
                            "user": min(self.user.sim.seats(), default="user")}
        self.wakes: list[dict[str, Any]] = []
        self.wake_real_s: list[float] = []
        self.end_reason = ""
        #: She said done without a word in a one-sitting run: it ended at once.
        self.done_at_once = False
        self.error_type: str | None = None
        self.error: str | None = None
        #: The run ended because an agent turn failed (not because the run itself broke).
        self.turn_failed = False
        self.nudges = 0
        self.late = 0
        self.early = 0
        self.started = time.monotonic()
        #: The task time the run ended at (before her wrap-up read, which may come later).
        self.ended_us = self.world.clock.now_us()
        #: When the real-time budget runs out (time.monotonic()).
        self.deadline = self.started + self.cfg.budget_s
        #: The agent seat's turn timeout (known once its agent is made, in run()).
        self.turn_timeout_s: float | None = None
        #: The longest real time a seat-played contact's answer may take (0 with none): a
        #: settle before a wake may wait that long, so the budget keeps it in reserve.
        self.longest_contact_limit_s = max(
            (c.limit_s for c in self.scenario.contacts if not c.replies), default=0.0)
        #: The budget ran out while something still ran (a turn, her read): what it cut.
        self.budget_cut: str | None = None
        #: Why the budget chose the closing wake, when it did (:meth:`_budget_figures`).
        self.budget_closing: dict[str, Any] | None = None
        #: When the budget ran out, if it did: the wake it came in or after, and the time.
        self.budget_spent: dict[str, Any] | None = None
        #: The wake whose turn is running (cut short when the budget runs out).
        self.open_wake: OpenWake | None = None
        #: Events that fell due and took effect, waiting for the next wake to tell the agent.
        self.arrived: list[Event] = []
        #: When the world acts while a turn runs on a running clock.
        self.turns = TurnClock(self.world, self._take_one)
        #: The agent's context policy (made when its agent is, in run()).
        self.folder: Folder | None = None

    # -- the run -----------------------------------------------------------------------------

    async def run(self) -> None:
        """The run to its end and her wrap-up read; what it leaves is read from this loop
        (:mod:`interplay.builtin_envs.always_on.records`) before :meth:`close`."""
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
                         step=self.step)
            self._queue_opening()
            agent = ctx.agent(self.cfg.seat)
            # A budget below it was warned of when the run started (AlwaysOn.check_seats).
            self.turn_timeout_s = agent.spec.timeout_s
            deny = self._deny_list()
            own = world.tools_for(self.cfg.seat, deny)
            _refuse_clashes(self.cfg.seat, agent.tools, own)
            agent.tools = [*(t for t in agent.tools if not denied(t.name, deny)), *own]
            policy = resolve(self.cfg.history, agent)
            task = self._agent_task()
            self.folder = Folder(policy, tools=agent.tools, timezone=world.timezone,
                                 system=task.system_prompt, user_name=self.person.name,
                                 rules=None if ctx.task.system_prompt else self._rules())
            async with agent.chat(task) as session:
                # Read beside the trace's messages: what each model call was sent may be less.
                session.trace.info["history"] = policy.record()
                try:
                    async with asyncio.timeout_at(self.deadline) as budget:
                        await self._loop(session)
                except TimeoutError:
                    if not budget.expired():
                        raise
                    self._out_of_budget()
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
            self.ended_us = world.clock.now_us()
            await self._wrap_up()

    def _out_of_budget(self) -> None:
        """The budget ran out with something still running: the run ends there, with the
        wake whose turn was cut (if one was) recorded as far as it went."""
        self.end_reason = "budget"
        self.world.clock.freeze()
        self.world.clock.hold_at(None)
        self.world.tool_time = None
        self.world.queue.on_push = None
        opened = self.open_wake
        self.budget_spent = self._budget_moment(
            opened.n if opened is not None else len(self.wakes))
        if opened is not None:
            self.budget_cut = "turn"
            self._close_wake(opened, cut=True)
        else:
            self.budget_cut = "between wakes"
        log.info("always_on.budget_cut", episode_id=self.ctx.info.episode_id,
                 wakes=len(self.wakes), budget_s=self.cfg.budget_s)

    async def _wrap_up(self) -> None:
        """Her last read, after the last wake, when she would read it: at once when she is
        free, else when she is next free if that comes before the run's end; otherwise it is
        recorded unread (``wrap_up_unread``). None after a run that broke, one the budget cut,
        or one she ended with her done."""
        if self.end_reason in ("error", "user_error", "cancelled", "user_done", "") \
                or self.budget_cut is not None:
            return
        world = self.world
        now = world.clock.now()
        read_at, mode = self.schedule.read_plan(now)
        if read_at is None or (read_at > now and world.end is not None
                               and read_at > world.end):
            world.timeline.add("wrap_up_unread", world.clock.now_us(),
                               state=self.schedule.state_at(now),
                               free_at=None if read_at is None
                               else times.iso(read_at, world.timezone))
            return
        world.jump_to(world.us(read_at), "wrap_up")
        try:
            async with asyncio.timeout_at(self.deadline):
                record = await self.user.wrap_up(mode)
        except TimeoutError:
            self.budget_cut = "wrap-up"
            self.budget_spent = self._budget_moment(len(self.wakes))
            return
        if record["outcome"] == "error":
            self.end_reason = self.error_type = "user_error"
            self.error = record.get("error")

    async def close(self) -> None:
        """Close what the run opened (contacts, sessions, her sim, the world), once what it
        leaves has been read from it (:mod:`interplay.builtin_envs.always_on.records`)."""
        world, ctx = self.world, self.ctx
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
                self._end(ending or "finished_nothing_pending")
                return
            n += 1
            final_reason = ending
            if final_reason is None and n >= self.cfg.max_wakes:
                final_reason = "max_wakes"
            if final_reason is None and self.wake_real_s and (
                    time.monotonic() + self.budget_reserve_s() > self.deadline):
                # Another wake like the longest so far, after a settle as long as the longest
                # contact's limit, might not end within the budget.
                final_reason = "budget"
                self.budget_closing = self._budget_figures(n)
            outcome = await self._wake(session, n, items, final_reason)
            if outcome is not None:
                self._end(outcome)
                return
            if final_reason is not None:
                self._end(final_reason)
                return

    def _budget_moment(self, wake: int, now: float | None = None) -> dict[str, Any]:
        """Wake ``wake``, the task time and the real seconds spent of the budget."""
        spent = (time.monotonic() if now is None else now) - self.started
        return {"wake": wake, "at": self.world.timeline.stamp(self.world.clock.now_us())["at"],
                "spent_s": round(spent, 3)}

    def _budget_figures(self, wake: int) -> dict[str, Any]:
        """Why the budget made wake ``wake`` the closing one: the real seconds spent and left
        when it began, and the reserve that did not fit in them (twice the longest wake so
        far, and the longest contact limit)."""
        now = time.monotonic()
        return {**self._budget_moment(wake, now),
                "left_s": round(max(0.0, self.deadline - now), 3),
                "reserve_s": round(self.budget_reserve_s(), 3),
                "longest_wake_s": max(self.wake_real_s, default=0.0),
                "longest_contact_limit_s": self.longest_contact_limit_s}

    def budget_reserve_s(self) -> float:
        """The real time kept back for one more wake: twice the longest wake so far, and the
        longest contact limit (a settle before the wake may wait that long)."""
        longest = max(self.wake_real_s, default=0.0)
        return CLOSING_MARGIN * longest + self.longest_contact_limit_s

    def _end(self, reason: str) -> None:
        self.end_reason = reason
        if reason == "user_error":
            self.error_type = "user_error"

    async def _next_wake(self) -> tuple[list[Event] | None, str | None]:
        """The events of the next wake (and, for a final wake, why it is final); None with the
        reason when the run ends without one more wake."""
        world, queue = self.world, self.world.queue
        end = world.end
        idle = 0
        while True:
            await world.settle()
            self._raise_failure()
            if self.turns.ending is not None:
                return None, self.turns.ending
            now = world.clock.now()
            if end is not None and world.clock.reached(end):
                # The task time is past the end: this wake is the final one, with what is due.
                ending = await self._take(world.clock.now_us())
                if ending is not None:
                    return None, ending
                return self._take_arrived(), "end_time"
            event = queue.peek()
            if self.arrived:
                first = now  # what fell due during the last turn is overdue: a wake now
            elif event is None or (end is not None and event.due > end):
                if end is None:
                    return None, self._nothing_reason()
                world.jump_to(world.us(end), "end")
                continue
            else:
                first = max(event.due, now)
            # Everything due in the minute of the first event (or overdue) comes in one wake.
            last_us = world.us((math.floor(first / 60) + 1) * 60) - 1
            reads = len(self.user.records)
            ending = await self._take(last_us if end is None else min(last_us, world.us(end)))
            if ending is not None:
                return None, ending
            if self.arrived:
                # A wake at the end time is the final one.
                return self._take_arrived(), "end_time" if end is not None and \
                    world.clock.reached(end) else None
            if len(self.user.records) > reads:
                idle = 0  # she read in the gap: she may yet reply, so the count starts again
            elif end is None and queue.only_recurring():
                idle += 1
                if idle >= self.cfg.idle_jumps:
                    # Only recurring triggers were left: the timeline names them.
                    world.timeline.add("world_only_repeats", world.clock.now_us(),
                                       jumps=idle, triggers=sorted(
                                           {str(e.data["trigger"]) for e in queue
                                            if e.recurring}))
                    return None, self._nothing_reason()

    async def _take(self, last_us: int) -> str | None:
        """Take the events due up to ``last_us``, each at its mark: world events run, reads
        happen, and the events that wake the agent take effect and wait in ``arrived``.
        Returns the reason the run ends now, or None."""
        world, queue = self.world, self.world.queue
        while (event := queue.peek()) is not None and event.due_us <= last_us:
            queue.pop()
            world.jump_to(event.due_us, event.kind)
            ending = await self._take_one(event)
            if ending is not None:
                return ending
        return None

    async def _take_one(self, event: Event) -> str | None:
        """Carry out one event at its mark (the clock is there); the reason the run ends now,
        or None."""
        if self.world.run_event(event):
            self._raise_failure()
            return None
        if event.kind == "user_line" and event.data.get("compose"):
            # She speaks first, in her own words: her sim writes her opening now.
            answer = await self.user.compose_opening()
            if answer.error is not None:
                self.error = answer.error
                return "user_error"
            if answer.nothing or not answer.text.strip():
                return None
            event.data["text"] = answer.text.strip()
        if event.kind == "read":
            record = await self.user.read(event)
            if record is not None and record["outcome"] == "error":
                self.error = record.get("error")
                return "user_error"
            if record is not None and record["outcome"] == "done" and self.user.done_ends_run:
                self.done_at_once = True
                return "user_done"
            return None
        self._arrive(event)
        return None

    def _arrive(self, event: Event) -> None:
        """A waking event falls due: what it does in the world happens now (a contact's answer
        lands in its app, a check is due, her line is written); the agent is told at its next
        wake."""
        world = self.world
        if event.kind == "contact_reply":
            world.contacts.deliver(event)
        elif event.kind == "check":
            world.chat.check_due(event)
        elif event.kind == "user_line":
            kind = "opening" if event.data.get("opening") else "line"
            self.user.said(event.due, kind, event.data["text"])
        self.arrived.append(event)

    def _take_arrived(self) -> list[Event]:
        items, self.arrived = self.arrived, []
        return items

    def pending(self) -> dict[str, dict[str, Any]]:
        """What was left when the run ended: counts and the first items of each kind."""
        world = self.world
        tz = world.timezone
        kinds: dict[str, list[dict[str, Any]]] = {
            "held_replies": [], "unread_by_user": [], "user_lines_not_delivered": [],
            "alerts_never_delivered": [], "checks_not_due": [], "contact_replies_in_progress": []}
        # What took effect but never reached the agent (it fell due during its last turn), then
        # what never fell due.
        for event in [*self.arrived, *world.queue]:
            at = times.iso(event.due, tz)
            if event.kind == "user_reply":
                kinds["held_replies"].append({"read": event.data["record"]["read"], "at": at,
                                              "text": event.data["text"]})
            elif event.kind == "user_line":
                kinds["user_lines_not_delivered"].append({"at": at, "text": event.data["text"]})
            elif event.kind == "alert":
                kinds["alerts_never_delivered"].append({"at": at, "source": event.data["source"],
                                                        "text": event.data["text"]})
            elif event.kind == "contact_reply":
                call = event.data["call"]
                kinds["alerts_never_delivered"].append({"at": at, "contact": call.contact,
                                                        "text": call.text or ""})
            elif event.kind == "trigger" and any(
                    a.kind == "notify" and a.to == "agent"
                    for a in world.triggers.runs[event.data["trigger"]].spec.actions):
                kinds["alerts_never_delivered"].append({"at": at, "trigger": event.data["trigger"]})
            elif event.kind == "check":
                check = event.data["check"]
                kinds["alerts_never_delivered" if check.status == "due" else "checks_not_due"] \
                    .append({"check": check.number, "at": at, "note": check.note})
        kinds["unread_by_user"] = [{"n": m.number, **world.timeline.stamp(m.at_us),
                                    "wake": m.wake, "text": m.text, "leftover": m.leftover}
                                   for m in world.chat.sent_by(self.cfg.seat)
                                   if m.read_at_us is None]
        kinds["contact_replies_in_progress"] = [{k: v for k, v in c.items() if k != "key"}
                                                for c in world.contacts.state()]
        return {kind: {"count": len(items), "first": items[:PENDING_LISTED]}
                for kind, items in kinds.items()}

    def _nothing_reason(self) -> str:
        pending = self.pending()
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
        sources = [self._tell(event, n, now_us) for event in items]
        lines = [s.pop("line") for s in sources]
        if n == 1 and not self.ctx.task.system_prompt:
            lines.insert(0, prompts.step_line(self._rules()))
            sources.insert(0, {"kind": "rules", "from": "step", "text": self._rules()})
        if self.cfg.reminder:
            lines.append(prompts.step_line(prompts.reminder_text(self.cfg.reminder)))
            sources.append({"kind": "reminder", "from": "step", "text": self.cfg.reminder})
        if final_reason is not None:
            notice = self._final_notice(final_reason)
            lines.append(prompts.step_line(notice))
            sources.append({"kind": "final_notice", "from": "step", "text": notice})
        entry = world.timeline.add("wake", now_us, wake=n, final=final_reason is not None,
                                   sources=sources)
        done_reply = any(e.kind == "user_reply" and e.data["done"] for e in items)
        opened = self.open_wake = OpenWake(n, entry, time.monotonic())
        assert self.folder is not None
        self.folder.begin(session.trace.messages)
        reply = await self._turn(session, "\n".join(lines), "turn")
        opened.calls += world.take_tool_calls()
        if reply.text.strip():
            opened.notes.append(reply.text)
        wrote = any(m.wake == n for m in world.chat.sent_by(self.cfg.seat)) or \
            n in world.chat.quiet_wakes
        if self.cfg.nudge and not reply.stopped and not wrote and reply.text.strip():
            opened.nudged = True
            self.nudges += 1
            reply = await self._turn(session, prompts.step_line(self._nudge_text()), "nudge",
                                     tool_choice=self.cfg.nudge_tool_choice or None)
            calls = world.take_tool_calls()
            opened.calls += calls
            opened.nudge_led_to = self._nudge_outcome(n, calls, reply)
            if reply.text.strip():
                opened.notes.append(reply.text)
        mine = self._close_wake(opened)
        log.debug("always_on.wake", episode_id=self.ctx.info.episode_id, wake=n,
                  sources=len(items), tool_calls=len(opened.calls), nudged=opened.nudged,
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
        if self.turns.ending is not None:
            return self.turns.ending
        if done_reply and self.user.done_ends_run:
            return "user_done"
        return None

    def _nudge_outcome(self, n: int, calls: list[dict[str, Any]], reply: Reply) -> str:
        """What the nudge turn of wake ``n`` led to: ``message`` (it wrote to her),
        ``stay_quiet``, ``tools`` (other tools only), ``reply`` (another private note),
        ``stopped`` (its turn failed) or ``nothing``."""
        if any(m.wake == n and m.phase == "nudge" for m in self.world.chat.sent_by(self.cfg.seat)):
            return "message"
        if any(c["name"] == "stay_quiet" and "error" not in c for c in calls):
            return "stay_quiet"
        if reply.stopped:
            return "stopped"
        if calls:
            return "tools"
        return "reply" if reply.text.strip() else "nothing"

    def _close_wake(self, opened: OpenWake, *, cut: bool = False) -> list[Sent]:
        """Record the wake's end (its turns done, or ``cut`` by the budget) and move the world
        on to the next wake; the agent's messages of the wake."""
        world, n, entry = self.world, opened.n, opened.entry
        self.open_wake = None
        end_us = world.clock.now_us()
        mine = [m for m in world.chat.sent_by(self.cfg.seat) if m.wake == n]
        if cut:
            opened.calls += world.take_tool_calls()
            for message in mine:
                message.leftover = True
        entry.update(end_at=world.timeline.stamp(end_us)["at"],
                     end_t=world.timeline.stamp(end_us)["t"],
                     sent=[m.number for m in mine],
                     quiet=n in world.chat.quiet_wakes, nudged=opened.nudged,
                     tool_calls=opened.calls, private_note="\n\n".join(opened.notes))
        if cut:
            entry["cut"] = True
        # Real time is kept beside the timeline, which a seed replays to the byte.
        self.wake_real_s.append(round(time.monotonic() - opened.t0, 3))
        if opened.nudged:
            entry["nudge"] = {"from": "step", "text": self._nudge_text(),
                              "led_to": opened.nudge_led_to or ("cut" if cut else "nothing"),
                              "sent": [m.number for m in mine if m.phase == "nudge"]}
        if self.folder is not None and not cut:
            self.folder.end(entry, [(m.number, m.at_us, m.text) for m in mine])
        self.wakes.append(entry)
        world.timeline.gap()
        # What happens from here until the next wake counts for that wake.
        world.enter("before_turn", wake=n + 1)
        return mine

    async def _turn(self, session: ChatSession, message: str, phase: str, *,
                    tool_choice: str | None = None) -> Reply:
        world = self.world
        world.enter(phase)
        assert self.folder is not None
        context = self.folder.context(session.trace.messages, message)
        if self.rate == 0:
            return await session.turn(message, tool_choice=tool_choice, context=context)
        # The clock runs while the agent thinks; the world goes on at its own times.
        return await self.turns.turn(session, self.rate, message, tool_choice=tool_choice,
                                     context=context)

    def _tell(self, event: Event, n: int, wake_us: int) -> dict[str, Any]:
        """What one event that took effect tells the agent at wake ``n``: the wake's source,
        with the line it reads. One that reaches it in a later minute than it fell due (it
        came while a turn ran on) is ``late``, and its line says both times."""
        world = self.world
        tz = world.timezone
        due = event.due
        late = math.floor(wake_us / 60e6) > math.floor(event.due_us / 60e6)
        early = wake_us < event.due_us
        self.late += late
        self.early += early
        source: dict[str, Any] = {"kind": event.kind, "from": "world",
                                  **_due(world, event.due_us)}
        when = times.readable(due, tz)
        if late:
            when = prompts.late_when(when, times.local(wake_us / 1e6, tz))
        name = self.person.name
        if event.kind == "user_line":
            kind = "opening" if event.data.get("opening") else "line"
            source.update(kind=kind, **{"from": "user"}, text=event.data["text"])
            if "trigger" in event.data:  # a line a trigger made her write
                source.update(trigger=event.data["trigger"], fire=event.data["fire"])
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
            call = event.data["call"]
            spec: Contact = world.contacts.specs[call.contact]
            who = f"{spec.name} <{spec.address}>" if spec.address else spec.name
            source.update(text=call.text or "", contact=call.contact, call=call.number)
            source["line"] = prompts.contact_line(when, spec.channel, who, call.text)
        else:  # check
            check = event.data["check"]
            source.update(check=check.number, text=check.note)
            source["line"] = prompts.check_line(when, check.number, check.note)
        source["late"] = bool(late)
        return source

    # -- what the step says -------------------------------------------------------------------

    def _queue_opening(self) -> None:
        """Her opening line, at her opening's time (else the start): the task's prompt, else
        her opening's words, else the scenario's opening; with an opening of hers that gives
        no words, her sim writes it then."""
        world, spec = self.world, self.person.opening
        text = prompts.opening_text(self.ctx.task, self.scenario,
                                    spec.text if spec is not None else "")
        at = world.start if spec is None or not spec.at else \
            times.parse_when(spec.at, world.timezone, world.start)
        if text:
            world.queue.push(Event(world.us(at), "user_line", key=("opening",),
                                   data={"text": text, "opening": True}))
        elif spec is not None:
            world.queue.push(Event(world.us(at), "user_line", key=("opening",),
                                   data={"text": "", "opening": True, "compose": True}))

    def _deny_list(self) -> list[str]:
        """The step's deny-list and the task's; a task from a taskset file that names the
        agent's channel to the user is refused here (a scenario's tasks were, at load)."""
        task = self.ctx.task
        extra = list(task.info.get("deny_tools") or ())
        problems = deny_problems(extra, f"task {task.idx} info.deny_tools",
                                 stay_quiet=self.cfg.stay_quiet, checks=self.checks)
        if problems:
            raise InterplayError(problems[0])
        return [*self.cfg.deny_tools, *extra]

    def _agent_task(self) -> Task:
        task = self.ctx.task
        system = prompts.agent_system_prompt(task.system_prompt, self._rules())
        return Task(idx=task.idx, prompt=None, system_prompt=system, answer=task.answer,
                    info=task.info)

    def _rules(self) -> str:
        return prompts.rules_text(self.person.name, self.world.timezone, checks=self.checks,
                                  stay_quiet=self.cfg.stay_quiet,
                                  min_check_interval=self.cfg.min_check_interval)

    def _nudge_text(self) -> str:
        return prompts.nudge_text(self.person.name, self.cfg.stay_quiet)

    def _final_notice(self, reason: str) -> str:
        return prompts.final_notice(reason, self.person.name, self.world.clock.now(),
                                    self.world.timezone, self.cfg.final_check_in)

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


@attrs.define(eq=False)
class OpenWake:
    """A wake whose turns are running: what it has done so far."""

    n: int
    entry: dict[str, Any]
    t0: float
    calls: list[dict[str, Any]] = attrs.Factory(list)
    notes: list[str] = attrs.Factory(list)
    nudged: bool = False
    #: What its nudge turn led to, once that turn has ended (see Loop._nudge_outcome).
    nudge_led_to: str | None = None


def _refuse_clashes(seat: str, seat_tools: Sequence[Tool], world_tools: Sequence[Tool]) -> None:
    """A tool the seat already has (the env's, made per episode) may not take the name of one
    of the world's: the model's call would reach one of the two, and for a channel tool
    (``message_user``, ...) something other than her chat. Refused before the first turn."""
    mine = {t.name for t in world_tools}
    for tool in seat_tools:
        if tool.name in CHANNEL_TOOLS:
            raise InterplayError(f"seat {seat!r} has a tool {tool.name!r} of the env's, a name "
                                 f"always_on keeps for the agent's channel to the user "
                                 f"({', '.join(sorted(CHANNEL_TOOLS))}); rename the env's tool")
        if tool.name in mine:
            raise InterplayError(f"seat {seat!r} has a tool {tool.name!r} of the env's and an "
                                 f"app of the scenario has one of that name; rename one of "
                                 f"them")


def _due(world: World, due_us: int) -> dict[str, Any]:
    stamp = world.timeline.stamp(due_us)
    return {"due": stamp["at"], "due_t": stamp["t"]}


def _world_rng(ctx: EpisodeContext) -> random.Random:
    """The world's own generator, seeded from the episode's: its draws (delays) never shift
    the episode's other uses of ``ctx.rng``."""
    return random.Random(ctx.rng.getrandbits(64))
