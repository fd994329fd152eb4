"""A scripted agent that plays an ``errands`` task the way its goals ask, for the scripted model
(:mod:`interplay.testing`): the proof that a generated scenario's goals can all be met, a
baseline to set a model against, and, with ``mistakes``, the wrong ways a test shows each goal
catches.

It knows the task (its goals and her hours, as an oracle does) and reads each wake from the
request it is sent, as any agent would: the lines of the wake, and its own earlier tool calls
in the conversation (a scripted endpoint is sent the whole conversation). Each wake is one
reply of tool calls, then an empty reply that ends the turn:

- her opening: e-mail the contact, ask her about the purchase, do the cancellation or the note;
- news: passed on at once when she is up, else a check at her waking that passes it on;
- urgent news: passed on at once, night or not;
- the contact's answer: the visit put in her calendar;
- her reply to the question about the purchase: bought;
- her lines: answered; anything else: ``stay_quiet``.

``mistakes`` (any of :data:`MISTAKES`) make it go wrong in one named way each.
:func:`reference_model` answers requests of many tasks at once (each request is matched to its
task by her opening request), and plays the user and the contacts when they are played by a
model (she says yes).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from interplay.testing import ScriptedReply, ScriptedRequest
from interplay.testing.scripted import Handler
from interplay.values.records import Task
from interplay.world import Schedule, times

#: The named ways to get a goal wrong.
MISTAKES = frozenset({
    "early_purchase",    # buy at once, without asking her
    "message_at_night",  # pass news on the moment it comes, asleep or not
    "relay_late",        # pass news that came at night on an hour after the time allowed
    "ignore_contact",    # leave the contact's answer in the inbox
    "skip_keep",         # neither cancel the appointment nor keep the note
    "ignore_urgent",     # let urgent news wait for her morning
})

_LINE = re.compile(r"^\[\w{3} (\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}) [^\];]+"
                   r"(?:; reached you at (\d{2}:\d{2}))?\] (.*)$", re.M)
_SLOT = re.compile(r"\((\d{4}-\d{2}-\d{2}) (\d{2}:\d{2})\)")
_NUDGE = "[always_on] Your reply above is a private note"

class ReferenceAgent:
    """Plays one errands task (see the module's docstring)."""

    def __init__(self, task: Task, mistakes: Collection[str] = ()) -> None:
        unknown = set(mistakes) - MISTAKES
        if unknown:
            raise ValueError(f"unknown mistakes {sorted(unknown)}; known: {sorted(MISTAKES)}")
        self.mistakes = frozenset(mistakes)
        self.goals = {g["id"]: g for g in task.info["goals"]}
        world, user = task.info["world"], task.info["user"]
        self.zone = world["timezone"]
        self.schedule = Schedule.from_plain(user)
        self.name = user["name"]
        self.items = next(a["state"]["items"] for a in world["apps"] if a["kind"] == "shop")
        contact = self.goals["contact"]["contact"]
        self.contact = next(c for c in world["contacts"] if c["name"] == contact)

    def __call__(self, request: ScriptedRequest) -> ScriptedReply | str:
        messages = request.messages
        if _plays_her(messages):
            return "Yes, please go ahead."
        last = messages[-1]
        if last["role"] == "tool":
            return ""  # the wake's calls are made: the turn ends, writing nothing private
        text = str(last.get("content") or "")
        if text.startswith(_NUDGE):
            return ScriptedReply.tool_call("stay_quiet", {"reason": "nothing to add"})
        done = _calls(messages[:-1])
        calls = self.wake(text, done)
        return ScriptedReply.calls(calls) if calls else ScriptedReply.tool_call(
            "stay_quiet", {"reason": "nothing for her"})

    # -- one wake -------------------------------------------------------------------------

    def wake(self, text: str, done: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict]]:
        lines = [(date, clock, reached, body) for date, clock, reached, body in
                 _LINE.findall(text)]
        if not lines:
            return []
        now = max(times.parse_instant(f"{date}T{reached or clock}", self.zone)
                  for date, clock, reached, _ in lines)
        awake = self.schedule.state_at(now) != "asleep"
        calls: list[tuple[str, dict[str, Any]]] = []
        for _, _, _, body in lines:
            calls += self.line(body, now, awake, done)
        if "This is your last turn" in text and awake and not calls:
            calls.append(("message_user", {"text": "That is all from me for now."}))
        return calls

    def line(self, body: str, now: float, awake: bool,
             done: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
        goals, user = self.goals, f"{self.name} (the user)"
        if body.startswith(f"{user} wrote: Hi! Here is what I need"):
            return self.opening()
        if body.startswith(f"{user} wrote:"):
            return [("message_user", {"text": "Noted; everything you asked for is in hand."})]
        if body.startswith(f"{user} replied"):
            return self.reply(done)
        relay = goals["relay"]
        if body.startswith("Alert from") and relay["text"] in body:
            return self.news(body, now, awake)
        urgent = goals.get("urgent")
        if urgent is not None and body.startswith("Alert from") and \
                urgent["text"].casefold() in body.casefold():
            if "ignore_urgent" in self.mistakes and not awake:
                return self.later(body, self.schedule.next_awake(now))
            return [("message_user", {"text": f"Urgent: {body.removeprefix('Alert from ')}"})]
        if body.startswith("Your check #") and "pass on:" in body:
            return [("message_user", {"text": body.split("pass on:", 1)[1].strip()})]
        if body.startswith("Email from") and self.contact["address"] in body:
            return self.visit(body)
        return []

    def opening(self) -> list[tuple[str, dict[str, Any]]]:
        goals, calls = self.goals, []
        contact = self.contact
        calls.append(("send_email", {"to": contact["address"], "subject": "A visit",
                                     "body": f"Hello {contact['name']}, when could you come "
                                             f"by? Best, {self.name}"}))
        sku = goals["purchase"]["match"]["sku"]
        item = self.items[sku]
        if "early_purchase" in self.mistakes:
            calls.append(("buy", {"sku": sku, "quantity": 1}))
        else:
            calls.append(("message_user", {"text": f"Shall I buy the {item['name']} for "
                                                   f"{item['price']}? Just say yes."}))
        keep = goals.get("keep")
        if keep is not None and "skip_keep" not in self.mistakes:
            if keep["expect"] == "absent":
                calls.append(("cancel_event", {"event_id": keep["match"]["id"]}))
            else:
                calls.append(("add_note", {"text": keep["match"]["text"].strip("*")}))
        return calls

    def reply(self, done: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict]]:
        sku = self.goals["purchase"]["match"]["sku"]
        asked = any(name == "message_user" and "Shall I buy" in str(args.get("text"))
                    for name, args in done)
        bought = any(name == "buy" for name, _ in done)
        if asked and not bought:
            return [("buy", {"sku": sku, "quantity": 1}),
                    ("message_user", {"text": "Bought it, thanks."})]
        return []

    def news(self, body: str, now: float, awake: bool) -> list[tuple[str, dict[str, Any]]]:
        text = body.removeprefix("Alert from ")
        if awake or "message_at_night" in self.mistakes:
            return [("message_user", {"text": text})]
        up = self.schedule.next_awake(now)
        if up is not None and "relay_late" in self.mistakes:
            up += (self.goals["relay"]["minutes"] + 60) * 60
        return self.later(text, up)

    def later(self, text: str, at: float | None) -> list[tuple[str, dict[str, Any]]]:
        """A check at ``at`` that passes ``text`` on."""
        if at is None:
            return []
        when = dt.datetime.fromtimestamp(at, times.zone(self.zone)).strftime("%Y-%m-%dT%H:%M")
        return [("schedule_check", {"note": f"pass on: {text}", "at": when})]

    def visit(self, body: str) -> list[tuple[str, dict[str, Any]]]:
        slot = _SLOT.search(body)
        if slot is None or "ignore_contact" in self.mistakes:
            return []
        start = f"{slot[1]}T{slot[2]}"
        end = (dt.datetime.fromisoformat(start) + dt.timedelta(hours=1)).strftime(
            "%Y-%m-%dT%H:%M")
        return [("add_event", {"title": f"{self.contact['name']} comes by", "start": start,
                               "end": end, "where": "home"})]


def _plays_her(messages: list[dict[str, Any]]) -> bool:
    """Is this a request of her seat (the ``llm`` user sim's)?"""
    return bool(messages) and messages[0]["role"] == "system" and \
        "role-playing a user" in str(messages[0].get("content"))


def _calls(messages: Iterable[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the agent made in the conversation so far, in order."""
    import json

    out = []
    for m in messages:
        for call in m.get("tool_calls") or ():
            function = call.get("function") or {}
            try:
                args = json.loads(function.get("arguments") or "{}")
            except ValueError:
                args = {}
            out.append((str(function.get("name")), args))
    return out


def reference_model(tasks: Iterable[Task], mistakes: Collection[str] = ()) -> Handler:
    """One scripted model's handler for a run of many errands tasks: each request of the
    agent's goes to the :class:`ReferenceAgent` of its task (found by her opening request in
    its first wake); a request of her seat (the ``llm`` user sim) is answered yes."""
    agents = {str(t.prompt): ReferenceAgent(t, mistakes) for t in tasks}

    def handle(request: ScriptedRequest) -> ScriptedReply | str:
        messages = request.messages
        if _plays_her(messages):
            return "Yes, please go ahead."
        first = next((str(m.get("content")) for m in messages if m["role"] == "user"), "")
        for opening, agent in agents.items():
            if opening in first:
                return agent(request)
        return ScriptedReply.tool_call("stay_quiet", {"reason": "not a task of this run"})

    return handle


#: What another scripted agent built on this one reads a wake with (the gaming agents of
#: :mod:`interplay.builtin_envs.always_on.gaming`).
LINE, NUDGE, calls_made, plays_her = _LINE, _NUDGE, _calls, _plays_her
