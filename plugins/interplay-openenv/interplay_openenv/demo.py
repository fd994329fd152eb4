"""A small OpenEnv environment to try the adapter with: guess a number from 1 to 100 in at most
seven guesses, told "higher" or "lower" after each.

Written with OpenEnv's own server classes, as any OpenEnv environment is (an ``Action`` and an
``Observation`` model, an ``Environment``, and ``create_app``), and served by the adapter for a
run::

    interplay eval openenv --set env.app=interplay_openenv.demo:app

The secret comes from reset's seed. The reward is 1 for the step that finds it, 0 otherwise.
Importing this module imports openenv-core's server (FastAPI); the adapter itself never does.
"""

from __future__ import annotations

import random
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from pydantic import Field

LOW, HIGH, GUESSES = 1, 100, 7


class GuessAction(Action):
    guess: int = Field(..., description=f"your guess, a whole number from {LOW} to {HIGH}")


class GuessObservation(Observation):
    message: str = Field(default="", description="what the game says")


class GuessEnvironment(Environment):
    """Guess the secret number; each session is its own game."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._secret = LOW

    def reset(self, seed: int | None = None, episode_id: str | None = None) -> GuessObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._secret = random.Random(seed).randint(LOW, HIGH)
        return GuessObservation(message=f"I am thinking of a number from {LOW} to {HIGH}. "
                                        f"You have {GUESSES} guesses.")

    def step(self, action: GuessAction) -> GuessObservation:  # type: ignore[override]
        self._state.step_count += 1
        left = GUESSES - self._state.step_count
        if action.guess == self._secret:
            return GuessObservation(message=f"{action.guess} is right!", reward=1.0, done=True)
        hint = "higher" if action.guess < self._secret else "lower"
        if left <= 0:
            return GuessObservation(message=f"{action.guess} is wrong; it was {self._secret}.",
                                    reward=0.0, done=True)
        return GuessObservation(message=f"{action.guess} is wrong: go {hint}. {left} guesses "
                                        f"left.", reward=0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess_number",
                 max_concurrent_envs=64)
