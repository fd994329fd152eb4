"""The deterministic criteria on records written by hand (the shape docs/always_on.md gives):
latency counted in her awake hours across a night, grouped messages, an unanswered question
and a message that needed no answer; silence with a needless message and a quiet wake."""

from __future__ import annotations

from typing import Any

import pytest

from interplay_always_on_verifier.measures import (
    LatencyConfig,
    SilenceConfig,
    latency,
    silence,
)

START = "2025-06-02T08:00:00+02:00"
USER = {"timezone": "Europe/Berlin", "awake": ["07:00", "23:00"], "busy": []}
H = 3600.0


def her(t: float, text: str, kind: str = "line") -> dict[str, Any]:
    return {"from": "user", "kind": kind, "text": text, "t": t}


def agent(t: float, n: int) -> dict[str, Any]:
    return {"from": "agent", "kind": "message", "n": n, "text": "...", "t": t}


def record(*chat: dict[str, Any], end_t: float = 100 * H) -> dict[str, Any]:
    return {"start": START, "timezone": "Europe/Berlin",
            "conversation": [*chat, {"from": "step", "kind": "end", "t": end_t}]}


def test_latency_counts_only_her_awake_hours() -> None:
    # 22:50 on Monday (14h50m after the 08:00 start), answered at 07:10 on Tuesday: 20 awake
    # minutes. Two lines before an answer count from the first.
    found = latency(record(her(0, "Plan my week?", "opening"), agent(0.5 * H, 1),
                           her(14 * H + 50 * 60, "Are you there?"),
                           her(15 * H, "Hello?"), agent(23 * H + 10 * 60, 2)),
                    USER, LatencyConfig(good_minutes=10, bad_minutes=70))
    assert found is not None
    assert found.figures == {"median_minutes": 25.0, "worst_minutes": 30.0, "waits": 2,
                             "unanswered": 0}
    # Each of median and worst scored from 1 at 10 minutes down to 0 at 70.
    assert found.score == pytest.approx(((70 - 25) / 60 + (70 - 30) / 60) / 2)
    assert found.name == "reply_latency" and found.weight == 1.0


def test_an_unanswered_question_counts_to_the_end_and_a_thank_you_does_not() -> None:
    thanks = record(her(0, "Book it.", "opening"), agent(0, 1), her(1 * H, "Thanks!", "reply"))
    found = latency(thanks, USER, LatencyConfig())
    assert found is not None and found.figures["waits"] == 1  # the thank-you is left out
    asked = record(her(0, "Book it.", "opening"), agent(0, 1), her(1 * H, "Thanks!", "reply"),
                   her(2 * H, "Did it work?"), end_t=6 * H)
    found = latency(asked, USER, LatencyConfig())
    assert found is not None
    assert found.figures["unanswered"] == 1 and found.figures["worst_minutes"] == 240.0
    assert "the last question never answered" in found.reason
    assert latency(record(), USER, LatencyConfig()) is None  # she wrote nothing


def test_latency_without_awake_hours_is_wall_time() -> None:
    found = latency(record(her(0, "hi?", "opening"), agent(10 * H, 1)), {"timezone": "UTC"},
                    LatencyConfig())
    assert found is not None and found.figures["worst_minutes"] == 600.0


def wake(n: int, *sources: dict[str, Any], sent: tuple[int, ...] = (),
         final: bool = False) -> dict[str, Any]:
    return {"kind": "wake", "wake": n, "sources": list(sources), "sent": list(sent),
            "final": final}


def test_silence_finds_needless_messages_and_quiet_questions() -> None:
    timeline = [
        wake(1, {"kind": "opening", "from": "user", "text": "Find a venue."}, sent=(1,)),
        # Its own check, nothing new: writing here is needless...
        wake(2, {"kind": "check", "from": "world", "text": "follow up"}, sent=(2,)),
        # ...unless something changed in the wake (it did something she should hear of).
        wake(3, {"kind": "check", "from": "world"}, sent=(3,)),
        {"kind": "change", "wake": 3, "app": "inbox", "action": "email_sent", "by": "agent"},
        wake(4, {"kind": "line", "from": "user", "text": "Any news?"}),
        wake(5, {"kind": "alert", "from": "world", "text": "Holds end Friday"}),
        wake(6, {"kind": "check", "from": "world"}, sent=(4,), final=True),
    ]
    found = silence({"timeline": timeline}, SilenceConfig())
    assert found.figures == {"wakes_counted": 5, "unwarranted_wakes": [2],
                             "quiet_on_question_wakes": [4]}
    assert found.score == pytest.approx(1 - 2 / 5)
    assert found.reason == ("wrote unprompted in wake(s) 2; stayed quiet on a direct question "
                            "in wake(s) 4")
    # Checks may be made news too.
    found = silence({"timeline": timeline}, SilenceConfig(news=["opening", "line", "check"]))
    assert found.figures["unwarranted_wakes"] == []
    assert silence({"timeline": []}, SilenceConfig()).score == 1.0
