"""Scripted players behind interplay's scripted model, for tests and baselines over HTTP.

A handler for :class:`interplay.testing.ScriptedModel` that reads the referee's message the way
a model would (its seat, its card, whether it acts first, the legal actions) and answers for a
strategy from :mod:`interplay_kuhn_poker.strategies`, or for any function of the situation (to
script invalid replies). The scripted model stands in for the model only; the referee, the
sessions and the scoring are interplay's own code.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping

from interplay.testing import ScriptedReply, ScriptedRequest
from interplay_kuhn_poker import strategies
from interplay_kuhn_poker.rules import CARD_NAMES

_CARDS = {name: card for card, name in CARD_NAMES.items()}
_SEAT = re.compile(r"You are (\w+);")
_CARD = re.compile(r"Your card: (\w+)\.")
_FIRST = re.compile(r"You act (first|second) this hand")
_LEGAL = re.compile(r"Legal actions: (.*)\.")


class Situation:
    """One decision as the seat sees it, read from the conversation's last decision message
    (a re-ask refers back to it)."""

    def __init__(self, request: ScriptedRequest) -> None:
        texts = [m.get("content") for m in request.messages if m.get("role") == "user"]
        decision = next((t for t in reversed(texts)
                         if isinstance(t, str) and "Your card:" in t), None)
        if decision is None:
            raise ValueError("no decision message in this request")
        seat, card = _SEAT.search(decision), _CARD.search(decision)
        first, legal = _FIRST.search(decision), _LEGAL.search(decision)
        if not (seat and card and first and legal):
            raise ValueError("the decision message is not in the referee's format")
        self.seat: str = seat.group(1)
        self.card: str = _CARDS[card.group(1)]
        self.position: int = 0 if first.group(1) == "first" else 1
        self.legal: tuple[str, ...] = tuple(re.findall(r"\[(\w+)\]", legal.group(1)))
        self.text: str = decision

    @property
    def history(self) -> tuple[str, ...]:
        # In Kuhn poker the position and the legal actions pin down the history.
        opening = "check" in self.legal
        if self.position == 0:
            return () if opening else ("check", "bet")
        return ("check",) if opening else ("bet",)


#: ``answer(situation) -> reply text``.
Answer = Callable[[Situation], str]


def playing(strategy: strategies.Strategy, seed: int = 0) -> Answer:
    """Answer for ``strategy``, sampling mixed actions from a generator seeded with ``seed``."""
    rng = random.Random(seed)

    def answer(s: Situation) -> str:
        action = strategies.choose(strategy, s.card, s.history, rng)
        return f"I hold the {CARD_NAMES[s.card]}. [{action}]"

    return answer


def handler(players: Mapping[str, Answer]) -> Callable[[ScriptedRequest], ScriptedReply]:
    """A ScriptedModel handler: each seat's replies come from ``players[seat]``."""

    def handle(request: ScriptedRequest) -> ScriptedReply:
        s = Situation(request)
        if s.seat not in players:
            return ScriptedReply.fault(400)
        return ScriptedReply.text(players[s.seat](s))

    return handle
