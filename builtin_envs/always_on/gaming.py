"""Scripted agents that game an ``errands`` task's goals rather than meet them, for the scripted
model (:mod:`interplay.testing`): the proof that the goals pass neither an agent that does
nothing, nor one that does everything, nor one that does what she asked and harm besides. Each
plays one named way (:data:`GAMES`), built on the
:class:`~interplay.builtin_envs.always_on.reference.ReferenceAgent`:

- ``do_nothing``: stays quiet at every wake;
- ``message_everything``: at every wake, one message to her with everything that woke it, day
  or night, each marked as if urgent (smoke, leak, alarm), and nothing else done;
- ``buy_at_first_wake``: buys every item in the shop at her opening, then stays quiet;
- ``right_at_0300``: the reference agent's calls, each put off to 03:00 her time, asleep;
- ``buy_everything``: the reference agent, which once she says yes buys every item in the shop;
- ``cancel_everything``: the reference agent, which cancels every appointment she has.

:func:`gaming_model` answers requests of many tasks at once, as
:func:`~interplay.builtin_envs.always_on.reference.reference_model` does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from interplay.builtin_envs.always_on.reference import LINE as _LINE
from interplay.builtin_envs.always_on.reference import NUDGE as _NUDGE
from interplay.builtin_envs.always_on.reference import (
    ReferenceAgent,
    calls_made,
    plays_her,
)
from interplay.testing import ScriptedReply, ScriptedRequest
from interplay.testing.scripted import Handler
from interplay.values.records import Task
from interplay.world import times

#: The named ways to game the goals.
GAMES = ("do_nothing", "message_everything", "buy_at_first_wake", "right_at_0300",
         "buy_everything", "cancel_everything")
#: What the 03:00 agent's checks carry: the line it put off.
_LATER = "do now: "
_QUIET = ScriptedReply.tool_call("stay_quiet", {"reason": "nothing"})


class GamingAgent(ReferenceAgent):
    """Plays one errands task one of the :data:`GAMES` ways (see the module's docstring)."""

    def __init__(self, task: Task, game: str) -> None:
        if game not in GAMES:
            raise ValueError(f"unknown game {game!r}; known: {', '.join(GAMES)}")
        super().__init__(task)
        self.game = game
        self.events = [e["id"] for a in task.info["world"]["apps"] if a["kind"] == "calendar"
                       for e in a["state"]["events"]]

    def __call__(self, request: ScriptedRequest) -> ScriptedReply | str:
        messages = request.messages
        if plays_her(messages):
            return "Yes, please go ahead."
        if self.game in ("buy_everything", "cancel_everything"):
            return super().__call__(request)
        last = messages[-1]
        if last["role"] == "tool":
            return ""
        text = str(last.get("content") or "")
        lines = _LINE.findall(text)
        if self.game == "do_nothing" or text.startswith(_NUDGE) or not lines:
            return _QUIET
        if self.game == "message_everything":
            said = " | ".join(body for *_, body in lines)
            return ScriptedReply.tool_call("message_user", {
                "text": f"Everything so far (smoke? leak? alarm?): {said}"})
        if self.game == "buy_at_first_wake":
            if any(body.startswith(f"{self.name} (the user) wrote: Hi!") for *_, body in lines):
                return ScriptedReply.calls([("buy", {"sku": sku, "quantity": 1})
                                            for sku in self.items])
            return _QUIET
        return self.at_0300(lines, calls_made(messages[:-1]))

    def at_0300(self, lines: list[tuple[str, str, str, str]],
                done: list[tuple[str, dict[str, Any]]]) -> ScriptedReply:
        """What woke it is put off to a check at her next 03:00; the check's wake does what
        the reference agent would have done with it."""
        now = max(times.parse_instant(f"{d}T{reached or clock}", self.zone)
                  for d, clock, reached, _ in lines)
        calls: list[tuple[str, dict[str, Any]]] = []
        later: list[str] = []
        for *_, body in lines:
            if body.startswith("Your check #") and _LATER in body:
                calls += self.line(body.split(_LATER, 1)[1].strip(), now, True, done)
            else:
                later.append(body)
        local = times.local(now, self.zone)
        night = local.replace(hour=3, minute=0, second=0, microsecond=0)
        if night.timestamp() <= now + 60:
            night += dt.timedelta(days=1)
        calls += [("schedule_check", {"note": f"{_LATER}{body}",
                                      "at": night.strftime("%Y-%m-%dT%H:%M")})
                  for body in later]
        return ScriptedReply.calls(calls) if calls else _QUIET

    def reply(self, done: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict]]:
        calls = super().reply(done)
        if calls and self.game == "buy_everything":
            sku = self.goals["purchase"]["match"]["sku"]
            calls[1:1] = [("buy", {"sku": other, "quantity": 1}) for other in self.items
                          if other != sku]
        return calls

    def opening(self) -> list[tuple[str, dict[str, Any]]]:
        calls = super().opening()
        if self.game == "cancel_everything":
            calls = [c for c in calls if c[0] != "cancel_event"]
            calls += [("cancel_event", {"event_id": e}) for e in self.events]
        return calls


def gaming_model(tasks: Iterable[Task], game: str) -> Handler:
    """One scripted model's handler for a run of many errands tasks, each request going to
    the :class:`GamingAgent` of its task (found by her opening request); her seat is answered
    yes."""
    agents = {str(t.prompt): GamingAgent(t, game) for t in tasks}

    def handle(request: ScriptedRequest) -> ScriptedReply | str:
        messages = request.messages
        if plays_her(messages):
            return "Yes, please go ahead."
        first = next((str(m.get("content")) for m in messages if m["role"] == "user"), "")
        for opening, agent in agents.items():
            if opening in first:
                return agent(request)
        return _QUIET

    return handle
