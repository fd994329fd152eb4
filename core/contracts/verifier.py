"""The Verifier contract: what scores an episode.

``check(steps)`` runs when a task loads and refuses a verifier that does not fit the env's
steps (for example a payoff verifier on an env whose steps write no payoffs). ``score`` runs
once the env's program has finished without an error: an episode that ended in one (a model
fault, a user sim that failed, a step that raised) is never scored, so never given to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from interplay.config.loading import settle
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.harness import NoConfig
from interplay.contracts.step import Step
from interplay.values.records import Episode, Reward


class Verifier:
    """Base class of every verifier. Subclass it and register it with ``register_verifiers``.

    ``score`` returns one Reward, or several (one per seat for a payoff). A Reward with a
    ``seat`` applies to that seat's trace only; one without applies to the episode and to
    every trainable trace.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig

    def __init__(self, config: Any = None) -> None:
        self.config = settle(config, self, "verifier")

    def check(self, steps: Sequence[Step]) -> list[str]:
        """Problems scoring an env made of ``steps`` (empty when it fits)."""
        return []

    async def score(self, episode: Episode, ctx: EpisodeContext) -> Reward | list[Reward]:
        """Score one finished episode: a Reward, or several (one per seat for a payoff)."""
        raise NotImplementedError(f"verifier {self.name!r} does not implement score()")
