"""The Step contract: one piece of an env's program.

An env's program is an ordered list of steps; each ``run(ctx)`` drives agents through the
episode context (:class:`~interplay.contracts.contexts.EpisodeContext`: opening chat sessions,
writing results). ``check(steps)`` runs when the env
loads (``Env.check``), and ``check_seats(seats)`` when a run has resolved the seats
(``Env.check_seats``), so a step that does not fit the others or its seats is refused before
any model is called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from interplay.config.loading import settle
from interplay.contracts.contexts import EpisodeContext, SeatSpec
from interplay.contracts.harness import NoConfig


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

    def plays_user(self) -> bool:
        """Whether this step runs a user sim (a modeled user): the steps whose user
        ``env.user_sim`` may choose. True for a step that overrides :meth:`use_user_sim`."""
        return type(self).use_user_sim is not Step.use_user_sim

    def use_user_sim(self, name: str, settings: dict[str, Any]) -> None:
        """Play the user with the user sim registered as ``name`` and ``settings`` (the run's
        ``env.user_sim`` and ``env.user_sim_settings``, called before :meth:`check`): ``name``
        empty keeps the step's own sim and lays ``settings`` over its settings. A step that
        runs a user sim overrides this; the base has no user and ignores it."""

    def check(self, steps: Sequence[Step]) -> list[str]:
        """Problems with this step among ``steps`` (empty when it fits)."""
        return []

    def check_seats(self, seats: Mapping[str, SeatSpec]) -> list[str]:
        """Problems with this step on the env's seats as a run resolved them (the env's
        settings under the run's overrides: harness, sampling, timeout); runs when the run
        starts, before any model call. Empty when it fits."""
        return []

    async def run(self, ctx: EpisodeContext) -> None:
        """Play this step of one episode: open the seats' exchanges through ``ctx``, write
        what it found to ``ctx.results`` and ``ctx.metrics``, and keep what it holds while the
        episode runs that the env's tools or a verifier reach too (a live simulator, a board)
        in ``ctx.store``, never on the env or in a module."""
        raise NotImplementedError(f"step {self.name!r} does not implement run()")
