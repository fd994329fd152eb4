"""What each seat is told, and how its reply is read.

The referee speaks to a seat only through these texts: the rules (the system prompt), one
message per decision (the seat's card, the hand so far, the legal actions, and how the hands
since its last decision ended), and the re-ask after an invalid reply. A reply is valid when it
holds exactly one bracketed word and that word is a legal action now; anything else in the reply
is free text. This module reads replies; it never decides what happens to an invalid one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from interplay_kuhn_poker.rules import ACTIONS, CARD_NAMES, HandResult, contributions

RULES = """\
You are playing Kuhn poker against one opponent, for chips.

The deck has three cards: Jack (lowest), Queen, King (highest). At the start of each hand both \
players put 1 chip in the pot (the ante) and each gets one card; the third card is not used. \
You see only your own card.

Betting: the first player may [check] or [bet] (1 more chip). After a check, the second player \
may [check] (then the cards are shown) or [bet]. A player facing a bet may [call] (put in 1 \
chip; then the cards are shown) or [fold] (give up the pot). When the cards are shown, the \
higher card wins the whole pot.

On each decision, answer with exactly one action in square brackets, for example [bet]. You \
may explain your reasoning, but put no other words in square brackets. A reply with no \
bracketed action, more than one, or one that is not allowed at that moment is asked again; \
if it is still not valid, you lose the hand as if you had folded.\
"""

_BRACKETED = re.compile(r"\[([^\[\]\n]*)\]")
_PAST = {"check": "checked", "bet": "bet", "call": "called", "fold": "folded"}


@attrs.frozen
class Parsed:
    """A reply read against the legal actions: ``action`` when valid, else ``problem`` (why
    not, in words the player is told)."""

    action: str | None
    problem: str | None = None
    #: Every bracketed word found, normalized (lower case, trimmed).
    found: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return self.action is not None


def parse_reply(text: str, legal: Sequence[str]) -> Parsed:
    """Read one reply: valid only with exactly one bracketed word, which is legal now.

    Two bracketed words are invalid even when they are the same action: the player must commit
    to one answer.
    """
    found = tuple(" ".join(m.split()).lower() for m in _BRACKETED.findall(text or ""))
    options = " or ".join(f"[{a}]" for a in legal)
    if not found:
        return Parsed(None, f"it has no action in square brackets; answer with {options}")
    if len(found) > 1:
        listed = ", ".join(f"[{w}]" for w in found)
        return Parsed(None, f"it has {len(found)} bracketed words ({listed}); give exactly one "
                      f"action: {options}", found)
    word = found[0]
    if word not in ACTIONS:
        return Parsed(None, f"[{word}] is not an action; answer with {options}", found)
    if word not in legal:
        return Parsed(None, f"[{word}] is not allowed now; answer with {options}", found)
    return Parsed(word, None, found)


def describe_history(history: Sequence[str], order: Sequence[str], seat: str) -> str:
    """The hand so far, from ``seat``'s point of view."""
    if not history:
        return "No one has acted yet."
    said = []
    for i, action in enumerate(history):
        who = "You" if order[i % 2] == seat else order[i % 2]
        said.append(f"{who} {_PAST[action]}")
    return "So far: " + ", then ".join(said) + "."


def decision_message(*, seat: str, order: Sequence[str], card: str, history: Sequence[str],
                     legal: Sequence[str], hand: int, hands: int,
                     news: Sequence[str] = ()) -> str:
    """The message asking ``seat`` for its action (``order`` is the seats by position)."""
    position = order.index(seat)
    opponent = order[1 - position]
    put = contributions(history)
    lines = [*news]
    lines.append(f"Hand {hand + 1} of {hands}. You are {seat}; your opponent is {opponent}. "
                 f"You act {'first' if position == 0 else 'second'} this hand.")
    lines.append(f"Your card: {CARD_NAMES[card]}.")
    lines.append(describe_history(history, order, seat))
    lines.append(f"Pot: {sum(put)} chips ({put[position]} of them yours).")
    lines.append("Legal actions: " + " or ".join(f"[{a}]" for a in legal) + ".")
    lines.append("Reply with exactly one of them, in square brackets.")
    return "\n".join(lines)


def reask_message(problem: str, attempts_left: int) -> str:
    """The message after an invalid reply."""
    last = ("This is your last chance; another invalid reply forfeits the hand."
            if attempts_left == 1 else f"{attempts_left} tries left before you forfeit the hand.")
    return f"That reply is not valid: {problem}. {last}"


def hand_summary(result: HandResult, order: Sequence[str], seat: str, hand: int,
                 total: int) -> str:
    """How a finished hand ended, told to ``seat`` before its next decision."""
    position = order.index(seat)
    won = result.payoffs[position]
    verdict = f"you won {won} chip{'s' * (won != 1)}" if won > 0 else \
        f"you lost {-won} chip{'s' * (won != -1)}"
    if result.outcome == "showdown":
        how = (f"showdown: you had {CARD_NAMES[result.cards[position]]}, "
               f"{order[1 - position]} had {CARD_NAMES[result.cards[1 - position]]}")
    elif result.outcome == "fold":
        folder = order[(len(result.history) - 1) % 2]
        how = "you folded" if folder == seat else f"{folder} folded"
    else:
        assert result.forfeited is not None
        forfeiter = order[result.forfeited]
        how = ("you gave no valid action and forfeited" if forfeiter == seat
               else f"{forfeiter} gave no valid action and forfeited")
    return f"Hand {hand + 1} is over ({how}); {verdict}. Your match total: {total:+d} chips."
