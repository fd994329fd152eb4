"""``exact``, ``contains`` and ``regex`` on real episodes against the scripted model: case
folding, a subclass of ``regex`` under its own name, and patterns that do not compile."""

from __future__ import annotations

from typing import Any

import pytest

from interplay.builtin_envs.steps import OneShot
from interplay.builtin_verifiers.match import Exact, MatchConfig, Regex
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.testing import run_scripted
from interplay.values.records import Episode, Task


class HouseRegex(Regex):
    """A regex verifier registered under its own name."""

    name = "house_regex"


def env_with(*verifiers: Verifier) -> Env:
    class Matched(Env):
        name = "matched"
        seats = {"assistant": SeatSpec(harness="null")}

        def steps(self) -> list[Any]:
            return [OneShot()]

        def verifiers(self) -> list[Any]:
            return list(verifiers)

    return Matched()


async def episode(reply: str, task: Task, *verifiers: Verifier) -> Episode:
    env = env_with(*verifiers)
    env.check()
    return (await run_scripted(env, task, [reply], seed=None)).episode


async def test_a_regex_subclass_does_not_casefold_its_pattern() -> None:
    # Casefolding the pattern would turn \D (a non-digit) into \d (a digit).
    ep = await episode("ABC", Task(0, prompt="letters?", answer=r"^\D+$"),
                       Regex(MatchConfig()), HouseRegex(MatchConfig()),
                       Exact(MatchConfig(expected="abc")))
    assert {r.name: r.value for r in ep.rewards} == {"regex": 1.0, "house_regex": 1.0,
                                                     "exact": 1.0}


async def test_a_task_answer_that_is_not_a_pattern_scores_zero_with_a_reason() -> None:
    ep = await episode("anything", Task(0, prompt="x", answer="(unclosed"),
                       HouseRegex(MatchConfig()))
    assert ep.error is None
    (reward,) = ep.rewards
    assert reward.value == 0.0
    assert reward.reason is not None and "not a valid regular expression" in reward.reason


def test_a_configured_pattern_that_does_not_compile_is_refused_at_load() -> None:
    env = env_with(Regex(MatchConfig(expected="[a-")))
    with pytest.raises(InterplayError, match="expected is not a valid regular expression"):
        env.check()
