"""The rules engine: every betting sequence, its legality, the showdown and the payoffs."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from interplay_kuhn_poker import rules

DEALS = list(itertools.permutations(rules.CARDS, 2))

# history -> (outcome, winner by card or fixed position, chips moved)
SEQUENCES = {
    ("check", "check"): ("showdown", None, 1),
    ("check", "bet", "call"): ("showdown", None, 2),
    ("check", "bet", "fold"): ("fold", 1, 1),
    ("bet", "call"): ("showdown", None, 2),
    ("bet", "fold"): ("fold", 0, 1),
}


def test_the_terminal_sequences_are_exactly_the_five_of_kuhn_poker() -> None:
    assert set(rules.TERMINALS) == set(SEQUENCES)
    # Every sequence reachable by legal play ends in one of them, and no prefix is terminal.
    reached = set()
    frontier: list[tuple[str, ...]] = [()]
    while frontier:
        h = frontier.pop()
        if rules.is_terminal(h):
            reached.add(h)
            continue
        for action in rules.legal_actions(h):
            frontier.append((*h, action))
    assert reached == set(SEQUENCES)


@pytest.mark.parametrize(("history", "legal", "position"), [
    ((), ("check", "bet"), 0),
    (("check",), ("check", "bet"), 1),
    (("bet",), ("call", "fold"), 1),
    (("check", "bet"), ("call", "fold"), 0),
])
def test_legal_actions_and_who_acts(history: tuple[str, ...], legal: tuple[str, ...],
                                    position: int) -> None:
    assert rules.legal_actions(history) == legal
    assert rules.to_act(history) == position
    assert not rules.is_terminal(history)


@pytest.mark.parametrize("history", [*SEQUENCES, ("fold",), ("call",), ("bet", "bet"),
                                     ("check", "check", "bet")])
def test_no_action_after_the_end_or_off_the_tree(history: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        rules.legal_actions(history)


@pytest.mark.parametrize("history", list(SEQUENCES))
@pytest.mark.parametrize("cards", DEALS)
def test_every_sequence_settles_for_every_deal(history: tuple[str, ...],
                                               cards: tuple[str, str]) -> None:
    outcome, fixed_winner, chips = SEQUENCES[history]
    res = rules.play(cards, history)
    assert res.outcome == outcome
    expected_winner = (fixed_winner if fixed_winner is not None
                       else (0 if rules.rank(cards[0]) > rules.rank(cards[1]) else 1))
    assert res.winner == expected_winner
    assert res.payoffs[expected_winner] == chips
    assert res.payoffs[1 - expected_winner] == -chips
    assert sum(res.payoffs) == 0
    assert res.pot == 2 * (1 + (chips == 2)) or outcome == "fold"
    assert res.forfeited is None


def test_showdown_examples() -> None:
    assert rules.play(("K", "J"), ["check", "check"]).payoffs == (1, -1)
    assert rules.play(("J", "Q"), ["bet", "call"]).payoffs == (-2, 2)
    assert rules.play(("Q", "K"), ["check", "bet", "call"]).payoffs == (-2, 2)
    assert rules.play(("Q", "J"), ["check", "bet", "call"]).payoffs == (2, -2)
    # A fold loses only the ante, whatever the cards.
    assert rules.play(("K", "J"), ["check", "bet", "fold"]).payoffs == (-1, 1)
    assert rules.play(("J", "K"), ["bet", "fold"]).payoffs == (1, -1)
    assert rules.play(("J", "K"), ["bet", "fold"]).pot == 3


def test_contributions_count_the_antes_bets_and_calls() -> None:
    assert rules.contributions(()) == (1, 1)
    assert rules.contributions(("bet",)) == (2, 1)
    assert rules.contributions(("check", "bet")) == (1, 2)
    assert rules.contributions(("check", "bet", "call")) == (2, 2)


@pytest.mark.parametrize(("history", "loser"), [((), 0), (("check",), 1), (("bet",), 1),
                                                 (("check", "bet"), 0)])
def test_a_forfeit_is_a_fold_by_the_player_to_act(history: tuple[str, ...], loser: int) -> None:
    for cards in DEALS:
        res = rules.forfeit(cards, history)
        assert res.outcome == "forfeit"
        assert res.forfeited == loser
        assert res.winner == 1 - loser
        # It loses what it has in the pot: in Kuhn poker the player to act has put in only
        # its ante, since a player who bet never acts again in the hand.
        assert res.payoffs[loser] == -rules.contributions(history)[loser] == -1
        assert sum(res.payoffs) == 0


def test_a_finished_hand_cannot_be_forfeited() -> None:
    with pytest.raises(ValueError):
        rules.forfeit(("K", "Q"), ("bet", "call"))


def test_illegal_play_is_refused() -> None:
    with pytest.raises(ValueError, match="not legal"):
        rules.play(("K", "Q"), ["call"])
    with pytest.raises(ValueError, match="not legal"):
        rules.play(("K", "Q"), ["bet", "check"])
    with pytest.raises(ValueError, match="after the hand ended"):
        rules.play(("K", "Q"), ["bet", "fold", "bet"])
    with pytest.raises(ValueError, match="not over"):
        rules.play(("K", "Q"), ["check"])
    with pytest.raises(ValueError, match="one of each card"):
        rules.result(("K", "K"), ("check", "check"))


def test_the_deal_is_two_distinct_cards_uniform_over_the_six_deals() -> None:
    rng = random.Random(7)
    counts = Counter(rules.deal(rng) for _ in range(6000))
    assert set(counts) == set(DEALS)
    assert all(800 < n < 1200 for n in counts.values()), counts
