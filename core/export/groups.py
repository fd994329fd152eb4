"""Groups for RL: the rollouts of one task by one seat, their reward statistics and each
rollout's group-normalized advantage, and the best rollout of each group.

A group holds every scored rollout of its task and seat (a trace with a reward, in an episode
that did not end in an error), whatever the export's filters keep: an advantage says how a
rollout did against all its siblings, not against the ones that passed ``--min-reward``.
The advantage of a reward ``r`` is ``(r - mean) / std`` (``std`` the population standard
deviation of the group's rewards; 0 when they are all equal), or ``r - mean`` with
``advantage = "mean"``. What is kept is a count, a mean and a sum per group, never the
rewards.
"""

from __future__ import annotations

import math
from typing import Literal

import attrs

Advantage = Literal["std", "mean"]


def group_id(task_idx: int, seat: str) -> str:
    """The group a rollout belongs to: its task and seat."""
    return f"{task_idx}/{seat}"


@attrs.define
class Stats:
    """A group's rewards so far: their count, mean and sum of squared deviations (Welford's
    running form, exact enough where a sum of squares would cancel)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, reward: float) -> None:
        self.n += 1
        delta = reward - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (reward - self.mean)

    @property
    def std(self) -> float:
        """The population standard deviation (0 for a single rollout)."""
        return math.sqrt(self.m2 / self.n) if self.n > 1 and self.m2 > 0 else 0.0

    def advantage(self, reward: float | None, how: Advantage = "std") -> float | None:
        if reward is None:
            return None
        centered = reward - self.mean
        if how == "mean":
            return centered
        std = self.std
        return centered / std if std > 0 else 0.0


@attrs.define
class Groups:
    """Every group's statistics, and each group's best rollout among those offered."""

    stats: dict[str, Stats] = attrs.Factory(dict)
    #: A group's best so far: (reward, -rollout) to compare, and the rollout's key.
    best: dict[str, tuple[tuple[float, int], str]] = attrs.Factory(dict)

    def add(self, group: str, reward: float | None) -> None:
        if reward is not None:
            self.stats.setdefault(group, Stats()).add(reward)

    def offer(self, group: str, reward: float | None, rollout: int, key: str) -> None:
        """A candidate for the group's best: the highest reward, then the lowest rollout."""
        if reward is None:
            return
        rank = (reward, -rollout)
        held = self.best.get(group)
        if held is None or rank > held[0]:
            self.best[group] = (rank, key)

    def is_best(self, group: str, key: str) -> bool:
        held = self.best.get(group)
        return held is not None and held[1] == key

    def advantage(self, group: str, reward: float | None, how: Advantage) -> float | None:
        stats = self.stats.get(group)
        return None if stats is None else stats.advantage(reward, how)
