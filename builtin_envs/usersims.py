"""``llm``: the default user sim, which plays the user with an LLM agent from a description.

The user is another agent's chat session (the ``user`` seat, null harness, untrainable) whose
system prompt is the persona with the task's scenario. It works in the relay and in always_on:

- relay: it speaks first, then answers each reply; it is done when its reply is the done marker
  (alone, or ending a last line);
- always_on: each read is shown as she sees it (the time, the numbered messages with their
  times, new phone items) with how to answer: a leading ``#N`` answers message N, the nothing
  marker alone says nothing, and the done marker ends a one-sitting run.

A blank reply in always_on is malformed: it is asked for again once, and counted in
``Answer.used`` (in the relay the relay itself asks for an empty line again).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from interplay.records import Task
from interplay.run.agent import ChatSession
from interplay.run.episode import EpisodeContext
from interplay.usersim import Answer, Person, Read, UserSim

DEFAULT_TEMPLATE = (
    "You are role-playing a user who is talking to an AI assistant. Never act as the "
    "assistant.\n"
    "Who you are: {description}\n"
    "Your situation and goal: {scenario}\n"
    "Write only the user's next message, in one or two short sentences. "
    "When your goal is met, or the assistant cannot help, reply with exactly {done_marker} "
    "and nothing else."
)
DEFAULT_OPENING = "Write your first message to the assistant."
DEFAULT_NOTHING = "###NOTHING###"
RETRY = ("Your reply was empty. Write only your message to the assistant, in one or two "
         "sentences{nothing}.")
_REPLYING_TO = re.compile(r"^\s*(?:re:?\s*)?#(\d+)\s*[:.)-]?\s*", re.I)
_QUOTE = re.compile(r"^\s*>\s*(.+?)\s*(?:\n|$)")


def fill(template: str, values: Mapping[str, str]) -> str:
    """Substitute ``{name}`` placeholders in one pass: text inside a value is never
    rewritten, and unknown placeholders stay as they are."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], m[0]), template)


@attrs.define
class LlmUserConfig:
    seat: str = "user"
    template: str = DEFAULT_TEMPLATE
    opening: str = DEFAULT_OPENING
    #: Her whole reply when she reads and has nothing to say (always_on).
    nothing_marker: str = DEFAULT_NOTHING


class LlmUserSim(UserSim):
    """Plays the user with an LLM agent (the ``user`` seat) from a description."""

    name = "llm"
    Config: ClassVar[type] = LlmUserConfig

    def __init__(self) -> None:
        super().__init__()
        self._session: ChatSession | None = None
        self._done_marker = ""
        self._system = ""
        self._ctx: EpisodeContext | None = None
        # Scripted lines of hers (the opening request, timed lines) already shown to the model.
        self._shown_lines = 0

    async def setup(self, person: Person, ctx: EpisodeContext) -> None:
        await super().setup(person, ctx)
        cfg: LlmUserConfig = self.config
        self._done_marker = str(person.info.get("done_marker", ""))
        self._system = fill(cfg.template, {"description": person.description,
                                           "scenario": person.scenario,
                                           "done_marker": self._done_marker,
                                           "name": person.name})
        self._ctx = ctx

    async def answer(self, read: Read) -> Answer:
        assert self._ctx is not None, "setup() first"
        # always_on fills local_time: the read is shown whole, and she never writes an opening
        # (hers comes from the task).
        structured = bool(read.local_time)
        if self._session is None:
            task = Task(idx=self._ctx.task.idx, prompt=None if structured else self.config.opening,
                        system_prompt=self._system)
            self._session = self._ctx.agent(self.config.seat).chat(task)
        prompt = self._prompt(read) if structured else read.text  # None: the opening
        malformed = 0
        # The relay asks for an empty line again itself (empty_retries); always_on does not.
        attempts = 2 if structured else 1
        for attempt in range(1, attempts + 1):
            reply = await self._session.turn(prompt)
            text = reply.text.strip()
            used = {"model_calls": float(attempt), "malformed": float(malformed)}
            if reply.stopped:
                why = self._session.trace.error_type or reply.stop_condition or "stopped"
                return Answer(text=text, error=why, used=used)
            if text:
                return self._read_reply(text, used)
            malformed += 1
            prompt = RETRY.format(nothing=f", or exactly {self.config.nothing_marker}")
        return Answer(text="", used={"model_calls": float(attempts),
                                     "malformed": float(malformed)})

    def _prompt(self, read: Read) -> str:
        cfg: LlmUserConfig = self.config
        example = read.messages[-1].number if read.messages else 1
        how = [f"Reply with only your message to the assistant. To answer one of its "
               f"messages, start with its number (e.g. #{example})." if not read.last_read
               else "This is the last time you look at this chat: say briefly how well the "
                    "assistant helped you.",
               f"If you have nothing to say, reply with exactly {cfg.nothing_marker}."]
        if self._done_marker and read.done_ends_run and not read.last_read:
            how.append(f"When your goal is met, end your message with {self._done_marker}.")
        scripted = [line for line in read.you_sent if line.kind != "reply"]
        earlier = "".join(f"Earlier ({line.at}) you wrote to the assistant: {line.text}\n"
                          for line in scripted[self._shown_lines:])
        self._shown_lines = len(scripted)
        return f"{earlier}{read.render()}\n\n{' '.join(how)}"

    def _read_reply(self, text: str, used: dict[str, float]) -> Answer:
        if text == self.config.nothing_marker:
            return Answer(text="", nothing=True, used=used)
        done = bool(self._done_marker) and text.endswith(self._done_marker)
        if done:
            text = text[:-len(self._done_marker)].strip()
        replying_to: int | str | None = None
        if match := _REPLYING_TO.match(text):
            replying_to, text = int(match[1]), text[match.end():].strip()
        elif match := _QUOTE.match(text):
            replying_to, text = match[1], text[match.end():].strip() or text
        return Answer(text=text, done=done, used=used, replying_to=replying_to)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def person_from_task(task: Task, description: str, **info: Any) -> Person:
    """The person a relay's user sim plays: the task's persona and its scenario (the real,
    unmasked prompt)."""
    scenario = str(task.info.get("scenario") or (task.prompt if isinstance(task.prompt, str)
                                                 else "\n".join(m.text for m in task.prompt or ())))
    return Person(description=str(task.info.get("persona") or description), scenario=scenario,
                  info=dict(info))
