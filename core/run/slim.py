"""What the summary reads of an episode record, checked: its pair, reward, errors, stop
conditions, metrics, token counts and judges' criteria, from a line of episodes.jsonl
(:func:`slim_record`, which refuses a line whose fields are not what an episode line holds) or
from an episode that has just finished (:func:`slim_episode`). What a reader keeps per episode
when a results file must never sit in memory whole.

This module owns reading those fields and checking them; it must not open a file, write one,
or compute the summary itself (:mod:`~interplay.run.summary` does).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from interplay.values.records import Episode


def pair_of(record: Mapping[str, Any]) -> tuple[int, int]:
    """The (task idx, rollout) an episode record is for."""
    info = record["info"]
    return int(info["task_idx"]), int(info.get("rollout") or 0)


def slim_record(record: Any) -> dict[str, Any]:
    """What :func:`~interplay.run.summary.summarize` reads of an episode record, checked:
    raises ValueError naming the first field that is not what an episode line holds."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {_kind(record)}")
    info = _get(record, "info", dict)
    if info is None:
        raise ValueError("info: missing")
    task_idx = _get(info, "task_idx", int, where="info.")
    if task_idx is None:
        raise ValueError("info.task_idx: missing")
    rollout = _get(info, "rollout", int, where="info.") or 0
    if rollout < 0:
        raise ValueError(f"info.rollout: expected 0 or more, got {rollout}")
    traces = []
    for i, t in enumerate(_get(record, "traces", list) or ()):
        where = f"traces[{i}]."
        if not isinstance(t, dict):
            raise ValueError(f"{where[:-1]}: expected an object, got {_kind(t)}")
        traces.append({"seat": _get(t, "seat", str, where=where),
                       "agent": _get(t, "agent", str, where=where),
                       "stop_condition": _get(t, "stop_condition", str, where=where),
                       "reward": _get(t, "reward", float, where=where)})
    metrics = _get(record, "metrics", dict) or {}
    return {"info": {"task_idx": task_idx, "rollout": rollout,
                     "episode_id": _get(info, "episode_id", str, where="info.")},
            "reward": _get(record, "reward", float),
            "error_type": _get(record, "error_type", str),
            "error": _short(_get(record, "error", str)), "metrics": metrics,
            "started_at": _get(record, "started_at", float),
            "wall_s": _get(record, "wall_s", float),
            "traces": traces, "usage": dict(record_usage(record)),
            "criteria": criteria_scores((_map(r).get("name"), _map(r).get("info"))
                                        for r in _get(record, "rewards", list) or ())}


#: Characters of an episode's error the slim record keeps: enough to tell causes apart.
ERROR_CHARS = 500


def _short(error: str | None) -> str | None:
    return error if error is None or len(error) <= ERROR_CHARS else error[:ERROR_CHARS] + "…"


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _get(obj: Mapping[str, Any], key: str, kind: type, *, where: str = "") -> Any:
    """``obj[key]`` if it is absent, null or a ``kind`` (``float``: a finite number; ``int``:
    not a bool), else ValueError naming the field."""
    value = obj.get(key)
    if value is None:
        return None
    if kind is float:
        ok, what = finite_number(value), "a finite number"
    else:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        what = {int: "an integer", str: "text", dict: "an object", list: "a list"}[kind]
    if not ok:
        got = repr(value) if isinstance(value, float) else _kind(value)
        raise ValueError(f"{where}{key}: expected {what} or null, got {got}")
    return value


def slim_episode(episode: Episode) -> dict[str, Any]:
    """:func:`slim_record` of an episode that has just finished."""
    # Summed here rather than through Episode.usage, which makes a Usage per call it adds.
    prompt = completion = total = calls = 0
    for call_list in [*(t.model_calls for t in episode.traces), episode.judge_calls]:
        calls += len(call_list)
        for call in call_list:
            usage = call.usage
            if usage is not None:
                prompt += usage.prompt_tokens
                completion += usage.completion_tokens
                total += usage.total_tokens
    info = episode.info
    return {"info": {"task_idx": info.task_idx, "rollout": info.rollout,
                     "episode_id": info.episode_id},
            "reward": episode.reward, "error_type": episode.error_type,
            "error": _short(episode.error),
            "metrics": dict(episode.metrics), "started_at": episode.started_at,
            "wall_s": episode.wall_s,
            "traces": [{"seat": t.seat, "agent": t.agent, "stop_condition": t.stop_condition,
                        "reward": t.reward}
                       for t in episode.traces],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": total, "model_calls": calls},
            "criteria": criteria_scores((r.name, r.info) for r in episode.rewards)}


def criteria_scores(rewards: Iterable[tuple[Any, Any]]) -> dict[str, dict[str, float]]:
    """Per-criterion scores by reward name, from ``(name, info)`` pairs: what a judge (a
    rubric verifier) keeps in its reward's ``info["criteria"]``; rewards without are left
    out. Which of them came from a judge, the summary is told by name."""
    out: dict[str, dict[str, float]] = {}
    for name, info in rewards:
        criteria = info.get("criteria") if isinstance(info, Mapping) else None
        if not isinstance(name, str) or not isinstance(criteria, Mapping):
            continue
        scores = {str(k): float(v["score"]) for k, v in criteria.items()
                  if isinstance(v, Mapping) and finite_number(v.get("score"))}
        if scores:
            out[name] = scores
    return out


_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def record_usage(record: Mapping[str, Any]) -> Counter[str]:
    """The tokens and model calls of an episode record (every trace's calls and the judge's);
    raises ValueError naming a call or a count that is not what a line holds."""
    # Summed without naming each call first: every line read is checked here, and naming the
    # calls cost most of the reading. Anything unusual is left to the naming way, whose
    # errors say where.
    if "side" in record:  # a split line keeps its traces' and judges' usage as counts
        return _named_usage(record)
    counts = [0, 0, 0]
    calls = 0
    try:
        lists = [t.get("model_calls") for t in record.get("traces") or ()]
        lists.append(record.get("judge_calls"))
        for found in lists:
            if found is None:
                continue
            if type(found) is not list:
                raise _Unusual
            calls += len(found)
            for call in found:
                usage = call.get("usage")
                if usage is None:
                    continue
                if type(usage) is not dict:
                    raise _Unusual
                for k, key in enumerate(_USAGE_KEYS):
                    count = usage.get(key)
                    if count is None:
                        continue
                    if type(count) is not int or count < 0:
                        raise _Unusual
                    counts[k] += count
    except (_Unusual, AttributeError):
        return _named_usage(record)
    total: Counter[str] = Counter(dict(zip(_USAGE_KEYS, counts, strict=True)))
    total["model_calls"] = calls
    return total


class _Unusual(Exception):
    """A call or a count record_usage leaves to :func:`_named_usage`."""


def _named_usage(record: Mapping[str, Any]) -> Counter[str]:
    total: Counter[str] = Counter()
    calls: list[tuple[str, Any]] = []
    for i, t in enumerate(record.get("traces") or ()):
        if "model_calls" not in t and isinstance(t.get("usage"), dict):
            total.update(_usage_counts(t["usage"], f"traces[{i}].usage."))  # a split line
            continue
        calls += [(f"traces[{i}].model_calls[{j}]", c)
                  for j, c in enumerate(_get(t, "model_calls", list, where=f"traces[{i}].")
                                        or ())]
    if isinstance(record.get("judge_usage"), dict):
        total.update(_usage_counts(record["judge_usage"], "judge_usage."))
    calls += [(f"judge_calls[{j}]", c)
              for j, c in enumerate(_get(record, "judge_calls", list) or ())]
    for where, call in calls:
        if not isinstance(call, dict):
            raise ValueError(f"{where}: expected an object, got {_kind(call)}")
        usage = _get(call, "usage", dict, where=f"{where}.") or {}
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            count = _get(usage, key, int, where=f"{where}.usage.") or 0
            if count < 0:
                raise ValueError(f"{where}.usage.{key}: expected 0 or more, got {count}")
            total[key] += count
    total["model_calls"] += len(calls)
    return total


def _usage_counts(usage: Mapping[str, Any], where: str) -> Counter[str]:
    """The counts a split line keeps of a trace's (or the judges') calls, checked."""
    out: Counter[str] = Counter()
    for key in ("prompt_tokens", "completion_tokens", "total_tokens", "model_calls"):
        count = _get(usage, key, int, where=where) or 0
        if count < 0:
            raise ValueError(f"{where}{key}: expected 0 or more, got {count}")
        out[key] += count
    return out


def finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (not a bool) and neither NaN nor infinite."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def counted_reward(error_type: Any, reward: Any) -> float | None:
    """The reward an episode counts with, the one rule the summary and the pages read: None
    for an error episode whatever its line holds (a line written before this rule may carry
    one) and for an episode nothing scored."""
    return None if error_type or reward is None else float(reward)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
