"""The UserSim contract: who a simulated user is and how they answer.

The user-sim relay and always_on both go through this interface, so a third-party package
can replace the builtin default by name. ``configure(settings)`` takes the sim's settings,
``setup(person, ctx)`` meets the person it plays for one episode, ``answer(read)`` returns
the user's next line (or ``done``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from interplay.config import settle
from interplay.harness import NoConfig

if TYPE_CHECKING:
    from interplay.run.episode import EpisodeContext


@attrs.define
class Person:
    """Who the simulated user is: a description and the task's scenario, plus when they are
    around (used by always_on; the relay ignores the schedule)."""

    description: str = "a typical user"
    scenario: str = ""
    name: str = "user"
    timezone: str = "UTC"
    awake_hours: tuple[int, int] = (7, 23)
    busy_hours: tuple[tuple[int, int], ...] = ()
    reply_delay_s: float = 0.0
    info: dict[str, Any] = attrs.Factory(dict)


@attrs.define
class Read:
    """What the user reads: the assistant's message (None before anyone has spoken)."""

    text: str | None
    turn: int = 0
    at: float | None = None


@attrs.define
class Answer:
    """The user's reply. ``done`` ends the exchange; ``delay_s`` is how long they took.
    ``error`` says the simulator could not answer at all (its model failed): the exchange
    ends, and not because the user was done."""

    text: str
    done: bool = False
    delay_s: float = 0.0
    error: str | None = None


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

    async def setup(self, person: Person, ctx: EpisodeContext) -> None:
        """Meet the person to play for one episode (open sessions, seed randomness)."""
        self.person = person

    async def answer(self, read: Read) -> Answer:
        raise NotImplementedError(f"user sim {self.name!r} does not implement answer()")

    async def close(self) -> None:
        """Release what ``setup`` opened."""
