"""The textarena side, on the real library: which games load here and how many players they
seat, the one-line refusals of games that cannot run, the game's randomness kept to itself, and
what a player is told."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from interplay import InterplayError
from interplay_textarena import game as game_mod
from interplay_textarena.game import Game, GameRandom, describe, render

TWO_PLAYER = ["TicTacToe-v0", "ConnectFour-v0", "KuhnPoker-v0", "Nim-v0"]
ONE_PLAYER = ["GuessTheNumber-v0", "Mastermind-v0", "Minesweeper-v0", "Sudoku-v0",
              "TowerOfHanoi-v0"]


@pytest.mark.parametrize("game", TWO_PLAYER + ONE_PLAYER)
def test_games_that_reset_offline_are_described_with_their_player_count(game: str) -> None:
    assert describe(game).players == (2 if game in TWO_PLAYER else 1)


@pytest.fixture
def no_nltk_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nltk looks for its data in an empty folder only, as on a machine without it."""
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    game_mod._describe.cache_clear()
    yield
    game_mod._describe.cache_clear()


@pytest.mark.usefixtures("no_nltk_data")
def test_a_game_that_needs_nltk_data_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(InterplayError) as info:
        describe("Wordle-v0")
    message = str(info.value)
    assert "\n" not in message
    assert "'Wordle-v0' needs nltk's 'words' data" in message
    assert "python -m nltk.downloader words" in message
    assert str(tmp_path) in message


def test_an_unknown_game_is_refused_with_close_matches() -> None:
    with pytest.raises(InterplayError, match=r"no game 'TicTacToe-v9'; did you mean "
                                             r"TicTacToe-v0"):
        describe("TicTacToe-v9")


def test_a_game_for_more_players_is_refused_with_its_own_reason() -> None:
    with pytest.raises(InterplayError) as info:
        describe("SecretMafia-v0")
    assert "does not play with 1 or 2 players" in str(info.value)
    assert "Player count must be between 5 and 15" in str(info.value)


def test_an_unset_game_is_refused_with_an_example() -> None:
    with pytest.raises(InterplayError, match=r"--set env\.game=TicTacToe-v0"):
        describe("")


def test_game_kwargs_reach_the_game() -> None:
    game = Game("GuessTheNumber-v0", players=1, seed=5, kwargs={"max_number": 1000})
    assert game.core.max_number == 1000
    with pytest.raises(InterplayError,
                       match=r"cannot be made with game_kwargs .*unexpected keyword"):
        describe("GuessTheNumber-v0", {"no_such_argument": 1})


def secret(seed: int) -> int:
    return Game("GuessTheNumber-v0", players=1, seed=seed).core.game_number


def test_a_game_is_a_function_of_its_seed_and_leaves_the_global_generator_alone() -> None:
    random.seed(123)
    expected_next = random.Random(123).random()
    secrets = [secret(s) for s in range(20)]
    assert secrets == [secret(s) for s in range(20)]
    assert len(set(secrets)) > 5
    # Making twenty games drew nothing from the process's own generator.
    assert random.random() == expected_next


def test_interleaved_games_draw_from_their_own_streams() -> None:
    """Minesweeper places its mines at the first move, from the global generator: two games
    played turn about must end up with the boards each would have had alone."""

    def board_after_first_move(game: Game) -> list[list[object]]:
        game.play("[3 3]")
        return [list(row) for row in game.core.grid]

    alone = board_after_first_move(Game("Minesweeper-v0", players=1, seed=7))
    a = Game("Minesweeper-v0", players=1, seed=7)
    b = Game("Minesweeper-v0", players=1, seed=8)
    random.random()  # someone else draws in between
    other = board_after_first_move(b)
    assert board_after_first_move(a) == alone
    assert other != alone


def test_game_random_swaps_the_generator_state_in_and_out() -> None:
    rng = GameRandom(42)
    random.seed(1)
    with rng.active():
        first = [random.random() for _ in range(3)]
    outside = random.random()
    with rng.active():
        second = random.random()
    expected = random.Random(42)
    assert [*first, second] == [expected.random() for _ in range(4)]
    assert outside == random.Random(1).random()


def test_invalid_moves_are_recorded_as_the_game_rules_them() -> None:
    game = Game("TicTacToe-v0", players=2, seed=0)
    assert game.play("[4]") == (False, [])
    done, invalid = game.play("[4]")
    assert not done
    assert [(m.player, m.reason) for m in invalid] == [(1, "cell 4 is already occupied.")]


def test_render_leaves_out_the_players_own_moves() -> None:
    game = Game("TicTacToe-v0", players=2, seed=0)
    game.observe()
    game.play("[4] center")
    game.observe()
    game.play("[0]")
    player, observations = game.observe()
    assert player == 0
    text = render(observations, player, game.roles)
    assert "[Player 1] [0]" in text
    assert "center" not in text
    assert text.splitlines()[0].startswith("[GAME] Player 0 placed their symbol")
