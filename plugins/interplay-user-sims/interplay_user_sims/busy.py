"""``busy-person``: an LLM-played user for always_on with a life of her own.

Each read tells her the time on her watch and her schedule (awake hours, busy blocks), and
whether she is pressed: she just came out of a busy block or woke up, or a busy block starts
within ``pressed_within``. Pressed, she answers in at most ``terse_words`` words (a longer
reply is malformed and asked for again once), and a read that asks her nothing is left
unanswered with chance ``skip_chance`` (drawn from the episode's seeded generator, without
calling the model); she may also answer the nothing marker herself. With several messages in
one read she names the one she answers (``#N``) or quotes it (``> ...``); a reply that does
neither is malformed. She says done only in a one-sitting run: in a multi-day run a done marker
is dropped from her reply. In the relay (no schedule) she is a terse user who says done when
her goal is met.
"""

from __future__ import annotations

import datetime as dt
import random
import zoneinfo
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from interplay import Answer, EpisodeContext, InterplayError, LlmUserSim, Person
from interplay.contracts import Read
from interplay.world import parse_duration

TEMPLATE = (
    "You are role-playing a busy person who is talking to her AI assistant by chat. Never act "
    "as the assistant.\n"
    "Who you are: {description}\n"
    "What you are after: {scenario}\n"
    "You have little time: write short, plain messages, the way people text.{done}"
)
DONE = " When your goal is met, end your message with {done_marker}."


@attrs.define
class BusyPersonConfig:
    #: The seat whose model plays her (an untrainable seat of the env).
    seat: str = "user"
    #: Her system prompt: ``{description}``, ``{scenario}``, ``{name}``, ``{done}`` (how to
    #: say done; in always_on each read says it instead, where done ends the run).
    template: str = TEMPLATE
    #: What her model is asked for her first message (when the task gives no opening line).
    opening: str = "Write your first message to the assistant."
    #: Her whole reply when she reads and has nothing to say (always_on).
    nothing_marker: str = "###NOTHING###"
    #: The most words she writes when pressed.
    terse_words: int = 15
    #: A busy block starting this soon (ISO-8601 duration) makes her pressed.
    pressed_within: str = "PT30M"
    #: When pressed, the chance she leaves a read that asks her nothing unanswered.
    skip_chance: float = 0.3


def clock(t: float, tz: str) -> str:
    """A time of day as she says it (``14:00``)."""
    return f"{dt.datetime.fromtimestamp(t, zoneinfo.ZoneInfo(tz)):%H:%M}"


class BusyPerson(LlmUserSim):
    """A busy person for always_on: knows her time and schedule, terse when pressed."""

    name = "busy-person"
    Config: ClassVar[type] = BusyPersonConfig

    def configure(self, settings: Mapping[str, Any] | Any) -> None:
        super().configure(settings)
        cfg: BusyPersonConfig = self.config
        problems = []
        if cfg.terse_words < 1:
            problems.append(f"terse_words must be at least 1, got {cfg.terse_words}")
        if not 0.0 <= cfg.skip_chance <= 1.0:
            problems.append(f"skip_chance must be between 0 and 1, got {cfg.skip_chance}")
        try:
            self._pressed_s = parse_duration(cfg.pressed_within)
        except ValueError as exc:
            problems.append(f"pressed_within: {exc}")
        if problems:
            raise InterplayError(f"user_sim.busy-person: {'; '.join(problems)}")

    async def setup(self, person: Person, ctx: EpisodeContext) -> None:
        await super().setup(person, ctx)
        # Her own generator, seeded from the episode's: a seed replays her skips.
        self._rng = random.Random(ctx.rng.getrandbits(64))

    def prompt_values(self, person: Person) -> dict[str, str]:
        # In always_on (she has a schedule) each read says whether done ends the run.
        marker = self.done_marker
        done = DONE.replace("{done_marker}", marker) if person.schedule is None and marker \
            else ""
        return {**super().prompt_values(person), "done": done}

    def pressed(self, read: Read) -> str:
        """Why she is pressed at this read ("" when she is not)."""
        if read.mode == "busy":
            return "You just came out of something that kept you busy."
        if read.mode == "woken":
            return "You just woke up."
        schedule = self.person.schedule
        if schedule is None or read.at is None:
            return ""
        near = schedule.busy_near(read.at, self._pressed_s)
        if near is None:
            return ""
        block, start, end = near
        what = block.label or "something"
        tz = schedule.timezone
        if start <= read.at:
            return f"You are in the middle of {what} until {clock(end, tz)}."
        return f"You have {what} at {clock(start, tz)}."

    def schedule_line(self) -> str:
        schedule = self.person.schedule
        if schedule is None:
            return ""
        parts = [f"awake {schedule.awake[0]}-{schedule.awake[1]}" if schedule.awake else ""]
        parts += [f"{b.label or 'busy'} {b.start}-{b.end}"
                  + (f" ({', '.join(b.days)})" if b.days else "") for b in schedule.busy]
        return "Your day: " + "; ".join(p for p in parts if p) + "."

    def prompt(self, read: Read) -> str:
        if not read.local_time:
            return super().prompt(read)
        lines = [self.schedule_line(), self.pressed(read)]
        return "\n".join(x for x in (*lines, super().prompt(read)) if x)

    def how_to_answer(self, read: Read) -> list[str]:
        how = super().how_to_answer(read)
        if self.pressed(read) and not read.last_read:
            how.append(f"You are pressed for time: at most {self.config.terse_words} words.")
        if len(read.messages) > 1 and not read.last_read:
            how.append("Start with the number of the message you answer (e.g. "
                       f"#{read.messages[-1].number}), or quote it on a first line "
                       "starting with >.")
        return how

    async def answer(self, read: Read) -> Answer:
        asks = any("?" in m.text for m in read.messages)
        if read.local_time and not read.last_read and not asks and self.pressed(read) \
                and self._rng.random() < self.config.skip_chance:
            return Answer("", nothing=True, used={"model_calls": 0.0, "skipped": 1.0})
        return await super().answer(read)

    def parse(self, text: str, read: Read) -> Answer | str:
        marker = self.done_marker
        if read.local_time and not read.done_ends_run and marker and text.endswith(marker):
            # A multi-day run: she never says done, so the marker goes.
            text = text[:-len(marker)].strip()
            if not text:
                return Answer("", nothing=True)
        answer = super().parse(text, read)
        if not isinstance(answer, Answer) or not read.local_time or answer.nothing \
                or read.last_read:
            return answer
        limit = self.config.terse_words
        if self.pressed(read) and len(answer.text.split()) > limit:
            return (f"That was {len(answer.text.split())} words; you are pressed for time. "
                    f"Answer again in at most {limit} words.")
        if len(read.messages) > 1 and answer.replying_to is None:
            return ("Say which message you answer: start with its number (e.g. "
                    f"#{read.messages[-1].number}) or quote it on a first line starting with >.")
        if answer.replying_to is None and read.messages:
            answer.replying_to = read.messages[-1].number
        return answer
