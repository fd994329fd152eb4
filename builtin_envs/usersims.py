"""``llm``: the default user sim, which plays the user with an LLM agent from a description.

The user is another agent's chat session (the ``user`` seat, null harness, untrainable) whose
system prompt is the persona with the task's scenario. It speaks first; it is done when its
reply is exactly the done marker.
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


def fill(template: str, values: Mapping[str, str]) -> str:
    """Substitute ``{name}`` placeholders in one pass: text inside a value is never
    rewritten, and unknown placeholders stay as they are."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], m[0]), template)


@attrs.define
class LlmUserConfig:
    seat: str = "user"
    template: str = DEFAULT_TEMPLATE
    opening: str = DEFAULT_OPENING


class LlmUserSim(UserSim):
    """Plays the user with an LLM agent (the ``user`` seat) from a description."""

    name = "llm"
    Config: ClassVar[type] = LlmUserConfig

    def __init__(self) -> None:
        super().__init__()
        self._session: ChatSession | None = None
        self._done_marker = ""

    async def setup(self, person: Person, ctx: EpisodeContext) -> None:
        await super().setup(person, ctx)
        cfg: LlmUserConfig = self.config
        self._done_marker = str(person.info.get("done_marker", ""))
        system = fill(cfg.template, {"description": person.description,
                                     "scenario": person.scenario,
                                     "done_marker": self._done_marker,
                                     "name": person.name})
        task = Task(idx=ctx.task.idx, prompt=cfg.opening, system_prompt=system)
        self._session = ctx.agent(cfg.seat).chat(task)

    async def answer(self, read: Read) -> Answer:
        assert self._session is not None, "setup() first"
        reply = await self._session.turn(read.text)  # None: the opening
        text = reply.text.strip()
        if reply.stopped:
            return Answer(text=text, error=reply.stop_condition or "stopped")
        return Answer(text=text, done=bool(self._done_marker) and text == self._done_marker)

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
