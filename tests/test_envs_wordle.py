"""wordle end to end over real HTTP with the scripted model: wins, losses, re-asks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from interplay.builtin_envs.wordle import WordleConfig, feedback, read_guess
from interplay.plugins import host as plugins
from interplay.run.episode import RunResources, run_episode
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, run_scripted
from interplay.values.records import Episode, Task


async def play(script: Sequence[str | ScriptedReply], *, secret: str = "crane",
               config: Any = None) -> tuple[Episode, list[ScriptedRequest]]:
    env = plugins.get("envs", "wordle")(config)
    env.check()
    task = Task(idx=0, answer=secret)
    run = await run_scripted(env, task, list(script), seed=3)
    return run.episode, run.requests


def last_user(req: ScriptedRequest) -> str:
    return req.last_user_text()


@pytest.mark.parametrize(("guess", "secret", "marks"), [
    ("slate", "crane", "--G-G"),
    ("crane", "crane", "GGGGG"),
    ("eerie", "crane", "--Y-G"),   # only one e in the secret, and it is green
    ("babes", "abbey", "YYGG-"),
    ("sissy", "pious", "YG---"),   # one s in the secret: only the first s is marked
])
def test_feedback_follows_the_duplicate_letter_rules(guess: str, secret: str,
                                                    marks: str) -> None:
    assert feedback(guess, secret) == marks


def test_guess_reading() -> None:
    assert read_guess("I think [Crane] fits. Maybe [slate]") == "slate"
    assert read_guess("crane") == "crane"
    assert read_guess("My guess: slate") == "slate"
    assert read_guess("") is None
    assert read_guess("no idea at all") is None


async def test_winning_game_is_solved_in_two_guesses() -> None:
    episode, requests = await play(["Let me start with [slate]", "Then it must be [crane]."])
    assert episode.error is None
    assert len(requests) == 2
    assert "SLATE: - - G - G" in last_user(requests[1])
    assert "5 guesses left" in last_user(requests[1])
    assert episode.reward == 1.0
    assert episode.metrics["solved"] == 1.0
    assert episode.metrics["guesses"] == 2.0
    result = episode.results["wordle"]
    assert result["guesses"] == ["slate", "crane"]
    assert result["feedback"] == ["--G-G", "GGGGG"]
    assert episode.trace("assistant").stop_condition == "user_done"


async def test_losing_game_uses_all_six_guesses() -> None:
    episode, requests = await play(["[slate]", "[pious]", "[light]", "[brick]", "[ghost]",
                                    "[mango]"])
    assert len(requests) == 6
    assert episode.reward == 0.0
    assert episode.metrics["solved"] == 0.0
    assert episode.metrics["guesses"] == 6.0
    assert episode.results["wordle"]["ended_by"] == "out_of_guesses"
    assert "1 guess left" in last_user(requests[-1])


async def test_scaled_reward_counts_guesses() -> None:
    cls = plugins.get("envs", "wordle")
    config = cls.Config(game=WordleConfig(scale_by_guesses=True))
    episode, _ = await play(["[slate]", "[pious]", "[crane]"], config=config)
    assert episode.reward == pytest.approx(4 / 6)


async def test_empty_reply_is_re_asked_and_does_not_use_a_guess() -> None:
    episode, requests = await play(["", "[crane]"])
    assert episode.error is None
    assert len(requests) == 2
    assert "could not read a guess" in last_user(requests[1])
    assert episode.reward == 1.0
    assert episode.metrics["reasks"] == 1.0
    assert episode.metrics["guesses"] == 1.0


async def test_unreadable_replies_past_the_budget_end_the_game_without_a_crash() -> None:
    episode, requests = await play(["", "hmm, not sure", "no idea at all"])
    assert episode.error is None
    assert len(requests) == 3  # the opening plus the two re-asks of the default budget
    assert episode.reward == 0.0
    assert episode.results["wordle"]["ended_by"] == "unreadable"
    assert episode.metrics["reasks"] == 2.0
    assert episode.metrics["guesses"] == 0.0


async def test_the_format_example_never_gives_the_secret_away() -> None:
    _, requests = await play(["[house]"], secret="house",
                             config=plugins.get("envs", "wordle").Config(
                                 game=WordleConfig(max_guesses=1)))
    system = requests[0].messages[0]["content"]
    assert "[plant]" in system and "house" not in system


async def test_the_shipped_taskset_plays() -> None:
    env = plugins.get("envs", "wordle")()
    tasks = list(env.tasks())
    assert tasks and all(len(t.answer) == 5 for t in tasks)
    async with ScriptedModel([f"[{tasks[0].answer}]"]) as model:
        resources = RunResources(endpoint=model.endpoint)
        try:
            episode = await run_episode(env, tasks[0], resources=resources, seed=0)
        finally:
            await resources.aclose()
    assert episode.reward == 1.0


async def test_a_failing_model_ends_the_game_and_is_recorded() -> None:
    episode, _ = await play(["[slate]", ScriptedReply.fault(400)])
    # A game a model fault cut short is not the model's score: recorded, not scored.
    assert episode.reward is None
    assert episode.results["wordle"]["ended_by"] == "assistant_stopped"
    assert episode.error_type == "bad_request"
    assert episode.metrics["guesses"] == 1.0
