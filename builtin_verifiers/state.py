"""Verifiers that read what an env's steps wrote into ``ctx.results``, not the text.

- ``state_match``: the final world state (``ctx.results[key]``, changed by tools during the
  episode) must equal the task's expected state (``task.info[expected]``); reward 1 or 0, the
  differing paths in the reason.
- ``step_score``: the score a step computed itself (``ctx.results[key][field]``, e.g. the
  fraction of puzzle turns answered right) becomes the reward.

Both refuse, when the env loads, an env none of whose steps writes the key they read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.values.records import Episode, Reward


def writers_problem(key: str, steps: Sequence[Step], reader: str) -> list[str]:
    """The problem when no step declares it writes ``key`` (empty when one does)."""
    if not key:
        return [f"{reader} needs a key naming the results entry it reads"]
    if any(key in step.writes for step in steps):
        return []
    names = ", ".join(s.name for s in steps) or "none"
    return [f"reads ctx.results[{key!r}] but no step writes it (steps: {names}); "
            f"add a step whose writes include {key!r}"]


def differences(got: Any, want: Any, path: str = "", limit: int = 10) -> list[str]:
    """Paths at which two JSON-like values differ (at most ``limit``)."""
    out: list[str] = []

    def walk(a: Any, b: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                if k not in a:
                    out.append(f"{p}.{k} (missing)")
                elif k not in b:
                    out.append(f"{p}.{k} (unexpected)")
                else:
                    walk(a[k], b[k], f"{p}.{k}")
                if len(out) >= limit:
                    return
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
            if len(a) != len(b):
                out.append(f"{p} (length {len(a)}, expected {len(b)})")
                return
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{p}[{i}]")
        elif a != b:
            out.append(p or "(the whole state)")

    walk(got, want, path)
    return out


@attrs.define
class StateMatchConfig:
    """The ``state_match`` verifier's settings: where the final world is, and where the task
    keeps the expected one."""

    #: The results entry holding the final world state.
    key: str = "state"
    #: The task ``info`` field holding the expected final state.
    expected: str = "expected_state"
    #: Its share of the episode's reward, a mean of the verifiers' rewards weighted by this (0
    #: records the reward without counting it).
    weight: float = 1.0


class StateMatch(Verifier):
    """Reward 1 when the final world state equals the task's expected state, else 0."""

    name = "state_match"
    Config: ClassVar[type] = StateMatchConfig

    def check(self, steps: Sequence[Step]) -> list[str]:
        cfg: StateMatchConfig = self.config
        problems = writers_problem(cfg.key, steps, "state_match")
        if not cfg.expected:
            problems.append("expected is empty; name the task info field with the expected "
                            "state, e.g. expected = \"expected_state\"")
        return problems

    async def score(self, episode: Episode, ctx: EpisodeContext) -> Reward:
        cfg: StateMatchConfig = self.config
        if cfg.expected not in episode.task.info:
            raise InterplayError(f"task {episode.task.idx} has no info.{cfg.expected} "
                                 f"(the expected state state_match compares with)")
        if cfg.key not in episode.results:
            raise RuntimeError(f"no state was written to results[{cfg.key!r}]")
        diff = differences(episode.results[cfg.key], episode.task.info[cfg.expected],
                           path=cfg.key)
        ok = not diff
        reason = ("the final state equals the expected state" if ok
                  else f"the final state differs at {', '.join(diff)}")
        return Reward(self.name, 1.0 if ok else 0.0, weight=cfg.weight, reason=reason,
                      info={"differences": diff})


@attrs.define
class StepScoreConfig:
    #: The results entry a step wrote (usually the step's name, e.g. "wordle").
    key: str = ""
    #: The field of that entry holding the score.
    field: str = "score"
    #: Its share of the episode's reward, a mean of the verifiers' rewards weighted by this (0
    #: records the reward without counting it).
    weight: float = 1.0


class StepScore(Verifier):
    """Reward = the score a step computed (``ctx.results[key][field]``), named after the key."""

    name = "step_score"
    Config: ClassVar[type] = StepScoreConfig

    def check(self, steps: Sequence[Step]) -> list[str]:
        return writers_problem(self.config.key, steps, "step_score")

    async def score(self, episode: Episode, ctx: EpisodeContext) -> Reward:
        cfg: StepScoreConfig = self.config
        entry = episode.results.get(cfg.key)
        value = entry.get(cfg.field) if isinstance(entry, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                value):
            raise RuntimeError(f"results[{cfg.key!r}][{cfg.field!r}] is not a number "
                               f"(the step did not finish scoring)")
        detail = {k: v for k, v in entry.items() if isinstance(v, int | float | bool | str)}
        return Reward(cfg.key, float(value), weight=cfg.weight,
                      reason=f"{cfg.key} scored {float(value):.3g}", info=detail)
