"""Scripted players behind the scripted model: a handler that reads the referee's message the
way a model would (its seat, its card, its position, the legal actions) and answers for a
strategy. The model double answers; everything else is interplay's own code."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping

from interplay.testing import ScriptedReply, ScriptedRequest
from interplay_kuhn_poker import strategies

NAMES = {"Jack": "J", "Queen": "Q", "King": "K"}
_SEAT = re.compile(r"You are (player\d)")
_CARD = re.compile(r"Your card: (\w+)\.")
_FIRST = re.compile(r"You act (first|second) this hand")
_LEGAL = re.compile(r"Legal actions: (.*)\.")


class Situation:
    """One decision as the seat sees it, read from the conversation."""

    def __init__(self, request: ScriptedRequest) -> None:
        msgs = [m for m in request.messages if m.get("role") == "user"]
        decision = next(m["content"] for m in reversed(msgs) if "Your card:" in m["content"])
        seat = _SEAT.search(decision)
        card = _CARD.search(decision)
        position = _FIRST.search(decision)
        legal = _LEGAL.search(decision)
        assert seat and card and position and legal, decision
        self.seat = seat.group(1)
        self.card = NAMES[card.group(1)]
        self.position = 0 if position.group(1) == "first" else 1
        self.legal = tuple(re.findall(r"\[(\w+)\]", legal.group(1)))
        self.text = decision

    @property
    def history(self) -> tuple[str, ...]:
        # Position and the legal actions pin down the history in Kuhn poker.
        opening = "check" in self.legal
        if self.position == 0:
            return () if opening else ("check", "bet")
        return ("check",) if opening else ("bet",)


Answer = Callable[[Situation], str]


def playing(strategy: strategies.Strategy, seed: int = 0) -> Answer:
    rng = random.Random(seed)

    def answer(s: Situation) -> str:
        action = strategies.choose(strategy, s.card, s.history, rng)
        return f"I hold the {s.card}. [{action}]"

    return answer


def handler(players: Mapping[str, Answer]) -> Callable[[ScriptedRequest], ScriptedReply]:
    """The scripted model's handler: each seat's answers come from ``players[seat]``."""

    def handle(request: ScriptedRequest) -> ScriptedReply:
        s = Situation(request)
        return ScriptedReply.text(players[s.seat](s))

    return handle
