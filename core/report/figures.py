"""The run as a whole on the report's page: the summary's figures and tables
(:func:`summary_view`, from ``summary.json``), which seats the episode table gives a column
(:func:`table_seats`), and what the run's charts draw (:class:`Figures`, gathered episode by
episode in bounded memory).

This module turns the summary and the episodes' counts into plain values and charts; it must
not write the page or read a file.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from interplay.report import charts
from interplay.report.plain import fmt
from interplay.run.recorded import RecordedEpisode
from interplay.run.results import finite_number
from interplay.run.summary import (
    TRUNCATED_LABEL,
    completion_text,
    metric_text,
    reward_text,
    truncated_text,
)
from interplay.values.plain import as_map, as_text

RULE = ("Rewards, pass@k and metrics are over the completed episodes (a metric over those that "
        "recorded it, its count beside it when that is fewer). An episode that ended in an "
        "error (a model fault, a user sim that failed, a failed verifier, an env that raised) "
        "is not scored: it is counted among the errors.")


def _per_seat(summary: Mapping[str, Any]) -> bool:
    """Whether the run's figures are its seats' rewards (a game scores each seat, never the
    episode)."""
    return not summary.get("scored") and bool(as_map(summary.get("seat_rewards")))


def summary_view(summary: Mapping[str, Any]) -> dict[str, Any]:
    expected = summary.get("expected")
    tokens = as_map(summary.get("tokens"))
    figures = [
        ("episodes", f"{summary.get('episodes', 0)}" + (f" / {expected}" if expected else ""),
         "episodes"),
        ("completed", completion_text(summary), "completed"),
    ]
    if _per_seat(summary):
        for seat, v in as_map(summary.get("seat_rewards")).items():
            v = as_map(v)
            se = f" ± {v['stderr']:.3g}" if finite_number(v.get("stderr")) else ""
            figures.append((f"{seat}: mean reward ± se ({fmt(v.get('n'))} scored)",
                            f"{fmt(v.get('mean'))}{se}", "reward seat"))
    else:
        figures.append((f"mean reward ± se ({summary.get('scored', 0)} scored)",
                        reward_text(summary), "reward"))
        if (truncated := truncated_text(summary)) is not None:
            # Averaged in above, so said beside it: never averaged in unmarked.
            figures.append((TRUNCATED_LABEL, truncated, "truncated"))
    figures += [
        ("error episodes (not scored)", fmt(summary.get("error_episodes", 0)), "errors"),
        ("tokens", f"{tokens.get('total_tokens', 0):,}", "tokens"),
        ("model calls", f"{summary.get('model_calls', 0):,}", "calls"),
    ]
    if summary.get("wall_s") is not None:
        figures.append(("wall time", f"{fmt(summary['wall_s'], 3)} s", "wall"))
    passk = [(f"pass@{k}", fmt(v)) for k, v in as_map(summary.get("pass_at_k")).items()]
    passk += [(f"pass^{k}", fmt(v)) for k, v in as_map(summary.get("pass_hat_k")).items()]
    seats = [(seat, fmt(as_map(v).get("mean"))) for seat, v in
             as_map(summary.get("seat_rewards")).items()]
    criteria = [(f"{name}.{c}", f"{fmt(as_map(v).get('mean'))} (n={fmt(as_map(v).get('n'))})")
                for name, by in as_map(summary.get("criteria")).items()
                for c, v in as_map(by).items()]
    tables = [
        (f"pass (reward ≥ {fmt(summary.get('pass_threshold'))})", passk, "passk"),
        ("judge criteria (mean)", criteria, "criteria"),
        ("reward per seat (mean)", seats, "seats"),
        ("metrics (mean)", [(k, metric_text(summary, k))
                            for k in as_map(summary.get("metrics"))], "metrics"),
        ("stop conditions", as_map(summary.get("stop_conditions")).items(), "stops"),
        ("errors", as_map(summary.get("errors")).items(), "errtypes"),
        ("tokens", tokens.items(), "tokentable"),
    ]
    return {"figures": [{"label": label, "value": value, "cls": cls}
                        for label, value, cls in figures],
            "rule": RULE,
            "incomplete": bool(summary.get("interrupted")) or not summary.get("complete", True),
            "tables": [{"title": title, "cls": cls,
                        "rows": [(as_text(k), fmt(v)) for k, v in rows]}
                       for title, rows, cls in tables]}


class Figures:
    """What the run's charts draw, gathered episode by episode in bounded memory: rewards by
    value, each task's reward sum and count, and each seat's model calls in log-scale bins of
    completion tokens and of latency."""

    def __init__(self) -> None:
        self.rewards: Counter[float] = Counter()
        self.tasks: dict[int, list[float]] = {}
        self.tokens: dict[str, Counter[int]] = {}
        self.seconds: dict[str, Counter[int]] = {}

    def add(self, ep: RecordedEpisode) -> None:
        reward = ep.scored_reward
        if reward is not None and math.isfinite(reward):
            self.rewards[round(reward, 4)] += 1
            idx = ep.task_idx
            if idx is not None:
                acc = self.tasks.setdefault(idx, [0.0, 0])
                acc[0] += reward
                acc[1] += 1
        for t in ep.traces:
            self._calls(t.seat, t.model_calls)
        self._calls("judge", ep.judge_calls)

    def _calls(self, seat: str, calls: Sequence[Mapping[str, Any]]) -> None:
        tokens = self.tokens.get(seat)
        seconds = self.seconds.get(seat)
        for call in calls:
            usage = call.get("usage")
            count = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
            if type(count) is int and count > 0:
                if tokens is None:
                    tokens = self.tokens[seat] = Counter()
                tokens[charts.log_bin(count)] += 1
            latency = call.get("latency_s")
            if type(latency) is float and 0 < latency < math.inf:
                if seconds is None:
                    seconds = self.seconds[seat] = Counter()
                seconds[charts.log_bin(latency)] += 1

    def draw(self, summary: Mapping[str, Any]) -> list[Markup]:
        drawn = [
            charts.reward_distribution(self.rewards),
            charts.pass_at_k(as_map(summary.get("pass_at_k")), as_map(summary.get("pass_hat_k")),
                             fmt(summary.get("pass_threshold"))),
            charts.reward_per_task({t: (s / n, int(n)) for t, (s, n) in self.tasks.items()}),
            charts.per_call(self.tokens, self.seconds),
            charts.errors({str(k): int(v) for k, v in as_map(summary.get("errors")).items()
                           if isinstance(v, int)}),
        ]
        return [c for c in drawn if c is not None]


def table_seats(summary: Mapping[str, Any]) -> list[str]:
    """The seats the table gives a reward column of their own: every rewarded seat of a run
    with more than one, or of a run scored only per seat."""
    seats = list(as_map(summary.get("seat_rewards")))
    return seats if len(seats) > 1 or _per_seat(summary) else []

