"""``scripted``: a user who says fixed lines, for tests and for fixed dialogues.

The lines come from the task (``info.user_lines``, or the key ``info_key`` names) or else
from the settings. A line is a string, or a table: ``text``, ``match`` (a regular expression
searched in the assistant's last message), ``delay`` (an ISO-8601 duration she takes to write
it), ``done`` (she is done after it) and ``repeat`` (a keyed line may answer again).

- **In order** (no line has a ``match``): each answer is the next line; in the relay the first
  line opens the chat. After the last line she is done.
- **Keyed** (every line has a ``match``): each answer is the first line, not yet used unless
  it repeats, whose pattern is found in the assistant's last message; she answers that
  message (``replying_to``). When no line matches she says nothing in always_on, and is done in
  the relay (which cannot wait); when every line is used, she is done. The relay's opening is
  ``opening``, else the person's scenario.

Once done she says nothing more (always_on goes on after a done only in a multi-day run). It
never calls a model; the same script gives the same dialogue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from interplay import Answer, EpisodeContext, InterplayError, Person, UserSim
from interplay.contracts import Read
from interplay.world import parse_duration


@attrs.define
class ScriptLine:
    text: str
    match: str = ""
    delay_s: float = 0.0
    done: bool = False
    repeat: bool = False


@attrs.define
class ScriptedConfig:
    #: Her lines: strings, or tables with ``text``, ``match``, ``delay``, ``done``, ``repeat``.
    lines: list[Any] = attrs.Factory(list)
    #: The task ``info`` key whose lines take the place of ``lines``.
    info_key: str = "user_lines"
    #: A keyed script's first line in the relay; empty: the person's scenario.
    opening: str = ""


def read_lines(raw: Any, where: str) -> list[ScriptLine]:
    """Script lines from plain data, refused in one line naming ``where`` when malformed."""
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise InterplayError(f"{where}: expected a list of lines, got {type(raw).__name__}")
    lines = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, Mapping):
            raise InterplayError(f"{at}: a line is a string or a table, got "
                                 f"{type(item).__name__}")
        unknown = set(item) - {"text", "match", "delay", "done", "repeat"}
        if unknown:
            raise InterplayError(f"{at}: unknown key {', '.join(sorted(unknown))}; allowed: "
                                 f"text, match, delay, done, repeat")
        match = str(item.get("match") or "")
        try:
            re.compile(match)
        except re.error as exc:
            raise InterplayError(f"{at}.match: {match!r} is not a regular expression "
                                 f"({exc})") from None
        delay = item.get("delay") or 0
        try:
            delay_s = float(delay) if isinstance(delay, int | float) else parse_duration(delay)
        except ValueError as exc:
            raise InterplayError(f"{at}.delay: {exc}") from None
        lines.append(ScriptLine(text=str(item.get("text") or ""), match=match,
                                delay_s=delay_s, done=bool(item.get("done")),
                                repeat=bool(item.get("repeat"))))
    keyed = [bool(line.match) for line in lines]
    if any(keyed) and not all(keyed):
        first = keyed.index(not keyed[0])
        raise InterplayError(f"{where}[{first}]: a script is either in order (no line has a "
                             f"match) or keyed (every line has one); give every line a match "
                             f"or none")
    return lines


class ScriptedUser(UserSim):
    """Fixed lines, in order or keyed by a regex on the assistant's last message."""

    name = "scripted"
    Config: ClassVar[type] = ScriptedConfig

    def configure(self, settings: Mapping[str, Any] | Any) -> None:
        super().configure(settings)
        # Checked here, so a bad script is refused when the env loads.
        self._lines = read_lines(self.config.lines, "user_sim.scripted.lines")

    async def setup(self, person: Person, ctx: EpisodeContext) -> None:
        await super().setup(person, ctx)
        raw = ctx.task.info.get(self.config.info_key)
        self.lines = self._lines if raw is None else read_lines(
            raw, f"task {ctx.task.idx} info.{self.config.info_key}")
        self.keyed = any(line.match for line in self.lines)
        self.next = 0
        self.used: set[int] = set()
        #: She said her line with ``done``: the next answer is done.
        self.ending = False
        self.done = False

    async def answer(self, read: Read) -> Answer:
        relay = not read.local_time
        if self.done or read.last_read:
            return Answer("", nothing=True)
        if self.ending:
            return self._done()
        if self.keyed:
            return self._keyed(read, relay)
        if self.next >= len(self.lines):
            return self._done()
        line = self.lines[self.next]
        self.next += 1
        return self._say(line, None)

    def _keyed(self, read: Read, relay: bool) -> Answer:
        if relay and read.text is None:
            return Answer(self.config.opening or self.person.scenario)
        last = read.messages[-1] if read.messages else None
        text = last.text if last is not None else (read.text or "")
        for i, line in enumerate(self.lines):
            if (line.repeat or i not in self.used) and re.search(line.match, text):
                self.used.add(i)
                return self._say(line, last.number if last is not None and not relay else None)
        spent = not any(line.repeat or i not in self.used for i, line in enumerate(self.lines))
        return self._done() if relay or spent else Answer("", nothing=True)

    def _say(self, line: ScriptLine, replying_to: int | None) -> Answer:
        self.ending = line.done
        return Answer(line.text, delay_s=line.delay_s, replying_to=replying_to)

    def _done(self) -> Answer:
        self.done = True
        return Answer("", done=True)
