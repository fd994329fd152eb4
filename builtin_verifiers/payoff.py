"""``payoff``: the payoffs an env's steps wrote (``ctx.results["payoffs"] = {seat: float}``),
one Reward per seat.

Games and other multi-seat envs compute who won themselves; this verifier only carries the
result onto each seat's trace. It refuses, when the env loads, an env none of whose steps
declares ``"payoffs"`` in ``Step.writes``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import attrs

from interplay.builtin_verifiers.state import writers_problem
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.values.records import Episode, Reward


@attrs.define
class PayoffConfig:
    #: The results entry holding ``{seat: payoff}``.
    key: str = "payoffs"
    #: Seats that must have a payoff (empty: whichever seats the env wrote).
    seats: list[str] = attrs.Factory(list)
    #: Its share of the episode's reward, a mean of the verifiers' rewards weighted by this (0
    #: records the reward without counting it).
    weight: float = 1.0


class Payoff(Verifier):
    """One Reward per seat from the payoffs the env wrote."""

    name = "payoff"
    Config: ClassVar[type] = PayoffConfig

    def check(self, steps: Sequence[Step]) -> list[str]:
        return writers_problem(self.config.key, steps, self.name)

    async def score(self, episode: Episode, ctx: EpisodeContext) -> list[Reward]:
        cfg: PayoffConfig = self.config
        payoffs = episode.results.get(cfg.key)
        if not isinstance(payoffs, dict) or not payoffs:
            raise RuntimeError(f"no payoffs were written to results[{cfg.key!r}]")
        missing = [s for s in cfg.seats if s not in payoffs]
        if missing:
            raise RuntimeError(f"no payoff for seat(s) {', '.join(missing)}")
        rewards = []
        for seat, value in payoffs.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                    value):
                raise RuntimeError(f"the payoff of seat {seat!r} is not a finite number")
            rewards.append(Reward(self.name, float(value), weight=cfg.weight, seat=str(seat),
                                  reason=f"payoff of {seat}"))
        return rewards
