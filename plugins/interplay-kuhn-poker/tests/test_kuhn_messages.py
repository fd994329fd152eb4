"""Reading replies and writing what each seat is told."""

from __future__ import annotations

import pytest

from interplay.testing import ScriptedRequest
from interplay_kuhn_poker import messages, rules, strategies
from interplay_kuhn_poker.scripted import Situation, handler, playing

OPEN = ("check", "bet")
FACING = ("call", "fold")


@pytest.mark.parametrize(("text", "legal", "action"), [
    ("[bet]", OPEN, "bet"),
    ("I hold the King, so I [bet].", OPEN, "bet"),
    ("[ Check ]", OPEN, "check"),
    ("[FOLD]\n", FACING, "fold"),
    ("Facing a bet with a Queen... [call] it is", FACING, "call"),
])
def test_one_legal_bracketed_action_is_valid(text: str, legal: tuple[str, ...],
                                             action: str) -> None:
    parsed = messages.parse_reply(text, legal)
    assert parsed.valid and parsed.action == action and parsed.problem is None


@pytest.mark.parametrize(("text", "legal", "problem"), [
    ("", OPEN, "no action in square brackets"),
    ("bet", OPEN, "no action in square brackets"),
    ("[bet] [bet]", OPEN, "2 bracketed words"),
    ("[check] or maybe [bet]", OPEN, "2 bracketed words"),
    ("I have a [King] so [bet]", OPEN, "2 bracketed words"),
    ("[call]", OPEN, "[call] is not allowed now"),
    ("[fold]", OPEN, "[fold] is not allowed now"),
    ("[check]", FACING, "[check] is not allowed now"),
    ("[bet]", FACING, "[bet] is not allowed now"),
    ("[raise]", OPEN, "[raise] is not an action"),
    ("[]", OPEN, "[] is not an action"),
])
def test_invalid_replies_say_why(text: str, legal: tuple[str, ...], problem: str) -> None:
    parsed = messages.parse_reply(text, legal)
    assert not parsed.valid and parsed.action is None
    assert parsed.problem is not None and problem in parsed.problem
    # The player is always told what it may answer.
    assert all(f"[{a}]" in parsed.problem for a in legal)


def test_decision_message_tells_the_seat_its_card_history_and_options() -> None:
    text = messages.decision_message(seat="player1", order=("player1", "player0"), card="Q",
                                     history=["check", "bet"], legal=FACING, hand=1, hands=3,
                                     news=["Hand 1 is over (...)."])
    assert text.startswith("Hand 1 is over")
    assert "Hand 2 of 3" in text
    assert "You act first this hand" in text
    assert "Your card: Queen." in text
    assert "You checked, then player0 bet." in text
    assert "Pot: 3 chips (1 of them yours)." in text
    assert "Legal actions: [call] or [fold]." in text
    # The card the opponent holds is never in the message.
    assert "King" not in text and "Jack" not in text


def test_hand_summary_from_each_side() -> None:
    order = ("player0", "player1")
    res = rules.play(("J", "K"), ["bet", "call"])
    assert messages.hand_summary(res, order, "player0", 0, -2) == (
        "Hand 1 is over (showdown: you had Jack, player1 had King); you lost 2 chips. "
        "Your match total: -2 chips.")
    assert "you won 2 chips" in messages.hand_summary(res, order, "player1", 0, 2)
    folded = rules.play(("J", "K"), ["bet", "fold"])
    assert "(you folded); you lost 1 chip." in messages.hand_summary(folded, order, "player1",
                                                                      0, -1)
    forfeit = rules.forfeit(("J", "K"), ("check",))
    seen_by_winner = messages.hand_summary(forfeit, order, "player0", 0, 1)
    assert "(player1 gave no valid action and forfeited); you won 1 chip." in seen_by_winner
    seen_by_loser = messages.hand_summary(forfeit, order, "player1", 0, -1)
    assert "(you gave no valid action and forfeited); you lost 1 chip." in seen_by_loser


def test_reask_counts_down_to_the_last_chance() -> None:
    assert "2 tries left" in messages.reask_message("it has no action", 2)
    assert "last chance" in messages.reask_message("it has no action", 1)


def _request(*user_texts: str) -> ScriptedRequest:
    msgs = [{"role": "system", "content": messages.RULES},
            *({"role": "user", "content": t} for t in user_texts)]
    return ScriptedRequest(api="chat.completions", body={"messages": msgs}, headers={},
                           path="/v1/chat/completions")


def test_scripted_players_read_the_decision_as_a_model_would() -> None:
    text = messages.decision_message(seat="player1", order=("player0", "player1"), card="K",
                                     history=["bet"], legal=FACING, hand=0, hands=1)
    s = Situation(_request(text, "That reply is not valid: ..."))
    assert (s.seat, s.card, s.position, s.legal, s.history) == (
        "player1", "K", 1, FACING, ("bet",))
    reply = handler({"player1": playing(strategies.always_bet)})(_request(text))
    assert reply.content == "I hold the King. [call]"
    # A seat the handler has no player for gets a refusal, not a made-up move.
    assert handler({})(_request(text)).status == 400
    with pytest.raises(ValueError, match="no decision message"):
        Situation(_request("hello"))
