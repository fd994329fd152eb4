"""The ``user_sim`` step (who the user is) and the user's side of an always_on run.

The step's settings describe her: description, name, e-mail, IANA time zone, awake hours, busy
blocks, reply delays per mode and where a reply due while she is away lands, her opening, the
user-sim plug-in (by registered name, with its settings) and the seat that plays her. It
refuses, when the env loads, an unknown zone and reply delays her schedule could never use;
the always_on step refuses a zone that disagrees with its world's. Run, it writes her as plain
data to ``ctx.results["user"]``.

:class:`UserSide` is her in an always_on run: she reads only after the agent's
``message_user``, at the time she would (at once when awake and free, else when she is next
free; also while the agent's turn runs on), and her reply is written after her reply delay for
the mode she read in (moved to her next free time when ``reply_lands`` says so). A failure of
her sim is an ``Answer.error`` naming it (:func:`interplay.contracts.usersim.answer_or_error`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from interplay.builtin_envs.steps import make_user_sim
from interplay.config.loading import structure
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.step import Step
from interplay.contracts.usersim import (
    Answer,
    Opening,
    Person,
    PhoneNote,
    Read,
    ReadMessage,
    SentLine,
    UserSim,
    answer_or_error,
    chosen_user_sim,
)
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.plugins import host as plugins
from interplay.values.records import Task
from interplay.world import times
from interplay.world.chat import Sent
from interplay.world.events import Event
from interplay.world.schedule import BusyBlock, Schedule
from interplay.world.world import World

log = get_logger("interplay.envs.user_sim")

#: What happens to a reply whose delay ends while she sleeps or is busy (the first: default).
REPLY_LANDS = ("anyway", "when_free")
#: Settings a task's info.user may not lay over the step's: who plays her is the env's.
ENV_KEEPS = frozenset({"user_sim", "user_sim_settings", "seat", "tools"})


@attrs.define
class UserSimStepConfig:
    #: Who she is, in a sentence or two (her sim plays her from it).
    description: str = "a busy person who wants things done without fuss"
    #: Her name, as the agent and the records call her.
    name: str = "user"
    #: Her email address, for a scenario's apps (empty: none).
    email: str = ""
    #: Her IANA time zone (e.g. Europe/Berlin): her awake and busy hours are local to it.
    timezone: str = "UTC"
    #: Awake hours, ``["07:00", "23:00"]`` (local); none: always awake.
    awake: list[str] | None = None
    #: Recurring busy blocks: [{start, end, days, label}] (HH:MM local; days: names, weekdays,
    #: weekend or daily).
    busy: list[BusyBlock] = attrs.Factory(list)
    #: Reply delay per mode (``free``, ``busy``, ``woken``): an ISO-8601 duration or two.
    reply_delays: dict[str, Any] = attrs.Factory(dict)
    #: The user sim, by registered name, and its settings.
    user_sim: str = "llm"
    #: Settings of the user sim (its own Config: `interplay describe user-sims NAME`).
    user_sim_settings: dict[str, Any] = attrs.Factory(dict)
    #: The seat that plays her (for the ``llm`` sim).
    seat: str = "user"
    #: What she writes when she is done (the llm sim ends a message with it).
    done_marker: str = "###DONE###"
    #: App tools on her side (dual control): the seat that plays her may call these tools of
    #: the world's apps while she reads; her changes count as made by ``user``.
    tools: list[str] = attrs.Factory(list)
    #: A reply whose delay ends while she sleeps or is busy: ``anyway`` lands then (she
    #: started typing, as a person who sends it before bed would); ``when_free`` waits for
    #: her next free time.
    reply_lands: str = "anyway"
    #: She speaks first (always_on): ``{at, text}``; without text her sim writes it then.
    opening: Opening | None = None


class UserSimStep(Step):
    """Who the user is: her description, time zone, schedule, reply delays and user sim."""

    name = "user_sim"
    Config: ClassVar[type] = UserSimStepConfig
    writes = frozenset({"user"})

    def seats(self) -> set[str]:
        try:
            return make_sim(self.record_settings()).seats()
        except InterplayError:  # check() reports it
            return set()

    def use_user_sim(self, name: str, settings: dict[str, Any]) -> None:
        cfg: UserSimStepConfig = self.config
        sim, sim_settings = chosen_user_sim(cfg.user_sim, cfg.user_sim_settings, name, settings)
        self.config = attrs.evolve(cfg, user_sim=sim, user_sim_settings=sim_settings)

    def record_settings(self) -> dict[str, Any]:
        cfg: UserSimStepConfig = self.config
        return {"user_sim": cfg.user_sim, "user_sim_settings": cfg.user_sim_settings,
                "seat": cfg.seat}

    def schedule(self) -> Schedule:
        return _schedule(self.config)

    def check(self, steps: Sequence[Step]) -> list[str]:
        cfg: UserSimStepConfig = self.config
        problems = list(self.schedule().problems())
        try:
            make_sim(self.record_settings())
        except InterplayError as exc:
            problems.append(str(exc))
        if cfg.opening is not None:
            if cfg.opening.text and not cfg.opening.text.strip():
                problems.append("opening.text: empty; give her words, or leave text out for "
                                "her sim to write them")
            if cfg.opening.at:
                try:
                    times.parse_when(cfg.opening.at, cfg.timezone, 0.0)
                except ValueError as exc:
                    problems.append(f"opening.at: {exc}")
        if cfg.reply_lands not in REPLY_LANDS:
            problems.append(f"reply_lands: {cfg.reply_lands!r} is not a rule; use "
                            f"{' or '.join(REPLY_LANDS)}")
        return problems

    async def run(self, ctx: EpisodeContext) -> None:
        ctx.results["user"] = self.record(ctx.task)

    def for_task(self, task: Task) -> UserSimStepConfig:
        """The settings for ``task``: a task that says who she is (``info.user``, a table of
        these settings, as a generated task holds) lays it over the step's; who plays her
        (``user_sim``, its settings, the seat, her tools) stays the env's. Checked as the
        step's own are, in one line naming the task."""
        own = task.info.get("user")
        if own is None:
            return self.config
        where = f"task {task.idx} info.user"
        if not isinstance(own, Mapping):
            raise InterplayError(f"{where}: a table of the user_sim step's settings (name, "
                                 f"timezone, awake, busy, ...), got {type(own).__name__}")
        kept = sorted(ENV_KEEPS & set(own))
        if kept:
            raise InterplayError(f"{where}.{kept[0]}: who plays her is the env's to set "
                                 f"(env.user.{kept[0]}); a task says who she is")
        merged = {**attrs.asdict(self.config, recurse=False), **own}
        cfg = structure(merged, UserSimStepConfig, path=where)
        problems = UserSimStep(cfg).check([])
        if problems:
            raise InterplayError(f"{where}: {'; '.join(problems)}")
        return cfg

    def record(self, task: Task) -> dict[str, Any]:
        """The user as plain data: what always_on plays and what graders read."""
        cfg: UserSimStepConfig = self.for_task(task)
        scenario = task.info.get("scenario") or (task.prompt if isinstance(task.prompt, str)
                                                 else "")
        return {"name": cfg.name, "email": cfg.email, "description": cfg.description,
                "scenario": str(scenario), **_schedule(cfg).describe(),
                "user_sim": cfg.user_sim, "user_sim_settings": dict(cfg.user_sim_settings),
                "seat": cfg.seat, "done_marker": cfg.done_marker, "tools": list(cfg.tools),
                "reply_lands": cfg.reply_lands,
                "opening": None if cfg.opening is None else attrs.asdict(cfg.opening)}


def _schedule(cfg: UserSimStepConfig) -> Schedule:
    return Schedule.from_plain({"timezone": cfg.timezone, "awake": cfg.awake,
                                "busy": cfg.busy, "reply_delays": cfg.reply_delays})


def person_from(record: dict[str, Any]) -> tuple[Person, Schedule]:
    """The Person a user sim plays, and her schedule, from ``ctx.results["user"]``."""
    schedule = Schedule.from_plain(record)
    awake = ((int(times.parse_clock_time(schedule.awake[0]) // 60),
              int(times.parse_clock_time(schedule.awake[1]) // 60)) if schedule.awake
             else (0, 24))
    busy = tuple((times.parse_clock_time(b.start) // 60, times.parse_clock_time(b.end) // 60)
                 for b in schedule.busy)
    free = schedule.reply_delays.get("free")
    opening = record.get("opening")
    person = Person(description=record["description"], scenario=record.get("scenario", ""),
                    name=record["name"], timezone=schedule.timezone, awake_hours=awake,
                    busy_hours=busy, reply_delay_s=times.delay_bounds(free)[0] if free else 0.0,
                    info={"done_marker": record.get("done_marker", "")},
                    email=record.get("email", ""), schedule=schedule,
                    opening=Opening(**opening) if opening else None)
    return person, schedule


def make_sim(record: dict[str, Any]) -> UserSim:
    """The user sim a ``user`` record names, configured; a sim whose settings have a seat
    plays her with the step's ``seat`` unless its settings name another."""
    settings = dict(record.get("user_sim_settings") or {})
    if _has_field(plugins.get("user-sims", record["user_sim"]).Config, "seat"):
        settings.setdefault("seat", record.get("seat", "user"))
    return make_user_sim(record["user_sim"], settings)


def _has_field(config: type, name: str) -> bool:
    if attrs.has(config):
        return name in attrs.fields_dict(config)
    return dataclasses.is_dataclass(config) and name in {
        f.name for f in dataclasses.fields(config)}


def reply_target(answer: Answer, messages: Sequence[Sent]) -> int | None:
    """The message her reply answers: the one she names, the one she quotes, the only message
    she read, or the only question among them."""
    return reply_match(answer, messages)[0]


def reply_match(answer: Answer, messages: Sequence[Sent]) -> tuple[int | None, str]:
    """The message her reply answers and how it was found: ``named`` (the number she gives),
    ``quoted`` (a quote from it), ``only_message`` (the only one she read),
    ``only_question`` (the only question among them), or None with ``none``."""
    numbers = {m.number for m in messages}
    if isinstance(answer.replying_to, int) and not isinstance(answer.replying_to, bool):
        if answer.replying_to in numbers:
            return answer.replying_to, "named"
    elif isinstance(answer.replying_to, str) and answer.replying_to.strip():
        quote = answer.replying_to.strip().casefold()
        for m in reversed(messages):
            if quote in m.text.casefold():
                return m.number, "quoted"
    if len(messages) == 1:
        return messages[0].number, "only_message"
    questions = [m for m in messages if "?" in m.text]
    if len(questions) == 1:
        return questions[0].number, "only_question"
    return None, "none"


class UserSide:
    """The user in an always_on run: when she reads, what she reads, and her replies."""

    def __init__(self, world: World, sim: UserSim, person: Person, schedule: Schedule, *,
                 done_ends_run: bool, sim_name: str = "", step: str = "always_on",
                 reply_lands: str = "anyway", seat: str = "assistant") -> None:
        self.world = world
        #: The agent's seat: her reads hold its messages, never what another seat queued.
        self.seat = seat
        self.sim = sim
        #: The sim's registered name and the step that runs her (for what a failure says).
        self.sim_name = sim_name or sim.name
        self.step = step
        self.reply_lands = reply_lands
        self.person = person
        self.schedule = schedule
        self.done_ends_run = done_ends_run
        #: One record per read (see docs/always_on.md, "reply records").
        self.records: list[dict[str, Any]] = []
        #: Her lines so far: (epoch seconds, kind, text).
        self.lines: list[tuple[float, str, str]] = []
        self.planned: Event | None = None
        self.malformed = 0
        self.unreachable = 0

    # -- planning a read -------------------------------------------------------------------

    def on_message(self, message: Sent) -> None:
        """A message was queued for her: plan her read unless one is planned already (a
        message of another seat's is not this run's to read)."""
        if message.seat != self.seat:
            return
        if self.planned is None or self.planned.cancelled:
            self._plan(message.at_us / 1e6, reason="message")

    def _plan(self, t: float, *, reason: str) -> None:
        read_at, mode = self.schedule.read_plan(t)
        world = self.world
        if read_at is None:
            self.unreachable += 1
            world.timeline.add("read_unreachable", world.us(t), reason=reason)
            self.planned = None
            return
        self.planned = world.queue.push(Event(world.us(read_at), "read",
                                              key=("read", len(self.records) + 1),
                                              data={"mode": mode, "planned_at": world.us(t)}))

    # -- a read ----------------------------------------------------------------------------

    async def read(self, event: Event) -> dict[str, Any] | None:
        """She reads what reached her; None when the read had to wait (it was overdue and she
        is no longer free). Returns the read's record. An overdue read that finds her free
        takes the mode she is in now (``free``), not the one it was planned in (kept as
        ``planned_mode``): a read planned for her waking that comes after it is not a woken
        read."""
        world = self.world
        now = world.clock.now()
        self.planned = None
        overdue_s = now - event.due
        planned = event.data["mode"]
        if overdue_s < 1e-6:
            return await self._read(mode=planned, overdue_s=overdue_s, planned=planned)
        if self.schedule.state_at(now) == "free":
            return await self._read(mode="free", overdue_s=overdue_s, planned=planned)
        world.timeline.add("read_deferred", world.clock.now_us(), due=times.iso(
            event.due, world.timezone), state=self.schedule.state_at(now))
        self._plan(now, reason="overdue")
        return None

    async def wrap_up(self, mode: str) -> dict[str, Any]:
        """The last read, after the last wake (the loop chooses when, and ``mode`` says why
        she reads then): recorded, never delivered."""
        return await self._read(mode=mode, overdue_s=0.0, last=True)

    async def compose_opening(self) -> Answer:
        """She speaks first in her own words: her sim is given a read with nothing in it
        (``text`` None, no messages) at her opening's time, and answers with her first line."""
        world = self.world
        now = world.clock.now()
        read = Read(text=None, turn=0, at=now, done_ends_run=self.done_ends_run,
                    mode=self.schedule.read_plan(now)[1],
                    local_time=times.readable(now, world.timezone))
        return await answer_or_error(self.sim, read, name=self.sim_name, step=self.step,
                                     what=" (her opening)")

    async def _read(self, *, mode: str, overdue_s: float, last: bool = False,
                    planned: str | None = None) -> dict[str, Any]:
        world = self.world
        now_us = world.clock.now_us()
        now = now_us / 1e6
        tz = world.timezone
        messages = world.chat.unread(self.seat)
        phone = [p for p in world.chat.phone if not p.seen]
        read = Read(
            text="\n\n".join(m.text for m in messages) or None, turn=len(self.records) + 1,
            at=now,
            messages=tuple(ReadMessage(m.number, m.text, times.iso(m.at_us / 1e6, tz), m.wake,
                                       m.seat) for m in messages),
            phone=tuple(PhoneNote(times.iso(p.at_us / 1e6, tz), p.channel, p.sender, p.text)
                        for p in phone),
            you_sent=tuple(SentLine(text, times.iso(t, tz), kind)
                           for t, kind, text in self.lines if t <= now),
            done_ends_run=self.done_ends_run, last_read=last, mode=mode,
            local_time=times.readable(now, tz))
        answer = await answer_or_error(self.sim, read, name=self.sim_name, step=self.step,
                                       what=" (the wrap-up)" if last
                                       else f" (read {len(self.records) + 1})")
        for m in messages:
            if last:
                m.wrap_up = True
            else:
                m.read_at_us = now_us
        for p in phone:
            p.seen = True
        self.malformed += int(answer.used.get("malformed", 0))
        record: dict[str, Any] = {
            "read": len(self.records) + 1, **_stamp(world, now_us, "read"), "mode": mode,
            "planned_mode": planned,
            "overdue_s": round(max(0.0, overdue_s), 6), "last_read": last,
            "messages": [m.number for m in messages], "phone": len(phone),
            "outcome": "", "text": answer.text, "done": answer.done,
            "wrote_at": None, "wrote_t": None, "reached_at": None, "reached_t": None,
            "reached_wake": None, "reply_to": None, "reply_to_by": None, "score": answer.score,
            "used": dict(answer.used), "done_reason": answer.done_reason,
            "first_reply": answer.first_reply}
        self.records.append(record)
        text = answer.text.strip()
        if answer.error is not None:
            record["outcome"] = "error"
            record["error"] = answer.error
        elif last:
            record["outcome"] = "wrap_up"
        elif answer.done and not text:
            record["outcome"] = "done"
        elif answer.nothing or not text:
            record["outcome"] = "nothing"
        else:
            record["outcome"] = "replied"
            if answer.at is not None:
                wrote_us = world.us(max(now, answer.at))
            else:
                delay = self.schedule.reply_delay(mode, world.rng) + max(0.0, answer.delay_s)
                wrote_us = world.us(now + delay)
                moved = self._when_free(wrote_us / 1e6)
                if moved is not None:
                    record["moved_from"] = times.iso(wrote_us / 1e6, world.timezone)
                    wrote_us = world.us(moved)
            record.update(_stamp(world, wrote_us, "wrote"))
            record["reply_to"], record["reply_to_by"] = reply_match(answer, messages)
            self.lines.append((wrote_us / 1e6, "reply", text))
            world.queue.push(Event(wrote_us, "user_reply", key=("reply", record["read"]),
                                   data={"record": record, "text": text, "done": answer.done}))
        world.timeline.add("read", now_us, read=record["read"], mode=mode,
                           messages=record["messages"], phone=len(phone),
                           outcome=record["outcome"], last_read=last,
                           overdue_s=record["overdue_s"])
        log.debug("user_sim.read", read=record["read"], messages=len(messages),
                  outcome=record["outcome"], chars=len(text))
        return record

    def _when_free(self, t: float) -> float | None:
        """Where a reply due at ``t`` lands instead under ``when_free`` (her next free time,
        when she sleeps or is busy at ``t``); None when it lands at ``t``."""
        if self.reply_lands != "when_free" or self.schedule.state_at(t) == "free":
            return None
        return self.schedule.next_free(t)

    def said(self, t: float, kind: str, text: str) -> None:
        """She wrote a line the run delivered for her (the opening, a scripted line)."""
        self.lines.append((t, kind, text))


def _stamp(world: World, at_us: int, prefix: str) -> dict[str, Any]:
    stamp = world.timeline.stamp(at_us)
    return {f"{prefix}_at": stamp["at"], f"{prefix}_t": stamp["t"]}
