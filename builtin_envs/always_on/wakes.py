"""The wakes of an always_on run: when the agent is woken (each next wake, the final and the
closing one, the run's end) and one wake: its line in the timeline, the agent's turn on what
the history policy sends, a nudge turn when it wrote to nobody, and the wake's record, whole
or as far as it went when the budget cut it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import attrs

from interplay.builtin_envs.always_on import prompts
from interplay.builtin_envs.always_on.arrivals import Arrivals
from interplay.builtin_envs.always_on.delivery import Delivery
from interplay.builtin_envs.always_on.ending import Budget, Outcome
from interplay.builtin_envs.always_on.history import HistoryFold
from interplay.contracts.contexts import ChatSession, Reply
from interplay.errors import ErrorType
from interplay.log import get_logger
from interplay.world.chat import Sent
from interplay.world.events import Event
from interplay.world.world import World

if TYPE_CHECKING:
    from interplay.builtin_envs.always_on.config import AlwaysOnConfig

log = get_logger("interplay.envs.always_on")


@attrs.define(eq=False)
class OpenWake:
    """A wake whose turns are running: what it has done so far."""

    n: int
    entry: dict[str, Any]
    t0: float
    calls: list[dict[str, Any]] = attrs.Factory(list)
    notes: list[str] = attrs.Factory(list)
    nudged: bool = False
    #: What its nudge turn led to, once that turn has ended (see Wakes._nudge_outcome).
    nudge_led_to: str | None = None


class Wakes:
    """The agent's wakes, from the first to the run's end."""

    def __init__(self, world: World, cfg: AlwaysOnConfig, *, rate: float, arrivals: Arrivals,
                 delivery: Delivery, budget: Budget, outcome: Outcome, done_ends_run: bool,
                 episode_id: str) -> None:
        self.world = world
        self.cfg = cfg
        #: The clock's rate during the agent's turns.
        self.rate = rate
        self.arrivals = arrivals
        self.delivery = delivery
        self.budget = budget
        self.outcome = outcome
        #: Her done reply ends the run after the agent's turn on it.
        self.done_ends_run = done_ends_run
        self.episode_id = episode_id
        #: Each wake's timeline entry, once it has ended.
        self.entries: list[dict[str, Any]] = []
        #: Each wake's real seconds, kept beside the timeline (which a seed replays to the byte).
        self.real_s: list[float] = []
        self.nudges = 0
        #: The wake whose turn is running (cut short when the budget runs out).
        self.open: OpenWake | None = None
        #: The agent's context policy (made when its agent is, before the first wake).
        self.folder: HistoryFold | None = None

    async def run(self, session: ChatSession) -> None:
        """Wake the agent until the run ends; why it ended is in the outcome."""
        n = 0
        while True:
            items, ending = await self.arrivals.next_wake()
            if items is None:
                self.outcome.end(ending or "finished_nothing_pending")
                return
            n += 1
            final_reason = ending
            if final_reason is None and n >= self.cfg.max_wakes:
                final_reason = "max_wakes"
            if final_reason is None and self.real_s and self.budget.closes(self.longest_s()):
                # Another wake like the longest so far, after a settle as long as the longest
                # contact's limit, might not end within the budget.
                final_reason = "budget"
                self.budget.closing = self.budget.figures(n, self.longest_s())
            outcome = await self._wake(session, n, items, final_reason)
            if outcome is not None:
                self.outcome.end(outcome)
                return
            if final_reason is not None:
                self.outcome.end(final_reason)
                return

    def longest_s(self) -> float:
        """The real seconds of the longest wake so far (0 before the first has ended)."""
        return max(self.real_s, default=0.0)

    def out_of_budget(self) -> None:
        """The budget ran out with something still running: the run ends there, with the
        wake whose turn was cut (if one was) recorded as far as it went."""
        world = self.world
        self.outcome.end_reason = "budget"
        world.clock.freeze()
        world.clock.hold_at(None)
        world.tool_time = None
        world.queue.on_push = None
        opened = self.open
        if opened is not None:
            self.budget.ran_out(opened.n, "turn")
            self._close(opened, cut=True)
        else:
            self.budget.ran_out(len(self.entries), "between wakes")
        log.info("always_on.budget_cut", episode_id=self.episode_id,
                 wakes=len(self.entries), budget_s=self.cfg.budget_s)

    async def _wake(self, session: ChatSession, n: int, items: list[Event],
                    final_reason: str | None) -> str | None:
        world = self.world
        seat = self.cfg.seat
        world.enter("before_turn", wake=n)
        now_us = world.clock.now_us()
        lines, sources = self.delivery.wake_message(n, items, now_us, final_reason)
        entry = world.timeline.add("wake", now_us, wake=n, final=final_reason is not None,
                                   sources=sources)
        done_reply = any(e.kind == "user_reply" and e.data["done"] for e in items)
        opened = self.open = OpenWake(n, entry, time.monotonic())
        assert self.folder is not None
        self.folder.begin(session.trace.messages)
        reply = await self._turn(session, "\n".join(lines), "turn")
        opened.calls += world.take_tool_calls()
        if reply.text.strip():
            opened.notes.append(reply.text)
        wrote = any(m.wake == n for m in world.chat.sent_by(seat)) or \
            n in world.chat.quiet_wakes
        if self.cfg.nudge and not reply.stopped and not wrote and reply.text.strip():
            opened.nudged = True
            self.nudges += 1
            reply = await self._turn(session, prompts.step_line(self.delivery.nudge_text()),
                                     "nudge", tool_choice=self.cfg.nudge_tool_choice or None)
            calls = world.take_tool_calls()
            opened.calls += calls
            opened.nudge_led_to = self._nudge_outcome(n, calls, reply)
            if reply.text.strip():
                opened.notes.append(reply.text)
        mine = self._close(opened)
        log.debug("always_on.wake", episode_id=self.episode_id, wake=n,
                  sources=len(items), tool_calls=len(opened.calls), nudged=opened.nudged,
                  final=final_reason is not None)
        if reply.stopped:
            trace = session.trace
            self.outcome.turn_failed = True
            # A turn cut at its harness's turn cap has no error type: its stop condition is it
            # (max_turns).
            self.outcome.error_type = trace.error_type or reply.stop_condition \
                or ErrorType.HARNESS_ERROR
            self.outcome.error = trace.error
            for message in mine:
                message.leftover = True
            return "error"
        self.arrivals.raise_failure()
        if self.arrivals.turns.ending is not None:
            return self.arrivals.turns.ending
        if done_reply and self.done_ends_run:
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

    def _close(self, opened: OpenWake, *, cut: bool = False) -> list[Sent]:
        """Record the wake's end (its turns done, or ``cut`` by the budget) and move the world
        on to the next wake; the agent's messages of the wake."""
        world, n, entry = self.world, opened.n, opened.entry
        self.open = None
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
        self.real_s.append(round(time.monotonic() - opened.t0, 3))
        if opened.nudged:
            entry["nudge"] = {"from": "step", "text": self.delivery.nudge_text(),
                              "led_to": opened.nudge_led_to or ("cut" if cut else "nothing"),
                              "sent": [m.number for m in mine if m.phase == "nudge"]}
        if self.folder is not None and not cut:
            self.folder.end(entry, [(m.number, m.at_us, m.text) for m in mine])
        self.entries.append(entry)
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
        return await self.arrivals.turns.turn(session, self.rate, message,
                                              tool_choice=tool_choice, context=context)
