"""Scripted Kuhn poker players: baselines, and the opponents the tests play against.

A strategy maps what a player knows (its card, the hand so far) to a probability for each legal
action. :func:`nash` is Kuhn's equilibrium family (one free parameter ``alpha`` in [0, 1/3]);
:func:`always_bet` bets whenever it may and calls every bet. :func:`expected_payoff` settles a
match-up exactly by enumerating deals and actions; :func:`choose` samples an action.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from fractions import Fraction

from interplay_kuhn_poker.rules import (
    CARDS,
    is_terminal,
    legal_actions,
    result,
    to_act,
)

#: ``strategy(card, history) -> {action: probability}`` over the legal actions.
Strategy = Callable[[str, tuple[str, ...]], dict[str, Fraction]]


def nash(alpha: Fraction | float = Fraction(1, 3)) -> Strategy:
    """Kuhn's equilibrium family. As the first player: bet a Jack with probability ``alpha``,
    never a Queen, a King with ``3 * alpha``; after check-bet, call with a Queen with
    ``alpha + 1/3``, always with a King, never with a Jack. As the second player: after a bet
    call with a King, with a Queen 1/3 of the time, never with a Jack; after a check bet with a
    King, with a Jack 1/3 of the time (a bluff), never with a Queen."""
    a = Fraction(alpha)
    if not 0 <= a <= Fraction(1, 3):
        raise ValueError(f"alpha must be in [0, 1/3], got {alpha}")
    third = Fraction(1, 3)
    aggression: dict[tuple[tuple[str, ...], str], Fraction] = {
        ((), "J"): a, ((), "Q"): Fraction(0), ((), "K"): 3 * a,
        (("check", "bet"), "J"): Fraction(0), (("check", "bet"), "Q"): a + third,
        (("check", "bet"), "K"): Fraction(1),
        (("bet",), "J"): Fraction(0), (("bet",), "Q"): third, (("bet",), "K"): Fraction(1),
        (("check",), "J"): third, (("check",), "Q"): Fraction(0), (("check",), "K"): Fraction(1),
    }

    def strategy(card: str, history: tuple[str, ...]) -> dict[str, Fraction]:
        p = aggression[(history, card)]
        bold, timid = legal_actions(history)  # (check, bet) or (call, fold)
        if bold == "check":
            bold, timid = timid, bold
        return {bold: p, timid: 1 - p}

    return strategy


def always_bet(card: str, history: tuple[str, ...]) -> dict[str, Fraction]:
    """Bet whenever betting is legal; otherwise call."""
    legal = legal_actions(history)
    return {"bet": Fraction(1)} if "bet" in legal else {"call": Fraction(1)}


def choose(strategy: Strategy, card: str, history: Sequence[str], rng: random.Random) -> str:
    """Sample an action from ``strategy``."""
    dist = strategy(card, tuple(history))
    r = Fraction(rng.random())
    acc = Fraction(0)
    last = None
    for action, p in dist.items():
        if p <= 0:
            continue
        acc += p
        last = action
        if r < acc:
            return action
    assert last is not None, "a strategy must give some action a positive probability"
    return last


def expected_payoff(first: Strategy, second: Strategy) -> Fraction:
    """Exactly what the first player wins per hand on average (all six deals equally likely)."""
    total = Fraction(0)
    deals = list(itertools.permutations(CARDS, 2))
    for cards in deals:
        total += _value(first, second, (cards[0], cards[1]), ())
    return total / len(deals)


def _value(first: Strategy, second: Strategy, cards: tuple[str, str],
           history: tuple[str, ...]) -> Fraction:
    if is_terminal(history):
        return Fraction(result(cards, history).payoffs[0])
    position = to_act(history)
    player = first if position == 0 else second
    dist = player(cards[position], history)
    return sum((p * _value(first, second, cards, (*history, a)) for a, p in dist.items() if p),
               Fraction(0))
