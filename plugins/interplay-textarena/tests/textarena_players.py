"""Scripted players for TextArena games, behind interplay's scripted model: they read the game's
messages the way a model would and answer with a move. They stand in for the model only; the
games, the sessions and the scoring are the real ones."""

from __future__ import annotations

import re
from collections.abc import Callable

from interplay.testing import ScriptedReply, ScriptedRequest

Player = Callable[[ScriptedRequest], ScriptedReply]


def user_texts(request: ScriptedRequest) -> list[str]:
    return [str(m.get("content") or "") for m in request.messages if m.get("role") == "user"]


def first_free_cell(request: ScriptedRequest) -> ScriptedReply:
    """Tic Tac Toe: the lowest-numbered free cell of the latest board shown."""
    boards = [t for t in user_texts(request) if "Available Moves:" in t]
    cells = re.findall(r"'\[(\d)\]'", boards[-1].split("Available Moves:")[-1])
    return ScriptedReply.text(f"I place my mark: [{cells[0]}]")


def bisect(low: int = 1, high: int = 20) -> Player:
    """Guess The Number by bisection, reading each hint the game gave after a guess."""

    def answer(request: ScriptedRequest) -> ScriptedReply:
        lo, hi = low, high
        guess = None
        for message in request.messages:
            text = str(message.get("content") or "")
            found = re.search(r"\[(\d+)\]", text) if message.get("role") == "assistant" else None
            if found:
                guess = int(found.group(1))
            elif guess is not None and "target number is higher" in text:
                lo, guess = guess + 1, None
            elif guess is not None and "target number is lower" in text:
                hi, guess = guess - 1, None
        return ScriptedReply.text(f"My guess: [{(lo + hi) // 2}]")

    return answer


def counting_up(start: int = 1) -> Player:
    """Guess The Number one number at a time from ``start``, ignoring the hints."""

    def answer(request: ScriptedRequest) -> ScriptedReply:
        guesses = sum(1 for m in request.messages if m.get("role") == "assistant"
                      and re.search(r"\[\d+\]", str(m.get("content") or "")))
        return ScriptedReply.text(f"[{start + guesses}]")

    return answer
