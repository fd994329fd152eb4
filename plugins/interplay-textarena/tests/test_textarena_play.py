"""Games played end to end over real HTTP against interplay's scripted model: the real games,
chat sessions, episodes and scoring; the scripted model stands in for the model only."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from textarena_players import bisect, counting_up, first_free_cell, user_texts

from interplay import Episode, InterplayError, Task
from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted
from interplay_textarena.env import TextArenaConfig, TextArenaEnv
from interplay_textarena.game import Game


def env(**settings: Any) -> TextArenaEnv:
    made = TextArenaEnv(TextArenaConfig(**settings))
    made.check()
    return made


def task(made: TextArenaEnv, idx: int = 0) -> Task:
    return next(t for t in made.tasks() if t.idx == idx)


def secret(seed: int) -> int:
    return Game("GuessTheNumber-v0", players=1, seed=seed).core.game_number


def seed_with_secret_above(n: int) -> int:
    return next(s for s in range(1000) if secret(s) > n)


# -- a single-player game ---------------------------------------------------------------------


async def test_a_single_player_game_solved() -> None:
    made = env(game="GuessTheNumber-v0")
    run = await run_scripted(made, task(made), bisect(), seed=11)
    episode = run.episode
    assert episode.error is None
    record = episode.results["textarena"]
    assert record["ended_by"] == "game_over" and record["seed"] == 11
    assert record["rewards"] == {"assistant": 1.0}
    # The episode's reward is the game's own, and so is the trace's.
    assert episode.reward == 1.0
    (trace,) = episode.traces
    assert trace.seat == "assistant" and trace.reward == 1.0
    assert trace.stop_condition == "game_over"
    guesses = [m["action"] for m in record["moves"]]
    assert guesses[-1] == f"My guess: [{secret(11)}]"
    assert episode.metrics["moves"] == len(guesses) <= 5
    # The game plays the user: its prompt opens the chat, its hints answer each guess.
    first = user_texts(run.requests[0])[0]
    assert first.startswith("[GAME] You are Player 0. You are playing Guess The Number.")
    assert run.requests[0].messages[0] == {"role": "system", "content": made.config.system_prompt}


async def test_a_single_player_game_not_solved() -> None:
    seed = seed_with_secret_above(12)
    made = env(game="GuessTheNumber-v0")
    episode = (await run_scripted(made, task(made), counting_up(1), seed=seed)).episode
    assert episode.error is None
    record = episode.results["textarena"]
    # GuessTheNumber-v0 (max_turns=10) checks its limit before counting the turn: its own
    # rule lets an eleventh guess in.
    assert [m["action"] for m in record["moves"]] == [f"[{n}]" for n in range(1, 12)]
    assert record["ended_by"] == "game_over"
    assert "turn limit has been reached" in record["game_info"]["assistant"]["reason"]
    # The game's own partial credit: 1 - |last guess - target| / (max - min).
    expected = 1 - abs(11 - secret(seed)) / 19
    assert episode.reward == pytest.approx(expected) and expected < 1


# -- a two-player game ------------------------------------------------------------------------


async def test_a_two_player_game_gives_each_seat_the_games_reward() -> None:
    made = env(game="TicTacToe-v0")
    run = await run_scripted(made, task(made, 0), first_free_cell, seed=1)
    episode = run.episode
    assert episode.error is None
    record = episode.results["textarena"]
    assert record["players"] == {"player0": 0, "player1": 1}
    # Lowest free cell each: player 0 takes 0, 2, 4, 6 and wins on the diagonal.
    assert [m["action"][-3:] for m in record["moves"]] == [
        "[0]", "[1]", "[2]", "[3]", "[4]", "[5]", "[6]"]
    assert record["rewards"] == {"player0": 1.0, "player1": -1.0}
    assert {t.seat: [r.value for r in t.rewards] for t in episode.traces} == {
        "player0": [1.0], "player1": [-1.0]}
    # Zero-sum: no shared reward for the episode.
    assert episode.reward is None
    assert episode.metrics["textarena/player0"] == -episode.metrics["textarena/player1"]
    assert {t.seat: t.metrics["moves"] for t in episode.traces} == {"player0": 4.0,
                                                                     "player1": 3.0}
    # Each seat is its own chat session: player 1 never saw player 0's system of turns, only
    # the game's messages and player 0's moves.
    seat_one = [r for r in run.requests if "You are Player 1" in json.dumps(r.messages)]
    assert len(seat_one) == 3
    assert all("You are Player 0" not in json.dumps(r.messages) for r in seat_one)


async def test_seats_swap_sides_on_every_other_task() -> None:
    made = env(game="TicTacToe-v0")
    episode = (await run_scripted(made, task(made, 1), first_free_cell, seed=1)).episode
    record = episode.results["textarena"]
    assert record["players"] == {"player0": 1, "player1": 0}
    assert record["rewards"] == {"player1": 1.0, "player0": -1.0}
    unswapped = env(game="TicTacToe-v0", alternate=False)
    episode = (await run_scripted(unswapped, task(unswapped, 1), first_free_cell,
                                  seed=1)).episode
    assert episode.results["textarena"]["players"] == {"player0": 0, "player1": 1}


async def test_the_games_invalid_move_handling_is_recorded() -> None:
    replies = iter(["[4]", "[4]", "[0]", "[1]", "[8]", "[2]", "[3]", "[5]", "[6]", "[7]"])
    made = env(game="TicTacToe-v0")
    episode = (await run_scripted(made, task(made), lambda r: next(replies), seed=1)).episode
    record = episode.results["textarena"]
    second = record["moves"][1]
    assert second["seat"] == "player1" and second["invalid"] == ["cell 4 is already occupied."]
    # TextArena lets a player retry once; the retry was the game's, not a re-ask of ours.
    assert record["moves"][2]["seat"] == "player1" and record["moves"][2]["invalid"] == []
    assert episode.metrics["invalid_moves"] == 1.0
    assert episode.trace("player1").metrics["invalid_moves"] == 1.0
    assert episode.metrics["empty_replies"] == 0.0


async def test_past_the_games_allowance_an_invalid_move_loses_by_its_rules() -> None:
    made = env(game="TicTacToe-v0")
    episode = (await run_scripted(made, task(made), ["[4]", "[4]", "[4]"], seed=1)).episode
    record = episode.results["textarena"]
    assert record["rewards"] == {"player0": 1.0, "player1": -1.0}
    assert record["game_info"]["player1"]["invalid_move"] is True
    assert episode.trace("player1").metrics["invalid_moves"] == 2.0


# -- replies with nothing to play -------------------------------------------------------------


async def test_an_empty_reply_is_asked_again_and_never_played() -> None:
    script = iter(["", "   ", "[10]", *[f"[{n}]" for n in range(1, 20)]])
    made = env(game="GuessTheNumber-v0")
    run = await run_scripted(made, task(made), lambda r: next(script), seed=3)
    episode = run.episode
    assert episode.error is None
    first = episode.results["textarena"]["moves"][0]
    assert first["action"] == "[10]" and first["asks"] == 3
    assert first["refused"] == ["empty", "empty"]
    assert episode.metrics["empty_replies"] == 2.0
    # The game saw one guess for those three replies: its history has no empty move.
    asked_again = user_texts(run.requests[2])[-1]
    assert asked_again.startswith("Your reply was empty, so nothing was played.")
    assert "last chance" in asked_again


async def test_replies_with_nothing_to_play_past_the_budget_forfeit() -> None:
    made = env(game="TicTacToe-v0", reask_budget=1)
    replies = iter(["[4]", "", ""])
    episode = (await run_scripted(made, task(made), lambda r: next(replies), seed=1)).episode
    assert episode.error is None
    record = episode.results["textarena"]
    assert record["ended_by"] == "forfeit" and record["forfeited"] == "player1"
    assert record["rewards"] == {"player0": 1.0, "player1": -1.0}
    assert episode.metrics["forfeits"] == 1.0
    assert episode.trace("player1").metrics["forfeits"] == 1.0
    assert episode.trace("player1").metrics["empty_replies"] == 2.0
    assert {t.seat: t.stop_condition for t in episode.traces} == {"player0": "forfeit",
                                                                  "player1": "forfeit"}


async def test_an_action_pattern_refuses_replies_the_game_could_not_read() -> None:
    script = iter(["I think ten", "[10]", *[f"[{n}]" for n in range(1, 20)]])
    made = env(game="GuessTheNumber-v0", action_pattern=r"\[\d+\]")
    run = await run_scripted(made, task(made), lambda r: next(script), seed=3)
    first = run.episode.results["textarena"]["moves"][0]
    assert first["refused"] == ["no_match"] and first["action"] == "[10]"
    assert run.episode.metrics["unmatched_replies"] == 1.0
    assert "a match for '\\\\[\\\\d+\\\\]'" in user_texts(run.requests[1])[-1]


async def test_a_seat_whose_model_fails_aborts_the_game_without_a_result() -> None:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        if "You are Player 1" in json.dumps(request.messages):
            return ScriptedReply.fault(400)
        return first_free_cell(request)

    made = env(game="TicTacToe-v0")
    episode = (await run_scripted(made, task(made), handler, seed=1)).episode
    record = episode.results["textarena"]
    assert record["ended_by"] == "aborted" and record["rewards"] is None
    assert record["aborted"]["seat"] == "player1"
    assert episode.error_type == "bad_request"
    assert all(t.rewards == [] for t in episode.traces)
    assert {t.seat: t.stop_condition for t in episode.traces}["player0"] == "opponent_failed"


# -- seeds ------------------------------------------------------------------------------------


async def play(made: TextArenaEnv, idx: int, seed: int, rollout: int = 0) -> Episode:
    return (await run_scripted(made, task(made, idx), bisect(), seed=seed,
                               rollout=rollout)).episode


def transcript(episode: Episode) -> list[tuple[str, str]]:
    return [(m.role, m.text) for t in episode.traces for m in t.messages]


async def test_the_episodes_seed_replays_the_game_exactly() -> None:
    made = env(game="GuessTheNumber-v0")
    first, again, other = [await play(made, 0, seed) for seed in (5, 5, 6)]
    assert transcript(first) == transcript(again)
    assert first.results["textarena"]["moves"] == again.results["textarena"]["moves"]
    assert secret(5) != secret(6) and transcript(first) != transcript(other)


async def test_concurrent_episodes_replay_as_they_do_alone() -> None:
    made = env(game="Minesweeper-v0")

    def sweeper(request: ScriptedRequest) -> ScriptedReply:
        n = sum(1 for m in request.messages if m.get("role") == "assistant")
        return ScriptedReply.text(f"[{n % 5} {n // 5}]")

    async def one(seed: int) -> Episode:
        return (await run_scripted(made, task(made), sweeper, seed=seed)).episode

    alone = [await one(s) for s in (1, 2, 3)]
    together = await asyncio.gather(*(one(s) for s in (1, 2, 3)))
    assert [transcript(e) for e in together] == [transcript(e) for e in alone]


async def test_seed_from_task_plays_the_same_game_in_every_rollout() -> None:
    made = env(game="GuessTheNumber-v0", seed_from="task")
    assert task(made, 7).info == {"game": "GuessTheNumber-v0", "game_seed": 7}
    rollouts = [await play(made, 7, seed=s, rollout=r) for r, s in enumerate((100, 200))]
    assert [e.results["textarena"]["seed"] for e in rollouts] == [7, 7]
    assert transcript(rollouts[0]) == transcript(rollouts[1])


@pytest.mark.parametrize(("setting", "message"), [
    ({"reask_budget": -1}, "reask_budget must be 0 or more"),
    ({"seed_from": "run"}, "seed_from must be one of episode, task"),
    ({"action_pattern": "[unclosed"}, "action_pattern is not a regular expression"),
    ({"tasks": 0}, "tasks must be at least 1"),
])
def test_bad_settings_are_refused_when_the_env_loads(setting: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(InterplayError, match=message):
        env(game="TicTacToe-v0", **setting)
