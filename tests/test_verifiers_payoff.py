"""The payoff verifier: one Reward per seat from payoffs a two-seat env wrote (over real HTTP
with the scripted model), and refusal of an env whose steps write no payoffs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import pytest

from interplay.builtin_envs.steps import OneShot
from interplay.builtin_verifiers.match import Exact, MatchConfig
from interplay.builtin_verifiers.payoff import Payoff, PayoffConfig
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.errors import InterplayError
from interplay.run.episode import LiveEpisodeContext
from interplay.testing import run_scripted
from interplay.values.records import Episode, Task


@attrs.define
class HigherNumberConfig:
    #: Write a payoff that is not a number (to test the verifier's guard).
    corrupt: bool = False


class HigherNumber(Step):
    """Both players name a number; the higher one wins a chip from the other."""

    name = "higher_number"
    Config: ClassVar[type] = HigherNumberConfig
    writes = frozenset({"payoffs"})

    def seats(self) -> set[str]:
        return {"player0", "player1"}

    async def run(self, ctx: LiveEpisodeContext) -> None:
        said = {}
        for seat in ("player0", "player1"):
            trace = await ctx.agent(seat).run(ctx.task)
            found = re.findall(r"\d+", trace.messages[-1].text)
            said[seat] = int(found[-1]) if found else -1
        a, b = said["player0"], said["player1"]
        win = 0.0 if a == b else (1.0 if a > b else -1.0)
        ctx.results["payoffs"] = {"player0": win, "player1": -win}
        if self.config.corrupt:
            ctx.results["payoffs"]["player1"] = "a lot"


def game(*, corrupt: bool = False, **payoff: Any) -> Env:
    class Game(Env):
        name = "higher-number"
        seats = {"player0": SeatSpec(harness="null"), "player1": SeatSpec(harness="null")}

        def steps(self) -> list[Step]:
            return [HigherNumber(HigherNumberConfig(corrupt=corrupt))]

        def verifiers(self) -> list[Any]:
            return [Payoff(PayoffConfig(**payoff))]

    env = Game()
    env.check()
    return env


async def play(env: Env, replies: Sequence[str]) -> Episode:
    run = await run_scripted(env, Task(idx=0, prompt="Name a number."), list(replies))
    return run.episode


async def test_one_reward_per_seat_from_the_payoffs() -> None:
    episode = await play(game(), ["7", "I say 3"])
    assert episode.error is None
    by_seat = {r.seat: r.value for r in episode.rewards}
    assert by_seat == {"player0": 1.0, "player1": -1.0}
    assert all(r.name == "payoff" for r in episode.rewards)
    assert episode.trace("player0").reward == 1.0
    assert episode.trace("player1").reward == -1.0
    # Seat rewards belong to their seats; nothing is shared at the episode level.
    assert episode.reward is None
    assert episode.metrics["payoff/player0"] == 1.0 and episode.metrics["payoff/player1"] == -1.0

    episode = await play(game(), ["2", "9"])
    assert {r.seat: r.value for r in episode.rewards} == {"player0": -1.0, "player1": 1.0}


async def test_bad_or_missing_payoffs_are_recorded_as_verifier_errors() -> None:
    episode = await play(game(corrupt=True), ["7", "3"])
    assert episode.error_type == "verifier_error"
    assert "not a finite number" in (episode.error or "")
    episode = await play(game(seats=["player0", "player2"]), ["7", "3"])
    assert episode.error_type == "verifier_error"
    assert "no payoff for seat(s) player2" in (episode.error or "")


def test_payoff_is_refused_on_an_env_whose_steps_write_no_payoffs() -> None:
    class OneShotWithPayoff(Env):
        name = "no-payoffs"

        def steps(self) -> list[Step]:
            return [OneShot()]

        def verifiers(self) -> list[Any]:
            return [Exact(MatchConfig()), Payoff()]

    with pytest.raises(InterplayError) as err:
        OneShotWithPayoff().check()
    message = str(err.value)
    assert ("verifier 'payoff': reads ctx.results['payoffs'] but no step writes it "
            "(steps: one_shot)") in message
    assert "\n" not in message
