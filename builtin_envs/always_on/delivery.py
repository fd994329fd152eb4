"""What reaches whom in an always_on run: her opening on the queue, the agent's system prompt,
what each waking event tells the agent and the wake's message with the step's own lines (the
rules, the reminder, the final notice, the nudge), and the relay of the agent's questions to
the contacts seats play. The wording is :mod:`.prompts`'; this module decides what is said.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from interplay.builtin_envs.always_on import prompts
from interplay.contracts.contexts import ChatSession, EpisodeContext
from interplay.contracts.usersim import Person
from interplay.values.records import Task
from interplay.world import times
from interplay.world.contacts import Contact
from interplay.world.events import Event
from interplay.world.scenario import Scenario
from interplay.world.world import World

if TYPE_CHECKING:
    from interplay.builtin_envs.always_on.config import AlwaysOnConfig


class Delivery:
    """What the step tells the agent, and her opening."""

    def __init__(self, world: World, cfg: AlwaysOnConfig, *, task: Task, scenario: Scenario,
                 person: Person, checks: bool) -> None:
        self.world = world
        self.cfg = cfg
        self.task = task
        self.scenario = scenario
        self.person = person
        self.checks = checks
        #: Events told later than the minute they fell due (they came while a turn ran on).
        self.late = 0
        #: Events told before their due time.
        self.early = 0

    def queue_opening(self) -> None:
        """Her opening line, at her opening's time (else the start): the task's prompt, else
        her opening's words, else the scenario's opening; with an opening of hers that gives
        no words, her sim writes it then."""
        world, spec = self.world, self.person.opening
        text = prompts.opening_text(self.task, self.scenario,
                                    spec.text if spec is not None else "")
        at = world.start if spec is None or not spec.at else \
            times.parse_when(spec.at, world.timezone, world.start)
        if text:
            world.queue.push(Event(world.us(at), "user_line", key=("opening",),
                                   data={"text": text, "opening": True}))
        elif spec is not None:
            world.queue.push(Event(world.us(at), "user_line", key=("opening",),
                                   data={"text": "", "opening": True, "compose": True}))

    def agent_task(self) -> Task:
        """The task the agent's chat opens on: no prompt (her lines come at wakes), and the
        task's system prompt with the rules after it, if it has one."""
        task = self.task
        system = prompts.agent_system_prompt(task.system_prompt, self.rules())
        return Task(idx=task.idx, prompt=None, system_prompt=system, answer=task.answer,
                    info=task.info)

    def wake_message(self, n: int, items: list[Event], now_us: int,
                     final_reason: str | None) -> tuple[list[str], list[dict[str, Any]]]:
        """Wake ``n``'s lines for the agent and their sources for the timeline: each event's,
        the rules first at the first wake of a task without a system prompt, then the
        reminder and, for a final wake, its notice."""
        sources = [self.tell(event, n, now_us) for event in items]
        lines = [s.pop("line") for s in sources]
        if n == 1 and not self.task.system_prompt:
            lines.insert(0, prompts.step_line(self.rules()))
            sources.insert(0, {"kind": "rules", "from": "step", "text": self.rules()})
        if self.cfg.reminder:
            lines.append(prompts.step_line(prompts.reminder_text(self.cfg.reminder)))
            sources.append({"kind": "reminder", "from": "step", "text": self.cfg.reminder})
        if final_reason is not None:
            notice = self.final_notice(final_reason)
            lines.append(prompts.step_line(notice))
            sources.append({"kind": "final_notice", "from": "step", "text": notice})
        return lines, sources

    def tell(self, event: Event, n: int, wake_us: int) -> dict[str, Any]:
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

    def rules(self) -> str:
        """The rules of the run: in the system prompt, else the first wake's first line."""
        return prompts.rules_text(self.person.name, self.world.timezone, checks=self.checks,
                                  stay_quiet=self.cfg.stay_quiet,
                                  min_check_interval=self.cfg.min_check_interval)

    def nudge_text(self) -> str:
        """The nudge turn's words, after a wake in which the agent wrote to nobody."""
        return prompts.nudge_text(self.person.name, self.cfg.stay_quiet)

    def final_notice(self, reason: str) -> str:
        """The last-turn notice of a final wake (``reason``: why it is the last)."""
        return prompts.final_notice(reason, self.person.name, self.world.clock.now(),
                                    self.world.timezone, self.cfg.final_check_in)


class ContactSessions:
    """The relay to the contacts seats play: the agent's question to one is a turn of its own
    chat session, opened at the first question it is asked."""

    def __init__(self, ctx: EpisodeContext, *, user_name: str) -> None:
        self.ctx = ctx
        self.user_name = user_name
        self.sessions: dict[str, ChatSession] = {}

    async def ask(self, contact: Contact, message: str) -> str:
        """The contact's answer to the agent's ``message`` (the world's contacts call it)."""
        session = self.sessions.get(contact.name)
        if session is None:
            system = prompts.CONTACT_PROMPT.format(name=contact.name, persona=contact.persona,
                                                   user=self.user_name)
            agent = self.ctx.agent(contact.seat, name=f"{contact.seat}:{contact.name}")
            session = agent.chat(Task(idx=self.ctx.task.idx, system_prompt=system))
            self.sessions[contact.name] = session
        reply = await session.turn(message)
        if reply.stopped and not reply.text:
            raise RuntimeError(f"the contact's turn stopped ({reply.stop_condition})")
        return reply.text

    async def close(self) -> None:
        """Close every contact's session."""
        for session in self.sessions.values():
            await session.close()


def _due(world: World, due_us: int) -> dict[str, Any]:
    stamp = world.timeline.stamp(due_us)
    return {"due": stamp["at"], "due_t": stamp["t"]}
