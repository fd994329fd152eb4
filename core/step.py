"""The Step contract: one piece of an env's program.

An env's program is an ordered list of steps; each ``run(ctx)`` drives agents through the
episode context (:class:`~interplay.contexts.EpisodeContext`: opening chat sessions, writing
results). ``check(steps)`` runs when the env
loads (``Env.check``), and ``check_seats(seats)`` when a run has resolved the seats
(``Env.check_seats``), so a step that does not fit the others or its seats is refused before
any model is called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from interplay.config import settle
from interplay.contexts import EpisodeContext, SeatSpec
from interplay.harness import NoConfig


class Step:
    """Base class of every step. Subclass it and register it with ``register_steps``."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig
    #: Keys this step writes into ``ctx.results`` (verifiers check for what they read).
    writes: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, config: Any = None) -> None:
        self.config = settle(config, self, "step")

    def seats(self) -> set[str]:
        """The seats this step opens sessions for."""
        return {str(getattr(self.config, "seat", "assistant"))}

    def check(self, steps: Sequence[Step]) -> list[str]:
        """Problems with this step among ``steps`` (empty when it fits)."""
        return []

    def check_seats(self, seats: Mapping[str, SeatSpec]) -> list[str]:
        """Problems with this step on the env's seats as a run resolved them (the env's
        settings under the run's overrides: harness, sampling, timeout); runs when the run
        starts, before any model call. Empty when it fits."""
        return []

    async def run(self, ctx: EpisodeContext) -> None:
        raise NotImplementedError(f"step {self.name!r} does not implement run()")
