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

:class:`LlmUserSim` is also the base of other LLM-played sims: a subclass changes the system
prompt, what each read shows and how a reply is read (``parse`` returns an Answer, or what to
tell her when the reply is malformed), and keeps the session, the one retry, the counts and
``Answer.error`` on a model failure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from interplay.contracts.contexts import ChatSession, EpisodeContext
from interplay.contracts.usersim import Answer, Person, Read, UserSim
from interplay.values.records import Message, Task

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
#: Characters a token, for ``max_context_tokens``: what the embedded model's tokenizer read
#: of an always_on month's reads (dates, times and numbers), rounded down.
CHARS_PER_TOKEN = 2.5


def fill_placeholders(template: str, values: Mapping[str, str]) -> str:
    """Substitute ``{name}`` placeholders in one pass: text inside a value is never
    rewritten, and unknown placeholders stay as they are."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], m[0]), template)


@attrs.define
class LlmUserConfig:
    """The ``llm`` user sim's settings: the seat that plays her, the template her system
    prompt is made from (``{placeholders}`` filled from the person), her opening line, and what
    she answers when she has nothing to say."""

    #: The seat whose model plays her (an untrainable seat of the env).
    seat: str = "user"
    #: Her system prompt, with {description}, {scenario}, {name} and {done_marker} filled in one
    #: pass.
    template: str = DEFAULT_TEMPLATE
    #: What her model is asked for her first message (when the task gives no opening line).
    opening: str = DEFAULT_OPENING
    #: Her whole reply when she reads and has nothing to say (always_on).
    nothing_marker: str = DEFAULT_NOTHING
    #: The tokens her model is sent at most, estimated at 2.5 characters a token (her reads
    #: are full of dates): her system prompt, what she reads now, and as many of her latest
    #: exchanges as fit; older ones are left out of what is sent (her trace keeps them all).
    #: The default fits the embedded model's 8k window with room for her reply, and holds a
    #: month of always_on reads. None: everything, always.
    max_context_tokens: int | None = 6000


class LlmUserSim(UserSim):
    """Plays the user with an LLM agent (the ``user`` seat) from a description."""

    name = "llm"
    Config: ClassVar[type] = LlmUserConfig

    #: How many times one read may be answered: a malformed reply is asked for again once.
    attempts: ClassVar[int] = 2

    def __init__(self) -> None:
        super().__init__()
        self._session: ChatSession | None = None
        self._done_marker = ""
        self._system = ""
        self._ctx: EpisodeContext | None = None
        # Scripted lines of hers (the opening request, timed lines) already shown to the model.
        self._shown_lines = 0

    @property
    def done_marker(self) -> str:
        """What she writes when she is done (the step's, from ``person.info``)."""
        return self._done_marker

    @property
    def ctx(self) -> EpisodeContext:
        assert self._ctx is not None, "setup() first"
        return self._ctx

    async def setup(self, person: Person, ctx: EpisodeContext) -> None:
        await super().setup(person, ctx)
        self._done_marker = str(person.info.get("done_marker", ""))
        self._ctx = ctx
        self._system = self.system_prompt(person)

    # -- what a subclass changes -----------------------------------------------------------

    def system_prompt(self, person: Person) -> str:
        """The user seat's system prompt: ``template`` filled with :meth:`prompt_values`."""
        return fill_placeholders(self.config.template, self.prompt_values(person))

    def prompt_values(self, person: Person) -> dict[str, str]:
        """What ``template``'s placeholders are filled with (her scenario says what her first
        line was when the task gave it)."""
        scenario = person.scenario
        line = self.task_opening()
        if line is not None:
            scenario += f"\nYour first message to the assistant was: {line}"
        return {"description": person.description, "scenario": scenario,
                "done_marker": self._done_marker, "name": person.name}

    def opening(self) -> str:
        """What the model is asked for her first line in the relay."""
        return str(self.config.opening)

    def task_opening(self) -> str | None:
        """Her first line in the relay when the task gives it (``info.opening``): said as
        written, the model not asked for one."""
        line = self._ctx.task.info.get("opening") if self._ctx is not None else None
        return line.strip() if isinstance(line, str) and line.strip() else None

    def prompt(self, read: Read) -> str:
        """What the model is shown for a read: in the relay the assistant's reply, in
        always_on the read rendered with :meth:`how_to_answer`."""
        if not read.local_time:
            return read.text or ""
        if read.text is None and not read.messages and not read.phone:
            # always_on: she speaks first (her opening, at its time).
            return f"It is {read.local_time}. {self.opening()}"
        scripted = [line for line in read.you_sent if line.kind != "reply"]
        earlier = "".join(f"Earlier ({line.at}) you wrote to the assistant: {line.text}\n"
                          for line in scripted[self._shown_lines:])
        self._shown_lines = len(scripted)
        return f"{earlier}{read.render()}\n\n{' '.join(self.how_to_answer(read))}"

    def how_to_answer(self, read: Read) -> list[str]:
        """The always_on instructions that follow a rendered read."""
        cfg: LlmUserConfig = self.config
        example = read.messages[-1].number if read.messages else 1
        how = [f"Reply with only your message to the assistant. To answer one of its "
               f"messages, start with its number (e.g. #{example})." if not read.last_read
               else "This is the last time you look at this chat: say briefly how well the "
                    "assistant helped you.",
               f"If you have nothing to say, reply with exactly {cfg.nothing_marker}."]
        done = self.done_line()
        if done and read.done_ends_run and not read.last_read:
            how.append(done)
        return how

    def done_line(self) -> str:
        """How she says she is done ("" when she has no way to)."""
        marker = self._done_marker
        return f"When your goal is met, end your message with {marker}." if marker else ""

    def parse(self, text: str, read: Read) -> Answer | str:
        """Her reply (stripped) as an Answer, or, when it is malformed, what she is told when
        asked again. A blank reply in the relay is passed on (the relay asks again itself)."""
        if not text:
            if not read.local_time:
                return Answer(text="")
            return RETRY.format(nothing=f", or exactly {self.config.nothing_marker}")
        if text == self.config.nothing_marker:
            return Answer(text="", nothing=True)
        done = bool(self._done_marker) and text.endswith(self._done_marker)
        if done:
            text = text[:-len(self._done_marker)].strip()
        replying_to, text = reply_target_of(text)
        return Answer(text=text, done=done, replying_to=replying_to)

    # -- the exchange ------------------------------------------------------------------------

    async def answer(self, read: Read) -> Answer:
        """One answer: the read shown to the model; a malformed reply asked for again (up to
        ``attempts`` replies in all) and counted in ``used["malformed"]``; a model failure
        is ``Answer.error``."""
        ctx = self.ctx
        opening = read.text is None and not read.local_time
        if opening and (line := self.task_opening()) is not None:
            return Answer(text=line)
        if self._session is None:
            # always_on never asks her for an opening: hers comes from the task.
            task = Task(idx=ctx.task.idx, prompt=self.opening() if opening else None,
                        system_prompt=self._system)
            self._session = ctx.agent(self.config.seat).chat(task)
        prompt: str | None = None if opening else self.prompt(read)
        malformed = 0
        # A retried answer keeps her first reply as written, for the read's record.
        first: str | None = None
        for attempt in range(1, self.attempts + 1):
            reply = await self._session.turn(prompt, context=self.context(prompt))
            used = {"model_calls": float(attempt), "malformed": float(malformed)}
            if reply.stopped:
                why = self._session.trace.error_type or reply.stop_condition or "stopped"
                return Answer(text=reply.text.strip(), error=why, used=used, first_reply=first,
                              messages=list(reply.messages))
            parsed = self.parse(reply.text.strip(), read)
            if isinstance(parsed, Answer):
                parsed.used = {**used, **parsed.used}
                parsed.first_reply = first
                parsed.messages = list(reply.messages)
                return parsed
            malformed += 1
            if first is None:
                first = reply.text
            prompt = parsed
        return Answer(text="", used={"model_calls": float(self.attempts),
                                     "malformed": float(malformed)}, first_reply=first)

    def context(self, prompt: str | None) -> list[Message] | None:
        """What her model is sent for ``prompt`` when her whole conversation would pass
        ``max_context_tokens``: her system prompt, her latest exchanges (whole: a message of
        hers and what followed it), as many as fit, and ``prompt``; None to send it all."""
        # A subclass whose settings have no max_context_tokens sends everything, as before.
        budget = getattr(self.config, "max_context_tokens", None)
        if budget is None or prompt is None or self._session is None:
            return None
        conversation = list(self._session.trace.messages)
        head = conversation[:1] if conversation and conversation[0].role == "system" else []
        body = conversation[len(head):]
        new = Message("user", prompt)
        fixed = sum(len(m.wire_json()) for m in (*head, new))
        limit = budget * CHARS_PER_TOKEN
        # From the newest message back: the oldest of her exchanges whose start still fits.
        size, start = fixed, None
        for i in range(len(body) - 1, -1, -1):
            size += len(body[i].wire_json())
            if size > limit:
                break
            if body[i].role == "user":
                start = i
        if start is None:
            return [*head, new] if body else None
        return None if start == 0 else [*head, *body[start:], new]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def reply_target_of(text: str) -> tuple[int | str | None, str]:
    """The message a reply names (``#N`` first) or quotes (a leading ``> ...`` line), and the
    reply without it."""
    if match := _REPLYING_TO.match(text):
        return int(match[1]), text[match.end():].strip()
    if match := _QUOTE.match(text):
        return match[1], text[match.end():].strip() or text
    return None, text


def person_from_task(task: Task, description: str, **info: Any) -> Person:
    """The person a relay's user sim plays: the task's persona and its scenario (the real,
    unmasked prompt)."""
    scenario = str(task.info.get("scenario") or (task.prompt if isinstance(task.prompt, str)
                                                 else "\n".join(m.text for m in task.prompt or ())))
    return Person(description=str(task.info.get("persona") or description), scenario=scenario,
                  info=dict(info))
