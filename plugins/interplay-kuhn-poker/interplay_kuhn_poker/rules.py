"""The rules of Kuhn poker: the deck, the deal, the betting sequences and the payoffs.

Pure game logic with no model and no interplay imports, so it can be tested exhaustively and
reused by scripted players. Positions are ``0`` (acts first in the hand) and ``1`` (acts
second); which seat sits in which position is the referee's business, not this module's.

The game: a deck of three cards, Jack < Queen < King. Each player antes 1 chip and is dealt
one card; the third card is never seen. Position 0 may check or bet 1 chip. After a check,
position 1 may check (showdown) or bet; after a bet, the player facing it may call (showdown)
or fold. After check-bet, position 0 calls or folds. The legal sequences are therefore
``check check``, ``check bet call``, ``check bet fold``, ``bet call`` and ``bet fold``. At a
showdown the higher card takes the pot; a fold (or a forfeit) hands the pot to the other player.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

import attrs

CARDS: tuple[str, ...] = ("J", "Q", "K")
CARD_NAMES: dict[str, str] = {"J": "Jack", "Q": "Queen", "K": "King"}
ACTIONS: tuple[str, ...] = ("check", "bet", "call", "fold")
ANTE = 1
BET = 1

Outcome = Literal["showdown", "fold", "forfeit"]

_OPEN: tuple[str, ...] = ("check", "bet")
_FACING_BET: tuple[str, ...] = ("call", "fold")
#: Every non-terminal history and what may be played there.
_LEGAL: dict[tuple[str, ...], tuple[str, ...]] = {
    (): _OPEN,
    ("check",): _OPEN,
    ("bet",): _FACING_BET,
    ("check", "bet"): _FACING_BET,
}
#: Every terminal history.
TERMINALS: tuple[tuple[str, ...], ...] = (
    ("check", "check"),
    ("check", "bet", "call"),
    ("check", "bet", "fold"),
    ("bet", "call"),
    ("bet", "fold"),
)


def rank(card: str) -> int:
    """The card's strength (Jack 0, Queen 1, King 2)."""
    try:
        return CARDS.index(card)
    except ValueError:
        raise ValueError(f"unknown card {card!r}; cards are {', '.join(CARDS)}") from None


def deal(rng: random.Random) -> tuple[str, str]:
    """Two distinct cards: position 0's, then position 1's."""
    first, second = rng.sample(CARDS, 2)
    return first, second


def is_terminal(history: Sequence[str]) -> bool:
    return tuple(history) in TERMINALS


def legal_actions(history: Sequence[str]) -> tuple[str, ...]:
    """What the player to act may play after ``history`` (ValueError when the hand is over
    or the history is not a legal sequence)."""
    h = tuple(history)
    if h in _LEGAL:
        return _LEGAL[h]
    if h in TERMINALS:
        raise ValueError(f"the hand is over after {' '.join(h)}")
    raise ValueError(f"{' '.join(h) or 'the empty history'} is not a legal Kuhn poker sequence")


def to_act(history: Sequence[str]) -> int:
    """The position whose turn it is after ``history`` (players alternate)."""
    legal_actions(history)
    return len(history) % 2


def contributions(history: Sequence[str]) -> tuple[int, int]:
    """What each position has put in the pot after ``history`` (the antes included)."""
    put = [ANTE, ANTE]
    for i, action in enumerate(history):
        if action in ("bet", "call"):
            put[i % 2] += BET
    return put[0], put[1]


@attrs.frozen
class HandResult:
    """How one hand ended: ``payoffs`` are chips won by position 0 and position 1 (they sum to
    zero); ``winner`` is the position that took the pot."""

    cards: tuple[str, str]
    history: tuple[str, ...]
    outcome: Outcome
    winner: int
    payoffs: tuple[int, int]
    #: The position that forfeited (``outcome == "forfeit"`` only).
    forfeited: int | None = None

    @property
    def pot(self) -> int:
        return sum(contributions(self.history))


def _pot_to(winner: int, history: tuple[str, ...]) -> tuple[int, int]:
    # The winner takes the loser's whole contribution; its own comes back.
    loser_put = contributions(history)[1 - winner]
    return (loser_put, -loser_put) if winner == 0 else (-loser_put, loser_put)


def result(cards: tuple[str, str], history: Sequence[str]) -> HandResult:
    """Settle a finished hand: a fold gives the pot to the other player, a showdown to the
    higher card."""
    h = tuple(history)
    if h not in TERMINALS:
        raise ValueError(f"the hand is not over after {' '.join(h) or 'no action'}")
    if cards[0] == cards[1]:
        raise ValueError(f"both positions hold {cards[0]}; the deck has one of each card")
    if h[-1] == "fold":
        folder = (len(h) - 1) % 2
        winner = 1 - folder
        return HandResult(cards, h, "fold", winner, _pot_to(winner, h))
    winner = 0 if rank(cards[0]) > rank(cards[1]) else 1
    return HandResult(cards, h, "showdown", winner, _pot_to(winner, h))


def forfeit(cards: tuple[str, str], history: Sequence[str]) -> HandResult:
    """The player to act gave no valid action: the hand ends as if it folded. It loses what it
    has in the pot (its ante and any chip it bet or called) and the other player takes it."""
    h = tuple(history)
    position = to_act(h)
    winner = 1 - position
    return HandResult(cards, h, "forfeit", winner, _pot_to(winner, h), forfeited=position)


def play(cards: tuple[str, str], actions: Sequence[str]) -> HandResult:
    """Play ``actions`` from the start of a hand, checking each is legal, and settle it."""
    history: list[str] = []
    for action in actions:
        if is_terminal(history):
            raise ValueError(f"{action!r} played after the hand ended ({' '.join(history)})")
        legal = legal_actions(history)
        if action not in legal:
            raise ValueError(f"{action!r} is not legal after {' '.join(history) or 'no action'};"
                             f" legal: {', '.join(legal)}")
        history.append(action)
    return result(cards, history)
