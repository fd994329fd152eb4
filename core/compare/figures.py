"""The figures of a comparison: runs' episodes paired by their keys, the reward difference per
task and overall with a paired bootstrap interval, each seat's reward, pass@k and pass^k,
tokens, model calls and errors, and the config differences that may explain them. Plain data
(:func:`compare`), written as text by :func:`fmt`, :func:`interval` and :func:`side_rows` for
the terminal table and the page alike."""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from interplay.errors import InterplayError
from interplay.report.label import read_label
from interplay.run.config import config_differences, flatten
from interplay.run.recorded import RecordedEpisode, read_episode
from interplay.run.results import (
    CONFIG_FILE,
    EPISODES_FILE,
    iter_episodes,
    judged_names,
    recorded_verifiers,
    slim_record,
)
from interplay.run.summary import summarize

CONFIDENCE = 0.95
RESAMPLES = 2000
#: Resamples spent on the per-task intervals of one quantity, all tasks together (at least
#: 200 each).
PER_TASK_DRAWS = 400_000


@attrs.define
class Run:
    """One results folder as a comparison reads it."""

    path: Path
    label: str
    config: dict[str, Any]
    stored: dict[str, Any]
    #: Each task's content fingerprint, by index.
    tasks: dict[int, str]
    #: Each (task, rollout)'s slim record: what the summary reads.
    records: dict[tuple[int, int], dict[str, Any]]
    #: Each (task, rollout)'s episode without its transcripts: what the pairs compare (its
    #: reward, its seats' rewards, its reward components).
    episodes: dict[tuple[int, int], RecordedEpisode] = attrs.Factory(dict)
    #: The run's label (``interplay label``), or "".
    name: str = ""

    @property
    def env(self) -> str:
        return str(_map(self.config.get("env")).get("name") or "")


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def fingerprint(task: Any) -> str:
    """What makes a task the same task in two runs: its content, not only its index."""
    content = {k: v for k, v in _map(task).items() if k != "idx"}
    text = json.dumps(content, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def load_run(path: str | Path, label: str | None = None) -> Run:
    """A results folder's config and its episodes (their slim records and their episodes
    without transcripts), read line by line."""
    folder = Path(path)
    if not (folder / EPISODES_FILE).is_file():
        raise InterplayError(f"{folder}: not a results folder (no {EPISODES_FILE}); point "
                             f"`interplay compare` at -o folders of `interplay eval`")
    try:
        stored = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        stored = {}
    stored = dict(_map(stored))
    tasks: dict[int, str] = {}
    records: dict[tuple[int, int], dict[str, Any]] = {}
    episodes: dict[tuple[int, int], RecordedEpisode] = {}
    for record in iter_episodes(folder / EPISODES_FILE):
        slim = slim_record(record)
        ep = read_episode(record)
        pair = (slim["info"]["task_idx"], slim["info"]["rollout"])
        tasks.setdefault(pair[0], fingerprint(ep.task))
        records[pair] = slim
        episodes[pair] = ep.without_transcripts()
    return Run(path=folder, label=label or folder.name, config=dict(_map(stored.get("config"))),
               stored=stored, tasks=tasks, records=records, episodes=episodes,
               name=read_label(folder))


def _list(idxs: Sequence[int], limit: int = 6) -> str:
    shown = ", ".join(map(str, list(idxs)[:limit]))
    return shown + (f" and {len(idxs) - limit} more" if len(idxs) > limit else "")


class NotComparable(InterplayError):
    """Runs of other envs or other tasks, refused: ``reason`` says how they differ, the
    message adds what compares them anyway (``--common-tasks``; the view offers a link)."""

    def __init__(self, reason: str, advice: str) -> None:
        super().__init__(f"{reason}; {advice}")
        self.reason = reason


def common_tasks(runs: Sequence[Run], *, common: bool) -> list[int]:
    """The tasks every run holds, the same in each; refuses, unless ``common``, runs of other
    envs or other tasks (naming the first difference)."""
    base = runs[0]
    for other in runs[1:]:
        if other.env != base.env and not common:
            raise NotComparable(
                f"{other.label} is a run of env {other.env!r}, {base.label} of {base.env!r}",
                "compare runs of one env, or pass --common-tasks to compare the tasks they "
                "share")
        changed = sorted(i for i in set(base.tasks) & set(other.tasks)
                         if base.tasks[i] != other.tasks[i])
        only_a = sorted(set(base.tasks) - set(other.tasks))
        only_b = sorted(set(other.tasks) - set(base.tasks))
        if common:
            continue
        if changed:
            raise NotComparable(
                f"task {_list(changed)} differ between {base.label} and {other.label} (another "
                f"prompt, answer or info)",
                "pass --common-tasks to compare the tasks that are the same")
        if only_a or only_b:
            which, idxs = (base.label, only_a) if only_a else (other.label, only_b)
            raise NotComparable(
                f"only {which} has task {_list(idxs)}",
                "compare runs of the same tasks, or pass --common-tasks to compare the ones "
                "they share")
    shared = [i for i in sorted(base.tasks)
              if all(r.tasks.get(i) == base.tasks[i] for r in runs[1:])]
    if not shared:
        raise InterplayError(f"{', '.join(r.label for r in runs)} share no task (same index "
                             f"and content); nothing to compare")
    return shared


# -- figures -----------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between closest ranks."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap(groups: Sequence[Sequence[float]], *, resamples: int, rng: random.Random,
              ) -> tuple[float, float, float] | None:
    """A percentile interval for the mean over groups of each group's mean, resampling the
    groups with replacement (each kept whole): (low, high, share of resampled means above 0).
    None for fewer than two groups."""
    if len(groups) < 2:
        return None
    means = [_mean(g) for g in groups]
    n = len(means)
    stats = sorted(math.fsum(rng.choices(means, k=n)) / n for _ in range(resamples))
    alpha = (1.0 - CONFIDENCE) / 2
    above = sum(1 for s in stats if s > 0) / resamples
    return _quantile(stats, alpha), _quantile(stats, 1 - alpha), above


def _value(ep: RecordedEpisode, quantity: str) -> float | None:
    """An episode's reward (``reward``), one seat's (``seat:NAME``) or one reward component's
    (``component:NAME``); None when unscored."""
    if quantity == "reward":
        return ep.scored_reward
    if ep.is_error:
        return None
    if quantity.startswith("component:"):
        value = ep.components().get(quantity.split(":", 1)[1])
        return None if value is None else float(value)
    seat = quantity.split(":", 1)[1]
    for t in ep.traces:
        if t.seat == seat and t.reward is not None:
            return float(t.reward)
    return None


def _quantities(runs: Sequence[Run]) -> list[str]:
    seats = sorted({t.seat for r in runs for ep in r.episodes.values() for t in ep.traces
                    if t.reward is not None})
    out = ["reward"] if any(ep.scored_reward is not None for r in runs
                            for ep in r.episodes.values()) else []
    # A seat's reward is its own row where it is not the episode's (several seats, or none
    # shared): a one-seat run's assistant reward is its episode reward again.
    if len(seats) > 1 or not out:
        out += [f"seat:{s}" for s in seats]
    # Each reward component, where there are several (one is the reward again): which goal
    # a change of the reward comes from.
    names: dict[str, None] = {}
    for r in runs:
        for ep in r.episodes.values():
            for name in ep.components():
                names.setdefault(name)
    if len(names) > 1:
        out += [f"component:{name}" for name in names]
    return out


def _paired(a: Run, b: Run, tasks: set[int], quantity: str, *, resamples: int,
            seed: int) -> dict[str, Any]:
    by_task: dict[int, list[tuple[float, float]]] = {}
    for (idx, rollout), ep in a.episodes.items():
        other = b.episodes.get((idx, rollout))
        if other is None or idx not in tasks:
            continue
        x, y = _value(ep, quantity), _value(other, quantity)
        if x is not None and y is not None:
            by_task.setdefault(idx, []).append((x, y))
    rng = random.Random(f"{seed}:{quantity}")
    rows = []
    # Each task's own interval, from its few rollouts, is a coarse one: past a few hundred
    # tasks it is drawn from fewer resamples, so that thousands of tasks take seconds.
    per_task = min(resamples, max(200, PER_TASK_DRAWS // max(1, len(by_task))))
    for idx in sorted(by_task):
        pairs = by_task[idx]
        diffs = [y - x for x, y in pairs]
        ci = bootstrap([[d] for d in diffs], resamples=per_task, rng=rng)
        rows.append({"task": idx, "pairs": len(pairs), "a": _mean([x for x, _ in pairs]),
                     "b": _mean([y for _, y in pairs]), "diff": _mean(diffs),
                     "ci": None if ci is None else [ci[0], ci[1]]})
    kind, _, which = quantity.partition(":")
    kind = kind if which else "reward"
    name = {"reward": "reward", "seat": f"reward {which}",
            "component": f"component {which}"}[kind]
    out: dict[str, Any] = {"name": name, "kind": kind, "pairs": sum(r["pairs"] for r in rows),
                           "tasks": len(rows), "a": None, "b": None, "diff": None, "ci": None,
                           "p_above": None, "per_task": rows}
    if rows:
        out["a"] = _mean([r["a"] for r in rows])
        out["b"] = _mean([r["b"] for r in rows])
        out["diff"] = out["b"] - out["a"]
        ci = bootstrap([[y - x for x, y in by_task[r["task"]]] for r in rows],
                       resamples=resamples, rng=rng)
        if ci is not None:
            out["ci"], out["p_above"] = [ci[0], ci[1]], ci[2]
    return out


def _comparable(run: Run) -> dict[str, Any]:
    """What a run's config.json says decided its figures, as one table to set beside
    another's: the config, the verifiers, and what a regrade scored it with."""
    out = dict(run.config)
    out["verifiers"] = [str(_map(v).get("name") or _map(v).get("kind"))
                        for v in recorded_verifiers(run.stored)]
    regrade = _map(run.stored.get("regrade"))
    if regrade:
        out["regrade"] = {"from": regrade.get("from"), "verifiers": regrade.get("verifiers")}
    return out


def _shown(value: Any) -> str:
    text = "-" if value is None else value if isinstance(value, str) else json.dumps(
        value, ensure_ascii=False, default=repr)
    return text if len(text) <= 80 else text[:79] + "…"


def differences(a: Run, b: Run) -> list[dict[str, str]]:
    """The config keys whose values differ (where a run writes and how fast it ran aside)."""
    old, new = _comparable(a), _comparable(b)
    flat_a, flat_b = flatten(old), flatten(new)
    return [{"key": key, "a": _shown(flat_a.get(key)), "b": _shown(flat_b.get(key))}
            for key in config_differences(old, new)]


def compare(runs: Sequence[Run], *, common: bool = False, seed: int = 0,
            resamples: int = RESAMPLES) -> dict[str, Any]:
    """The comparison of ``runs[1:]`` each against ``runs[0]``, as plain data."""
    if len(runs) < 2:
        raise InterplayError("compare needs two runs or more")
    if resamples < 100:
        raise InterplayError(f"--resamples: at least 100 give an interval, got {resamples}")
    tasks = common_tasks(runs, common=common)
    wanted = set(tasks)
    threshold = runs[0].config.get("pass_threshold", 1.0)
    threshold = float(threshold) if isinstance(threshold, int | float) else 1.0
    sides = []
    for run in runs:
        kept = [r for (idx, _), r in run.records.items() if idx in wanted]
        summary = summarize(kept, pass_threshold=threshold,
                            judged=judged_names(recorded_verifiers(run.stored)))
        sides.append({"label": run.label, "name": run.name, "path": str(run.path),
                      "env": run.env,
                      "model": _shown(_map(run.config.get("model")).get("model")),
                      "left_out": len(run.records) - len(kept), "summary": summary})
    quantities = _quantities(runs)
    comparisons = []
    for other in runs[1:]:
        comparisons.append({
            "a": runs[0].label, "b": other.label,
            "quantities": [_paired(runs[0], other, wanted, q, resamples=resamples, seed=seed)
                           for q in quantities],
            "config_differences": differences(runs[0], other)})
    return {"tasks": len(tasks), "common_tasks": common, "seed": seed,
            "resamples": resamples, "confidence": CONFIDENCE, "pass_threshold": threshold,
            "runs": sides, "comparisons": comparisons}


# -- the figures as text (the terminal's table and the page) -------------------------------


def fmt(value: Any, signed: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:+.3g}" if signed else f"{value:.4g}"
    return str(value)


def interval(ci: Sequence[float] | None) -> str:
    return "-" if not ci else f"[{ci[0]:+.3g}, {ci[1]:+.3g}]"


def side_rows(result: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """The figures of each run, row by row: (label, one cell per run)."""
    sums = [s["summary"] for s in result["runs"]]
    rows: list[tuple[str, list[str]]] = []
    if any(s.get("name") for s in result["runs"]):
        rows.append(("label", [s.get("name") or "-" for s in result["runs"]]))
    rows += [
        ("env", [s["env"] for s in result["runs"]]),
        ("model", [s["model"] for s in result["runs"]]),
        ("episodes compared", [str(s["episodes"]) for s in sums]),
        ("completed", [str(s["completed"]) for s in sums]),
        ("error episodes", [str(s["error_episodes"]) for s in sums]),
        ("reward (mean ± se)", [fmt(s["reward_mean"]) + (
            f" ± {s['reward_stderr']:.3g}" if s.get("reward_stderr") is not None else "")
            if s["scored"] else "-" for s in sums]),
    ]
    seats = sorted({seat for s in sums for seat in s["seat_rewards"]})
    for seat in seats:
        rows.append((f"reward {seat}", [fmt(s["seat_rewards"].get(seat, {}).get("mean"))
                                        for s in sums]))
    for key, label in (("pass_at_k", "pass@"), ("pass_hat_k", "pass^")):
        ks = sorted({k for s in sums for k in s[key]}, key=int)
        for k in ks:
            rows.append((f"{label}{k}", [fmt(s[key].get(k)) for s in sums]))
    for kind in sorted({k for s in sums for k in s["errors"]}):
        rows.append((f"error {kind}", [str(s["errors"].get(kind, 0)) for s in sums]))
    rows.append(("tokens total", [f"{s['tokens']['total_tokens']:,}" for s in sums]))
    rows.append(("tokens per episode", [fmt(s["tokens"]["total_tokens"] / s["episodes"])
                                        if s["episodes"] else "-" for s in sums]))
    rows.append(("model calls", [f"{s['model_calls']:,}" for s in sums]))
    if any(s["left_out"] for s in result["runs"]):
        rows.append(("episodes left out (other tasks)",
                     [str(s["left_out"]) for s in result["runs"]]))
    return rows
