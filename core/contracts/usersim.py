"""The UserSim contract: who a simulated user is and how they answer.

The user-sim relay and always_on both go through this interface, so a third-party package
can replace the builtin default by name. ``configure(settings)`` takes the sim's settings,
``setup(person, ctx)`` meets the person it plays for one episode, ``answer(read)`` returns
the user's next line (or ``done``, or in always_on ``nothing``).

In the relay a read is the assistant's last reply (``text``). In always_on a read holds what
reached her since her last read: the assistant's messages with their times, new items on her
phone, her own earlier lines, whether saying done ends the run, and whether this is the last
read (the wrap-up, whose answer is recorded and never delivered). Nothing meant for the agent
alone (its notes, alerts, rules) is ever in a read. Every field added to these classes has a
default, so a sim written for the relay works unchanged.

The steps call a sim through :func:`set_up` and :func:`answer_or_error`: a sim that raises, or
answers with ``error``, ends the episode as a ``user_error`` (:class:`UserSimError`) whose
error names the sim, the step, the read and where in the sim's code it raised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import attrs

from interplay import errors
from interplay.config.loading import merge, settle
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.harness import NoConfig
from interplay.errors import ErrorType, InterplayError
from interplay.log import get_logger
from interplay.values.records import Message

log = get_logger("interplay.contracts.usersim")


class BusyPeriod(Protocol):
    """A recurring busy block of her schedule, as a sim reads it: ``start`` to ``end``
    (``HH:MM``, her local time; an end at or before the start runs past midnight) on ``days``
    (none: every day), and what keeps her busy (``label``, may be empty)."""

    @property
    def start(self) -> str: ...

    @property
    def end(self) -> str: ...

    @property
    def days(self) -> Sequence[str]: ...

    @property
    def label(self) -> str: ...


class PersonSchedule(Protocol):
    """Her schedule as a user sim reads it (``Person.schedule``; an always_on world's
    :class:`interplay.world.Schedule` is one): her zone, awake hours and busy blocks, and where a
    moment (epoch seconds) falls in them."""

    @property
    def timezone(self) -> str: ...

    @property
    def awake(self) -> tuple[str, str] | None:
        """From when to when she is awake (``HH:MM``); None: always."""
        ...

    @property
    def busy(self) -> Sequence[BusyPeriod]: ...

    def state_at(self, t: float) -> str:
        """``free``, ``busy`` or ``asleep`` at ``t``."""
        ...

    def next_free(self, t: float) -> float | None:
        """The first moment at or after ``t`` she is awake and not busy (None within two
        weeks)."""
        ...

    def awake_seconds(self, start: float, end: float) -> float:
        """How many seconds between ``start`` and ``end`` she is awake."""
        ...

    def busy_near(self, t: float, within_s: float = 0.0,
                  ) -> tuple[BusyPeriod, float, float] | None:
        """The busy block she is in at ``t``, else the first to start within ``within_s``
        after it, with its start and end; None when there is none."""
        ...

    def describe(self) -> dict[str, Any]:
        """The schedule as plain data."""
        ...


@attrs.define
class Opening:
    """She speaks first (always_on): ``at`` (an ISO-8601 date-time, or a duration from the
    start; "" is the start) and ``text`` ("" when her sim writes it then)."""

    #: When she speaks: an ISO-8601 date-time, or a duration from the start; empty is the start.
    at: str = ""
    #: What she says; empty: her sim writes it then.
    text: str = ""


@attrs.define
class Person:
    """Who the simulated user is: a description and the task's scenario, plus when they are
    around (used by always_on; the relay ignores the schedule).

    ``awake_hours``, ``busy_hours`` and ``reply_delay_s`` are the coarse form a relay-era sim
    may read; always_on fills them from ``schedule`` (awake hours rounded to whole hours, busy
    blocks as hour pairs, the free-mode delay), which holds the full schedule in her zone."""

    description: str = "a typical user"
    scenario: str = ""
    name: str = "user"
    timezone: str = "UTC"
    awake_hours: tuple[int, int] = (7, 23)
    busy_hours: tuple[tuple[int, int], ...] = ()
    reply_delay_s: float = 0.0
    info: dict[str, Any] = attrs.Factory(dict)
    email: str = ""
    #: Her schedule (awake hours, busy blocks, reply delays per mode), or None when the step
    #: has none (the relay).
    schedule: PersonSchedule | None = None
    #: always_on: she speaks first, at this time (None: the task's prompt opens at the start,
    #: if it has one).
    opening: Opening | None = None
    #: Whether her done ends the run (the relay: always; always_on: its ``done_ends_run``,
    #: by default in a one-sitting run), known at setup; each ``Read`` says it too.
    done_ends_run: bool = True


@attrs.define
class ReadMessage:
    """One message the assistant sent her: its number, text, task time (ISO-8601 in her zone),
    the wake that sent it and the seat that sent it."""

    number: int
    text: str
    at: str = ""
    wake: int = 0
    seat: str = "assistant"


@attrs.define
class PhoneNote:
    """An item on her phone from someone other than the assistant: when, by which channel,
    from whom, and the full text."""

    at: str
    channel: str
    sender: str
    text: str


@attrs.define
class SentLine:
    """A line she wrote to the assistant earlier: what, when, and which kind (``opening``,
    ``line`` for a scripted line, ``reply``)."""

    text: str
    at: str = ""
    kind: str = "reply"


@attrs.define
class Read:
    """What the user reads.

    ``text`` is the assistant's message (None before anyone has spoken); in always_on it is the
    texts of ``messages`` joined, so a sim that reads only ``text`` still works. ``turn`` is 0
    for her opening; then, in the relay, the number of the assistant's reply she reads (the
    n-th: n; a read asked again after an empty answer keeps it), and in always_on the read's
    number in the episode (1 for the first). ``at`` is the
    task time in epoch seconds. The rest is filled by always_on (the relay fills ``messages``
    with the one reply): ``messages`` every message of the agent's since her last read, oldest
    first; ``phone`` new phone items; ``you_sent`` her own lines so far; ``done_ends_run`` whether
    saying done ends the run (a one-sitting run) or is only recorded (a multi-day run);
    ``last_read`` the wrap-up after the last wake; ``mode`` why she reads now (``free``, or
    ``busy`` at the end of a busy block, or ``woken`` on waking); ``local_time`` the time on
    her watch (ISO-8601 with offset)."""

    text: str | None
    turn: int = 0
    at: float | None = None
    messages: tuple[ReadMessage, ...] = ()
    phone: tuple[PhoneNote, ...] = ()
    you_sent: tuple[SentLine, ...] = ()
    done_ends_run: bool = True
    last_read: bool = False
    mode: str = "free"
    local_time: str = ""

    def render(self) -> str:
        """The read as a person sees it: the time, the new messages with their numbers and
        times, and the phone's new items. In the relay, just the text."""
        if not self.local_time:  # the relay: the reply is all there is
            return self.text or ""
        lines = [f"It is {self.local_time}." if self.local_time else ""]
        if self.messages:
            lines.append("New messages from your assistant:")
            lines += [f"#{m.number} ({m.at}): {m.text}" for m in self.messages]
        if self.phone:
            lines.append("New on your phone:")
            lines += [f"- {p.at} {p.channel} from {p.sender}: {p.text}" for p in self.phone]
        return "\n".join(line for line in lines if line)


@attrs.define
class Answer:
    """The user's reply. ``done`` ends the exchange; ``delay_s`` is how long they took.
    ``error`` says the simulator could not answer at all (its model failed): the exchange
    ends, and not because the user was done.

    Also: ``nothing`` (she read and does not answer; always_on), ``replying_to`` (the number of
    the message she answers, or a quote from it), ``score`` (her own rating of the assistant,
    recorded and never sent) and ``used`` (what producing the answer took: model calls,
    attempts, malformed replies retried; recorded and never sent).

    ``at`` (always_on) is the task time, in epoch seconds, at which she writes the reply,
    instead of after her reply delay (a replayed user keeps her recorded times); a time before
    the read is the read's. ``done_reason`` says why she is done (e.g. ``stop``,
    ``transfer``): recorded with the exchange's ending, never sent."""

    text: str
    done: bool = False
    delay_s: float = 0.0
    error: str | None = None
    nothing: bool = False
    used: dict[str, float] = attrs.Factory(dict)
    score: float | None = None
    replying_to: int | str | None = None
    at: float | None = None
    done_reason: str = ""
    #: Her first reply to the read, as written, when it was malformed and she was asked
    #: again (None when the first reply stood): recorded, never sent.
    first_reply: str | None = None
    #: What her seat's turn added to her conversation when a model played her (her tool
    #: calls and their results, then her reply, as her seat has them: her own messages are
    #: ``assistant`` ones); empty for a sim without a model. A step that keeps a transcript of
    #: the user's side (tau2's) records them; never sent.
    messages: list[Message] = attrs.Factory(list)


class UserSim:
    """Base class of every user sim. Subclass it and register it with ``register_user_sims``."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig

    def __init__(self) -> None:
        self.config: Any = self.Config()

    def configure(self, settings: Mapping[str, Any] | Any) -> None:
        """Take settings: a mapping (structured into ``Config``) or a ``Config`` instance."""
        self.config = settle(settings, self, "user sim",
                             path=f"user_sim.{self.name or type(self).__name__}")

    def seats(self) -> set[str]:
        """The seats this sim plays the user with: its ``seat`` setting, when its ``Config``
        has one (a sim without a model uses none). The steps declare them, so an env without
        the seat is refused when it loads."""
        seat = getattr(self.config, "seat", None)
        return {str(seat)} if seat else set()

    async def setup(self, person: Person, ctx: EpisodeContext) -> None:
        """Meet the person to play for one episode (open sessions, seed randomness)."""
        self.person = person

    async def answer(self, read: Read) -> Answer:
        """Her answer to what she read (``read.text`` None: she speaks first)."""
        raise NotImplementedError(f"user sim {self.name!r} does not implement answer()")

    async def close(self) -> None:
        """Release what ``setup`` opened."""


def chosen_user_sim(own: str, own_settings: Mapping[str, Any], name: str,
                    settings: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The user sim a step plays its user with, and its settings, once the run chose
    (``env.user_sim``, ``env.user_sim_settings``): another sim takes ``settings`` alone; the
    step's own (``name`` empty, or the same name) takes ``settings`` laid key by key over its
    own settings (:meth:`interplay.Step.use_user_sim`)."""
    if name and name != own:
        return name, dict(settings)
    return own, merge(own_settings, settings)


class UserSimError(InterplayError):
    """A user sim failed (it raised, or answered with ``Answer.error``): the episode ends as a
    ``user_error``, not scored. The message names the sim, the step that ran it and where it
    failed. An InterplayError whose error type is ``user_error``, not ``config_error``: a sim
    that raises one (a sim set up inside another) has failed, like one that raises anything
    else."""

    error_type: ClassVar[ErrorType] = ErrorType.USER_ERROR


def failure_site(exc: BaseException, sim: UserSim) -> str:
    """Where ``exc`` was raised in the sim's own code: ``pkg/file.py:LINE`` of the innermost
    frame inside the package (or the lone module) that holds the sim's class
    (:func:`interplay.errors.failure_site`)."""
    return errors.failure_site(exc, sim) or "?"


async def answer_or_error(sim: UserSim, read: Read, *, name: str, step: str,
                          what: str = "") -> Answer:
    """``sim.answer(read)``, with a failure made an ``Answer.error`` that names the sim, the
    step, the read (``what``) and, when it raised, where in its code; logged with those names
    and the exception's type, never its text. An InterplayError (a setting or a task the sim
    refuses) is raised as it is: a config error, which says what to change."""
    try:
        answer = await sim.answer(read)
    except Exception as exc:
        if isinstance(exc, InterplayError) and not isinstance(exc, UserSimError):
            raise  # a setting or a task the sim refuses: a config error, with what to change
        where = _raised(exc, sim, name=name, step=step)
        return Answer(text="", error=f"user sim {name!r} failed in {step}{what} at {where}: "
                                     f"{type(exc).__name__}: {exc}")
    if not isinstance(answer, Answer):
        log.warning("user_sim.failed", step=step, user_sim=name, code_path="answer()",
                    error_type=UserSimError.error_type, reason_code="bad_answer")
        return Answer(text="", error=f"user sim {name!r} failed in {step}{what}: answer() "
                                     f"returned {type(answer).__name__}, not an Answer")
    if answer.error is not None:
        log.warning("user_sim.failed", step=step, user_sim=name, code_path="Answer.error",
                    error_type=UserSimError.error_type, reason_code="answer_error")
        answer.error = f"user sim {name!r} could not answer in {step}{what}: {answer.error}"
    return answer


async def set_up(sim: UserSim, person: Person, ctx: EpisodeContext, *, name: str,
                 step: str) -> None:
    """``sim.setup(person, ctx)``; a failure raises :class:`UserSimError` naming the sim, the
    step and where in its code (an InterplayError is raised as it is)."""
    try:
        await sim.setup(person, ctx)
    except Exception as exc:
        if isinstance(exc, InterplayError) and not isinstance(exc, UserSimError):
            raise  # a setting or a task the sim refuses: a config error, with what to change
        where = _raised(exc, sim, name=name, step=step)
        raise UserSimError(f"user sim {name!r} failed to set up in {step} at {where}: "
                           f"{type(exc).__name__}: {exc}") from exc


def _raised(exc: BaseException, sim: UserSim, *, name: str, step: str) -> str:
    """Log a sim's exception by the step's and the sim's names, where it was raised and its
    class (never its text), with the error type the episode ends with; where it was raised."""
    where = failure_site(exc, sim)
    log.warning("user_sim.failed", step=step, user_sim=name, code_path=where,
                error_type=UserSimError.error_type, reason_code="raised",
                exception_type=type(exc).__name__)
    return where
