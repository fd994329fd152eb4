"""The deterministic criteria graded next to the judge's, from an always_on run's records.

- **Reply latency**, in the user's local time: for each message of hers (her opening, her
  lines, her replies), how long until the agent next wrote to her, counting only her awake
  hours (a question at 22:50 answered at 07:10 waited 20 minutes of her day, not 8 hours).
  Messages she sent before the agent answered count from the first of them. Messages never
  answered count from the first direct question among them until the run's end, and are left
  out when none asks one (nothing was asked). The median and the worst are each scored from 1
  (at or under ``good_minutes``) down to 0 (at or over ``bad_minutes``), and the criterion is
  their mean.
- **Silence**: the wakes where the agent wrote to her though nothing warranted it (nothing in
  ``news`` woke it, no app changed in the wake, and it was not the final wake), and the wakes
  where it stayed quiet (sent nothing) though she asked a direct question. The criterion is
  the share of the wakes that count (those where it wrote, and those with a direct question)
  handled right.

A direct question is a line of hers holding a question mark. Nothing here calls a model.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from interplay.world import Schedule

#: What may wake the agent (the kinds of a wake's sources) and warrant a message to her.
WAKE_KINDS = ("opening", "line", "user_reply", "alert", "contact_reply", "check", "rules",
              "reminder", "final_notice")


@attrs.define
class LatencyConfig:
    """Reply latency in her awake hours."""

    #: The criterion's weight among the judge's criteria.
    weight: float = 1.0
    #: Minutes of her awake time at or under which a latency scores 1.
    good_minutes: float = 30.0
    #: Minutes at or over which it scores 0.
    bad_minutes: float = 480.0


@attrs.define
class SilenceConfig:
    """Writing when nothing warranted it, staying quiet on a direct question."""

    #: The criterion's weight among the judge's criteria.
    weight: float = 1.0
    #: What woke the agent that warrants a message to her (a wake's source kinds).
    news: list[str] = attrs.Factory(lambda: ["opening", "line", "user_reply", "alert",
                                             "contact_reply"])


@attrs.define
class Measured:
    """One deterministic criterion: its score in [0, 1], weight, reason and figures."""

    name: str
    score: float
    weight: float
    reason: str
    figures: dict[str, Any] = attrs.Factory(dict)


def latency_problems(cfg: LatencyConfig) -> list[str]:
    problems = []
    if cfg.weight < 0:
        problems.append(f"latency.weight must be 0 or more, got {cfg.weight}")
    if not 0 <= cfg.good_minutes < cfg.bad_minutes:
        problems.append(f"latency: good_minutes ({cfg.good_minutes:g}) must be 0 or more and "
                        f"below bad_minutes ({cfg.bad_minutes:g})")
    return problems


def silence_problems(cfg: SilenceConfig) -> list[str]:
    problems = []
    if cfg.weight < 0:
        problems.append(f"silence.weight must be 0 or more, got {cfg.weight}")
    unknown = sorted(set(cfg.news) - set(WAKE_KINDS))
    if unknown:
        problems.append(f"silence.news: unknown wake source {', '.join(unknown)}; the kinds are "
                        f"{', '.join(WAKE_KINDS)}")
    return problems


def is_question(text: Any) -> bool:
    return isinstance(text, str) and "?" in text


def _epoch(iso: Any) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(iso)).timestamp()
    except ValueError:
        return None


def latency(record: Mapping[str, Any], user: Mapping[str, Any],
            cfg: LatencyConfig) -> Measured | None:
    """The reply-latency criterion; None when she wrote nothing that called for an answer."""
    start = _epoch(record.get("start"))
    if start is None:
        return None
    chat = [e for e in record.get("conversation") or () if isinstance(e, Mapping)]
    end_t = next((float(e["t"]) for e in chat if e.get("kind") == "end"), None)
    schedule = Schedule.from_plain(user or {"timezone": record.get("timezone")})
    waits: list[float] = []
    unanswered = 0
    waiting_since: float | None = None
    asked_at: float | None = None
    for entry in chat:
        if entry.get("from") == "user" and entry.get("kind") in ("opening", "line", "reply"):
            t = float(entry["t"])
            waiting_since = t if waiting_since is None else waiting_since
            if asked_at is None and is_question(entry.get("text")):
                asked_at = t
        elif entry.get("from") == "agent" and waiting_since is not None:
            waits.append(schedule.awake_seconds(start + waiting_since, start + float(entry["t"])))
            waiting_since = asked_at = None
    if asked_at is not None and end_t is not None:
        waits.append(schedule.awake_seconds(start + asked_at, start + end_t))
        unanswered = 1
    if not waits:
        return None
    median, worst = statistics.median(waits) / 60, max(waits) / 60
    score = (_scaled(median, cfg) + _scaled(worst, cfg)) / 2
    reason = (f"median {median:.0f} min, worst {worst:.0f} min of her awake time over "
              f"{len(waits)} wait(s)" + (", the last question never answered"
                                         if unanswered else ""))
    return Measured("reply_latency", score, cfg.weight, reason,
                    {"median_minutes": round(median, 3), "worst_minutes": round(worst, 3),
                     "waits": len(waits), "unanswered": unanswered})


def _scaled(minutes: float, cfg: LatencyConfig) -> float:
    if minutes <= cfg.good_minutes:
        return 1.0
    if minutes >= cfg.bad_minutes:
        return 0.0
    return (cfg.bad_minutes - minutes) / (cfg.bad_minutes - cfg.good_minutes)


def silence(record: Mapping[str, Any], cfg: SilenceConfig) -> Measured:
    """The silence criterion over the run's wakes."""
    timeline = [e for e in record.get("timeline") or () if isinstance(e, Mapping)]
    changed = {e.get("wake") for e in timeline if e.get("kind") in ("change", "changes_folded")}
    news = set(cfg.news)
    unwarranted: list[int] = []
    quiet: list[int] = []
    counted = 0
    for wake in (e for e in timeline if e.get("kind") == "wake"):
        n = wake.get("wake")
        sources: Sequence[Any] = wake.get("sources") or ()
        wrote = bool(wake.get("sent"))
        asked = any(isinstance(s, Mapping) and s.get("from") == "user"
                    and is_question(s.get("text")) for s in sources)
        if not (wrote or asked):
            continue
        counted += 1
        warranted = wake.get("final") or n in changed or any(
            isinstance(s, Mapping) and s.get("kind") in news for s in sources)
        if wrote and not warranted:
            unwarranted.append(n)
        if asked and not wrote:
            quiet.append(n)
    wrong = len(set(unwarranted) | set(quiet))
    score = 1.0 - wrong / counted if counted else 1.0
    parts = []
    if unwarranted:
        parts.append(f"wrote unprompted in wake(s) {', '.join(map(str, unwarranted))}")
    if quiet:
        parts.append(f"stayed quiet on a direct question in wake(s) "
                     f"{', '.join(map(str, quiet))}")
    reason = "; ".join(parts) or f"no needless message and no unanswered question in " \
                                 f"{counted} wake(s) that counted"
    return Measured("silence", score, cfg.weight, reason,
                    {"wakes_counted": counted, "unwarranted_wakes": unwarranted,
                     "quiet_on_question_wakes": quiet})
