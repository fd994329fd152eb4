"""The run's figures from its episode records: mean reward with its standard error,
pass@k and pass^k over each task's rollouts, per-seat rewards, metric means, stop
conditions, errors and tokens; and the summary as a table for a terminal.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from interplay.run.results import record_usage


def _comb(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n rollouts with c passes: 1 - C(n-c, k) / C(n, k)."""
    return 1.0 - _comb(n - c, k) / _comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all k pass) from n rollouts with c passes: C(c, k) / C(n, k)."""
    return _comb(c, k) / _comb(n, k)


def _ks(n: int) -> list[int]:
    ks = {n}
    k = 1
    while k < n:
        ks.add(k)
        k *= 2
    return sorted(ks)


def summarize(records: Sequence[Mapping[str, Any]], *, pass_threshold: float = 1.0,
              expected: int | None = None, wall_s: float | None = None,
              episodes_this_session: int | None = None) -> dict[str, Any]:
    """The run's figures from its episode records (dicts as read from episodes.jsonl)."""
    rewards = [float(r["reward"]) for r in records if r.get("reward") is not None]
    mean = sum(rewards) / len(rewards) if rewards else None
    stderr = _stderr(rewards)

    by_task: dict[int, list[bool]] = {}
    for r in records:
        passed = r.get("reward") is not None and float(r["reward"]) >= pass_threshold
        by_task.setdefault(int(r["info"]["task_idx"]), []).append(passed)
    pass_k: dict[str, float] = {}
    pass_hat: dict[str, float] = {}
    # An env that scores only seats (a zero-sum game) has no episode reward to pass.
    if by_task and rewards:
        # Over the rollouts every task has: a task with fewer would bias the larger k.
        n_min = min(len(v) for v in by_task.values())
        for k in _ks(n_min):
            pass_k[str(k)] = _mean([pass_at_k(len(v), sum(v), k) for v in by_task.values()])
            pass_hat[str(k)] = _mean([pass_hat_k(len(v), sum(v), k) for v in by_task.values()])

    metric_values: dict[str, list[float]] = {}
    for r in records:
        for key, value in (r.get("metrics") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                metric_values.setdefault(key, []).append(float(value))
    seat_rewards: dict[str, list[float]] = {}
    for r in records:
        for t in r.get("traces") or ():
            if t.get("reward") is not None:
                seat_rewards.setdefault(str(t.get("seat") or t.get("agent")), []).append(
                    float(t["reward"]))
    stops: Counter[str] = Counter()
    for r in records:
        for t in r.get("traces") or ():
            stops[f"{t.get('seat') or t.get('agent')}: {t.get('stop_condition')}"] += 1
    errors = Counter(str(r["error_type"]) for r in records if r.get("error_type"))
    tokens: Counter[str] = Counter()
    for r in records:
        tokens.update(r["usage"] if "usage" in r else record_usage(r))
    done = len(records)
    out: dict[str, Any] = {
        "episodes": done,
        "expected": expected,
        "complete": expected is None or done >= expected,
        "tasks": len(by_task),
        "scored": len(rewards),
        "reward_mean": mean,
        "reward_stderr": stderr,
        "pass_threshold": pass_threshold,
        "pass_at_k": pass_k,
        "pass_hat_k": pass_hat,
        "seat_rewards": {seat: {"mean": _mean(v), "stderr": _stderr(v), "n": len(v)}
                         for seat, v in sorted(seat_rewards.items())},
        "metrics": {k: _mean(v) for k, v in sorted(metric_values.items())},
        "stop_conditions": dict(sorted(stops.items())),
        "errors": dict(sorted(errors.items())),
        "error_episodes": sum(errors.values()),
        "tokens": {k: tokens[k] for k in ("prompt_tokens", "completion_tokens",
                                          "total_tokens")},
        "model_calls": tokens["model_calls"],
        "episode_wall_s_mean": _mean([float(r.get("wall_s") or 0.0) for r in records])
        if records else None,
    }
    if wall_s is not None:
        out["wall_s"] = wall_s
        ran = done if episodes_this_session is None else episodes_this_session
        out["episodes_this_session"] = ran
        out["episodes_per_s"] = ran / wall_s if wall_s > 0 else None
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _stderr(values: Sequence[float]) -> float | None:
    """The standard error of the mean (None for fewer than two values)."""
    if len(values) < 2:
        return None
    mean = _mean(values)
    var = sum((x - mean) ** 2 for x in values) / (len(values) - 1)
    return math.sqrt(var / len(values))


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_summary(summary: Mapping[str, Any], *, title: str = "") -> str:
    """The summary as an aligned two-column table for a terminal."""
    rows: list[tuple[str, str]] = []
    reward = _fmt(summary.get("reward_mean"))
    if summary.get("reward_stderr") is not None:
        reward += f" ± {summary['reward_stderr']:.3g}"
    expected = summary.get("expected")
    rows.append(("episodes", f"{summary['episodes']}" + (f" / {expected}" if expected else "")))
    rows.append(("tasks", str(summary["tasks"])))
    rows.append(("reward (mean ± se)", reward))
    for k, v in summary.get("pass_at_k", {}).items():
        rows.append((f"pass@{k}", _fmt(v)))
    for k, v in summary.get("pass_hat_k", {}).items():
        rows.append((f"pass^{k}", _fmt(v)))
    for seat, figures in summary.get("seat_rewards", {}).items():
        text = _fmt(figures["mean"])
        if figures.get("stderr") is not None:
            text += f" ± {figures['stderr']:.3g}"
        rows.append((f"reward {seat}", text))
    for k, v in summary.get("metrics", {}).items():
        rows.append((f"metric {k}", _fmt(v)))
    for k, v in summary.get("stop_conditions", {}).items():
        rows.append((f"stop {k}", str(v)))
    for k, v in summary.get("errors", {}).items():
        rows.append((f"error {k}", str(v)))
    tokens = summary.get("tokens", {})
    rows.append(("tokens prompt/completion/total",
                 f"{tokens.get('prompt_tokens', 0)} / {tokens.get('completion_tokens', 0)} / "
                 f"{tokens.get('total_tokens', 0)}"))
    rows.append(("model calls", str(summary.get("model_calls", 0))))
    if summary.get("wall_s") is not None:
        rows.append(("wall time", f"{summary['wall_s']:.1f} s"))
        rows.append(("episodes/s", _fmt(summary.get("episodes_per_s"))))
    width = max(len(k) for k, _ in rows)
    lines = [title] if title else []
    lines += [f"  {k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)

