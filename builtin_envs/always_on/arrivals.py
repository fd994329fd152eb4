"""The clock and the queue of an always_on run: when the next wake is and what it carries.

Between wakes the world settles, the clock jumps to the next event (never past one), and
everything due in that minute is taken at its mark: world events run, she reads, and what wakes
the agent takes effect and waits (``arrived``) to be told at the next wake. While a turn runs on
a running clock, :mod:`.clock` decides when each event is taken and this module what it does.
What is left when the run ends is :meth:`Arrivals.pending`.
"""

from __future__ import annotations

import math
from typing import Any

from interplay.builtin_envs.always_on.clock import TurnClock
from interplay.builtin_envs.always_on.ending import Outcome
from interplay.builtin_envs.user_sim_step import UserSide
from interplay.world import times
from interplay.world.events import Event
from interplay.world.world import World

#: Items of each pending kind listed by name (the rest are counted).
PENDING_LISTED = 20


class Arrivals:
    """The events of each wake, taken from the world's queue at their marks."""

    def __init__(self, world: World, user: UserSide, outcome: Outcome, *, seat: str,
                 idle_jumps: int) -> None:
        self.world = world
        self.user = user
        self.outcome = outcome
        #: The agent's seat (what of the chat is its, for :meth:`pending`).
        self.seat = seat
        self.idle_jumps = idle_jumps
        #: Events that fell due and took effect, waiting for the next wake to tell the agent.
        self.arrived: list[Event] = []
        #: When the world acts while a turn runs on a running clock.
        self.turns = TurnClock(world, self.take_one)

    async def next_wake(self) -> tuple[list[Event] | None, str | None]:
        """The events of the next wake (and, for a final wake, why it is final); None with the
        reason when the run ends without one more wake."""
        world, queue = self.world, self.world.queue
        end = world.end
        idle = 0
        while True:
            await world.settle()
            self.raise_failure()
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
                if idle >= self.idle_jumps:
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
            ending = await self.take_one(event)
            if ending is not None:
                return ending
        return None

    async def take_one(self, event: Event) -> str | None:
        """Carry out one event at its mark (the clock is there); the reason the run ends now,
        or None."""
        if self.world.run_event(event):
            self.raise_failure()
            return None
        if event.kind == "user_line" and event.data.get("compose"):
            # She speaks first, in her own words: her sim writes her opening now.
            answer = await self.user.compose_opening()
            if answer.error is not None:
                self.outcome.error = answer.error
                return "user_error"
            if answer.nothing or not answer.text.strip():
                return None
            event.data["text"] = answer.text.strip()
        if event.kind == "read":
            record = await self.user.read(event)
            if record is not None and record["outcome"] == "error":
                self.outcome.error = record.get("error")
                return "user_error"
            if record is not None and record["outcome"] == "done" and self.user.done_ends_run:
                self.outcome.done_at_once = True
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
                                   for m in world.chat.sent_by(self.seat)
                                   if m.read_at_us is None]
        kinds["contact_replies_in_progress"] = [{k: v for k, v in c.items() if k != "key"}
                                                for c in world.contacts.state()]
        return {kind: {"count": len(items), "first": items[:PENDING_LISTED]}
                for kind, items in kinds.items()}

    def _nothing_reason(self) -> str:
        pending = self.pending()
        return "stuck" if any(p["count"] for p in pending.values()) else \
            "finished_nothing_pending"

    def raise_failure(self) -> None:
        """A scenario error the world found mid-run (a trigger loop), raised here."""
        if self.world.failure is not None:
            raise self.world.failure
