"""Game-theoretic sanity checks with scripted players (pure Python, no model)."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from interplay_kuhn_poker import rules, strategies
from interplay_kuhn_poker.env import SEATS, first_seat, hand_rng


@pytest.mark.parametrize("alpha", [Fraction(0), Fraction(1, 6), Fraction(1, 3)])
def test_the_equilibrium_family_has_the_game_value(alpha: Fraction) -> None:
    # Kuhn's result: the first player loses 1/18 per hand at equilibrium, for every alpha.
    nash = strategies.nash(alpha)
    assert strategies.expected_payoff(nash, strategies.nash()) == Fraction(-1, 18)


def test_no_pure_deviation_beats_the_equilibrium() -> None:
    nash = strategies.nash(Fraction(1, 3))
    deviations = [strategies.always_bet, _passive]
    for deviant in deviations:
        assert strategies.expected_payoff(deviant, nash) <= Fraction(-1, 18)
        assert strategies.expected_payoff(nash, deviant) >= Fraction(-1, 18)


def _passive(card: str, history: tuple[str, ...]) -> dict[str, Fraction]:
    legal = rules.legal_actions(history)
    return {"check" if "check" in legal else "fold": Fraction(1)}


def test_nash_beats_always_bet_by_a_ninth_per_hand_in_either_position() -> None:
    nash = strategies.nash(Fraction(1, 3))
    assert strategies.expected_payoff(nash, strategies.always_bet) == Fraction(1, 9)
    assert -strategies.expected_payoff(strategies.always_bet, nash) == Fraction(1, 9)


def test_nash_against_always_bet_over_many_seeded_hands() -> None:
    """The referee's own dealing and alternation, scripted players: Nash comes out ahead, and
    every hand's payoffs sum to zero."""
    nash = strategies.nash(Fraction(1, 3))
    players = {"player0": nash, "player1": strategies.always_bet}
    choices = random.Random(2024)
    totals = dict.fromkeys(SEATS, 0)
    n = 6000
    for hand in range(n):
        first = first_seat(0, hand)
        order = (first, SEATS[1 - SEATS.index(first)])
        cards = rules.deal(hand_rng(11, 0, 0, hand))
        history: list[str] = []
        while not rules.is_terminal(history):
            pos = rules.to_act(history)
            action = strategies.choose(players[order[pos]], cards[pos], history, choices)
            assert action in rules.legal_actions(history)
            history.append(action)
        res = rules.result(cards, history)
        assert sum(res.payoffs) == 0
        for pos, seat in enumerate(order):
            totals[seat] += res.payoffs[pos]
    assert totals["player0"] == -totals["player1"]
    per_hand = totals["player0"] / n
    # Expected +1/9 (0.111) per hand; the standard error over 6000 hands is about 0.02.
    assert 0.03 < per_hand < 0.2, per_hand


def test_choose_follows_the_probabilities() -> None:
    rng = random.Random(3)
    nash = strategies.nash(Fraction(1, 3))
    bets = sum(strategies.choose(nash, "J", (), rng) == "bet" for _ in range(3000))
    assert 850 < bets < 1150  # a Jack opens with a bluff 1/3 of the time
    assert all(strategies.choose(nash, "K", (), rng) == "bet" for _ in range(50))
    assert all(strategies.choose(nash, "Q", (), rng) == "check" for _ in range(50))


def test_alpha_outside_the_family_is_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        strategies.nash(0.5)
