"""The run: ``interplay eval ENV`` runs N tasks x R rollouts, C episodes at once.

Owns the run's config (:class:`RunConfig`: a TOML file, flags, ``--set`` overrides), the results
folder (``config.json``, ``episodes.jsonl`` appended and fsync'd as each episode finishes,
``summary.json``), resuming a folder, the summary (mean reward and its standard error, pass@k
and pass^k, metrics, stop conditions, errors, tokens) and the progress display.

``-c`` bounds episodes, never chat sessions: an episode that holds several sessions at once runs
them all inside its one slot. It does not run steps or score episodes (``interplay.episode``)
and does not render the report (``interplay.report``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import hashlib
import json
import math
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
import cattrs
import structlog

from interplay import aio, plugins
from interplay import config as config_mod
from interplay.endpoint import Endpoint
from interplay.env import Env
from interplay.errors import InterplayError
from interplay.records import Episode, EpisodeInfo, Task, converter, to_json_bytes

log = structlog.get_logger("interplay.runner")

CONFIG_FILE = "config.json"
EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"
#: Fields that may differ between a run and its resumption: where it writes and how fast.
RESUME_IGNORED = frozenset({"output", "concurrency", "workers", "retry_errors"})
DEFAULT_CONCURRENCY = 8


@attrs.define
class RunConfig:
    """Everything that decides what a run computes (plus where and how fast).

    ``env`` holds the env's name under ``name`` and the env's own settings beside it
    (``--set env.relay.max_turns=4``), structured into the env's ``Config`` class.
    ``seats`` overrides the env's seat settings (``--set seats.assistant.harness=null``).
    """

    env: dict[str, Any] = attrs.Factory(dict)
    #: Tasks to run (the first n of the taskset); None runs them all.
    n: int | None = None
    rollouts: int = 1
    #: Episodes at once; None: 8, or 1 on the embedded local model, which answers one
    #: request at a time (more would only queue calls into their timeouts).
    concurrency: int | None = None
    #: Processes that run the episodes (the -c episodes are spread over them); past a few
    #: thousand model calls a second one process is the bottleneck (interplay.workers).
    workers: int = 1
    seed: int = 0
    model: Endpoint = attrs.Factory(Endpoint)
    seats: dict[str, dict[str, Any]] = attrs.Factory(dict)
    #: An episode passes (for pass@k and pass^k) when its reward is at least this.
    pass_threshold: float = 1.0
    output: str | None = None
    #: On resume, run again the episodes that ended in an error (their new record supersedes
    #: the old one; the old line stays in episodes.jsonl).
    retry_errors: bool = False

    @property
    def env_name(self) -> str:
        return str(self.env.get("name") or "")

    def env_settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.env.items() if k != "name"}


def episode_seed(seed: int, task_idx: int, rollout: int) -> int:
    """The seed of one episode, derived from the run's seed and the (task, rollout) pair alone,
    so it does not depend on scheduling or on what a resumed run already holds."""
    digest = hashlib.sha256(f"{seed}:{task_idx}:{rollout}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


# -- config ------------------------------------------------------------------------------------


def load_env(name: str, settings: Mapping[str, Any]) -> Env:
    """The env registered as ``name`` (or a TOML env file), configured with ``settings``."""
    if not name:
        raise InterplayError("no env given; name one, e.g. `interplay eval echo` "
                             "(`interplay list envs` shows them)")
    if name.endswith(".toml") and Path(name).is_file():
        from interplay.env import env_from_toml

        env_cls = env_from_toml(name)
    else:
        env_cls = plugins.get("envs", name)
    env_config = config_mod.structure(dict(settings), env_cls.Config, path="env")
    return env_cls(env_config)


def resolve(data: Mapping[str, Any]) -> tuple[RunConfig, Env, dict[str, Any]]:
    """Structure ``data`` into a RunConfig, load and check its env, and return the resolved
    config as plain data (the env's settings with every default filled in)."""
    cfg = config_mod.structure(data, RunConfig)
    if cfg.n is not None and cfg.n < 1:
        raise InterplayError(f"n: must be at least 1, got {cfg.n}")
    if cfg.rollouts < 1:
        raise InterplayError(f"rollouts: must be at least 1, got {cfg.rollouts}")
    if cfg.concurrency is None:
        cfg.concurrency = 1 if cfg.model.base_url is None else DEFAULT_CONCURRENCY
    if cfg.concurrency < 1:
        raise InterplayError(f"concurrency: must be at least 1, got {cfg.concurrency}")
    if cfg.workers < 1:
        raise InterplayError(f"workers: must be at least 1, got {cfg.workers}")
    if cfg.workers > 1 and cfg.model.base_url is None:
        raise InterplayError("workers: the embedded model answers one request at a time in "
                             "this process; give --base-url for --workers above 1")
    env = load_env(cfg.env_name, cfg.env_settings())
    unknown = set(cfg.seats) - set(env.seats)
    if unknown:
        raise InterplayError(f"seats.{sorted(unknown)[0]}: env {env.name!r} has no such seat; "
                             f"seats: {', '.join(env.seats)}")
    env.check()
    from interplay.episode import RunResources

    check_seats(env, RunResources(endpoint=cfg.model, seats=cfg.seats))
    plain = cattrs.Converter()
    resolved = plain.unstructure(cfg)
    resolved["env"] = {"name": cfg.env_name, **plain.unstructure(env.config)}
    return cfg, env, resolved


#: Request fields the harness and the model client set; sampling settings cannot override them.
RESERVED_SAMPLING = ("messages", "model", "stream", "tools")


def check_seats(env: Env, resources: Any) -> None:
    """Resolve every seat now (harness names, harness settings, sampling) so a typo fails
    before any model is called."""
    for seat in env.seats:
        spec = resources.seat(env, seat)
        endpoint = spec.model or resources.endpoint
        for where, sampling in ((f"seats.{seat}.sampling", spec.sampling),
                                ("model.sampling", endpoint.sampling if endpoint else {})):
            for key in RESERVED_SAMPLING:
                if key in sampling:
                    raise InterplayError(f"{where}.{key}: the harness sets {key!r} itself; "
                                         "remove it from the sampling settings")
        harness_cls = plugins.get("harnesses", spec.harness)
        config_mod.structure(spec.harness_config, harness_cls.Config,
                             path=f"seats.{seat}.harness_config")


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``)."""
    if isinstance(data, Mapping) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose values differ, ignoring where the run writes and how fast it runs."""
    a, b = flatten(old), flatten(new)
    return sorted(k for k in set(a) | set(b)
                  if k.split(".")[0] not in RESUME_IGNORED and a.get(k) != b.get(k))


# -- results folder ----------------------------------------------------------------------------


class EpisodeLog:
    """``episodes.jsonl``: one JSON line per finished episode.

    Each line is written unbuffered the moment its episode finishes, so it is in the kernel
    at once and a crash, Ctrl-C or SIGKILL of the process loses no finished episode. fsync (for
    an OS crash or power loss) runs in a thread, coalescing lines that finish meanwhile, so
    the event loop never waits for the disk; closing waits for the last one.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None
        self._dirty = False
        self._syncing: asyncio.Task[None] | None = None

    def open(self) -> None:
        self._fh = self.path.open("ab", buffering=0)

    def append_line(self, data: bytes) -> None:
        """Append one episode's JSON line (without its newline)."""
        line = memoryview(data + b"\n")
        while line:
            # A raw file may take fewer bytes than given (a full disk, a signal).
            line = line[self._fh.write(line) or 0:]
        self._dirty = True
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.get_running_loop().create_task(self._sync())

    async def _sync(self) -> None:
        while self._dirty:
            self._dirty = False
            await asyncio.to_thread(os.fsync, self._fh.fileno())

    async def aclose(self) -> None:
        if self._fh is None:
            return
        if self._syncing is not None:
            # Shielded: a Ctrl-C must not close the file under a running fsync.
            await asyncio.shield(asyncio.gather(self._syncing, return_exceptions=True))
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None


def episode_line(episode: Episode) -> bytes:
    """The episode's line in episodes.jsonl (without the newline)."""
    try:
        return to_json_bytes(episode)
    except (TypeError, ValueError):
        # An env put something JSON cannot hold in its results: keep the episode, as text.
        return json.dumps(converter().unstructure(episode), ensure_ascii=False,
                          separators=(",", ":"), default=repr).encode()


def read_episodes(path: Path, *, repair: bool = False,
                  slim: bool = False) -> list[dict[str, Any]]:
    """The episodes in a results file, as dicts (``slim``: only what the summary needs, so a
    large file never sits in memory whole), one per (task, rollout): a later line supersedes
    an earlier one (an episode run again with ``--retry-errors``). Read line by line. A torn
    last line (a write cut by a kill) is skipped, and with ``repair`` cut off the file so
    appends start on a clean line; a broken line before the last is an error."""
    if not path.exists():
        return []
    out: dict[tuple[int, int], dict[str, Any]] = {}
    pos = 0
    bad: tuple[int, int] | None = None  # (line number, offset) of an unparsable line
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if bad is not None:
                if raw.strip():
                    raise InterplayError(f"{path}: line {bad[0]} is not an episode record; "
                                         f"remove it, then resume")
                continue
            if raw.strip():
                try:
                    record = json.loads(raw)
                    if not isinstance(record, dict) or "info" not in record:
                        raise ValueError("not an episode")
                except ValueError:
                    bad = (number, pos)
                    continue
                try:
                    pair = pair_of(record)
                except (KeyError, TypeError, ValueError):
                    # A whole JSON line, so not torn by a kill: something else wrote it.
                    raise InterplayError(f"{path}: line {number} is not an episode record "
                                         "(its info has no task_idx); remove it, then "
                                         "resume") from None
                out[pair] = slim_record(record) if slim else record
                if repair and not raw.endswith(b"\n"):
                    # A complete record without its newline: end the line before appending.
                    with path.open("ab") as tail:
                        tail.write(b"\n")
            pos += len(raw)
    if bad is not None:
        log.warning("runner.torn_line_skipped", output_path=str(path))
        if repair:
            with path.open("r+b") as fh:
                fh.truncate(bad[1])
    return list(out.values())


def pair_of(record: Mapping[str, Any]) -> tuple[int, int]:
    """The (task idx, rollout) an episode record is for."""
    info = record["info"]
    return int(info["task_idx"]), int(info.get("rollout") or 0)


def slim_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`summarize` reads of an episode record."""
    return {"info": record["info"], "reward": record.get("reward"),
            "error_type": record.get("error_type"), "metrics": record.get("metrics") or {},
            "wall_s": record.get("wall_s"),
            "traces": [{"seat": t.get("seat"), "agent": t.get("agent"),
                        "stop_condition": t.get("stop_condition"), "reward": t.get("reward")}
                       for t in record.get("traces") or ()],
            "usage": dict(_usage(record))}


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
            "metrics": dict(episode.metrics), "wall_s": episode.wall_s,
            "traces": [{"seat": t.seat, "agent": t.agent, "stop_condition": t.stop_condition,
                        "reward": t.reward}
                       for t in episode.traces],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": total, "model_calls": calls}}


def default_output(env_name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(env_name).stem)
    return str(Path("results") / f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}")


# -- summary -----------------------------------------------------------------------------------


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


def _usage(record: Mapping[str, Any]) -> Counter[str]:
    total: Counter[str] = Counter()
    calls = [c for t in record.get("traces") or () for c in t.get("model_calls") or ()]
    calls += list(record.get("judge_calls") or ())
    for call in calls:
        usage = call.get("usage") or {}
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            total[key] += int(usage.get(key) or 0)
    total["model_calls"] += len(calls)
    return total


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
        tokens.update(r["usage"] if "usage" in r else _usage(r))
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


# -- progress ----------------------------------------------------------------------------------


class Progress:
    """Episodes done / total, mean reward so far, errors, rate and ETA on stderr.

    On a terminal one line is redrawn in place (at most ten times a second); otherwise a plain
    line is printed every ``interval_s`` and at the end, so logs stay readable.
    """

    def __init__(self, total: int, *, stream: TextIO | None = None, done: int = 0,
                 interval_s: float = 10.0, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.total = total
        self.done = done
        self.new = 0
        self.errors = 0
        self.reward_sum = 0.0
        self.scored = 0
        self.enabled = enabled
        self.tty = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = 0.1 if self.tty else interval_s
        self.t0 = time.monotonic()
        self._last = 0.0

    def count(self, error_type: str | None, reward: float | None) -> None:
        """One more finished episode, with its error type and reward."""
        self.done += 1
        self.new += 1
        if error_type is not None:
            self.errors += 1
        if reward is not None:
            self.reward_sum += reward
            self.scored += 1
        now = time.monotonic()
        if now - self._last >= self.interval_s or self.done >= self.total:
            self._last = now
            self.draw(now)

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.monotonic()) - self.t0
        rate = self.new / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        reward = f"{self.reward_sum / self.scored:.3f}" if self.scored else "-"
        pct = self.done / self.total if self.total else 1.0
        text = (f"{self.done}/{self.total} episodes  reward {reward}  errors {self.errors}  "
                f"{rate:.2f} ep/s  ETA {eta}")
        if self.tty:
            filled = int(pct * 24)
            text = f"[{'#' * filled}{'.' * (24 - filled)}] {text}"
        return text

    def draw(self, now: float | None = None) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line(now))
        else:
            self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.draw()
            self.stream.write("\n")
            self.stream.flush()
        elif self.done < self.total or self.new == 0:
            self.draw()


# -- running -----------------------------------------------------------------------------------


def failed_episode(env_name: str, task: Task, rollout: int, seed: int, exc: BaseException,
                   started_at: float, *, error_type: str | None = None) -> Episode:
    """The record of an episode that could not run: its pair, seed and error."""
    from interplay.episode import new_episode_id

    info = EpisodeInfo(episode_id=new_episode_id(), env=env_name, task_idx=task.idx,
                       rollout=rollout, seed=seed)
    return Episode(info=info, task=task, started_at=started_at,
                   error=f"{type(exc).__name__}: {exc}",
                   error_type=error_type or ("config_error" if isinstance(exc, InterplayError)
                                             else "runner_error"),
                   wall_s=time.time() - started_at)


async def run_one(env: Env, task: Task, rollout: int, *, resources: Any, seed: int) -> Episode:
    """One (task, rollout) pair as an episode; one that raises comes back as an error episode."""
    from interplay.episode import run_episode

    ep_seed = episode_seed(seed, task.idx, rollout)
    started = time.time()
    try:
        return await run_episode(env, task, resources=resources, rollout=rollout, seed=ep_seed)
    except Exception as exc:
        log.warning("runner.episode_raised", env=env.name, task_idx=task.idx,
                    rollout=rollout, error_type=type(exc).__name__)
        return failed_episode(env.name, task, rollout, ep_seed, exc, started)


#: Episodes a run starts per turn of the event loop while it fills its slots.
START_BATCH = 16


async def run_pairs(env: Env, pairs: Sequence[tuple[Task, int]], *, resources: Any,
                    seed: int, concurrency: int, on_episode: Any) -> None:
    """Run every (task, rollout) pair, at most ``concurrency`` episodes at once, calling
    ``on_episode(episode)`` as each finishes. An episode that raises is recorded as an
    error episode; it never stops the others."""
    queue = iter(pairs)

    async def worker() -> None:
        for task, rollout in queue:
            episode = await run_one(env, task, rollout, resources=resources, seed=seed)
            on_episode(episode)
            # Written and summarized: let it go now, not when the next episode ends (a worker
            # would hold a whole finished episode beside every live one).
            del episode

    workers: list[asyncio.Future[None]] = []
    try:
        for i in range(min(concurrency, len(pairs))):
            workers.append(asyncio.ensure_future(worker()))
            if i % START_BATCH == START_BATCH - 1:
                # Started a few at a time, the loop turning in between: at -c 1000 the first
                # requests would otherwise wait for all 1000 episodes to be set up (a fifth
                # of a second) before any went out, and come back as one burst.
                await asyncio.sleep(0)
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


@attrs.define
class RunOutcome:
    output: Path
    summary: dict[str, Any]
    ran: int
    interrupted: bool = False
    report: Path | None = None


async def run(cfg: RunConfig, env: Env, resolved: Mapping[str, Any], output: Path, *,
              show_progress: bool = False,
              announce: Callable[[int, int], None] | None = None,
              resources: Any = None) -> RunOutcome:
    """Run what ``output`` is missing of ``cfg``'s (task, rollout) pairs and write the
    results folder. The caller has written ``config.json`` and checked it. ``announce`` is
    told the number of tasks and of episodes to run once they are known."""
    from interplay.episode import RunResources

    tasks = list(env.tasks())
    if cfg.n is not None:
        tasks = tasks[: cfg.n]
    if not tasks:
        raise InterplayError(f"env {env.name!r} has no tasks")
    episodes_path = output / EPISODES_FILE
    # Slim records only: the summary never needs the transcripts in memory.
    records = {pair_of(r): r for r in read_episodes(episodes_path, repair=True, slim=True)}
    have = {p for p, r in records.items() if not (cfg.retry_errors and r.get("error_type"))}
    wanted = [(t, r) for r in range(cfg.rollouts) for t in tasks]
    pairs = [(t, r) for t, r in wanted if (t.idx, r) not in have]
    total = len(wanted)
    done_before = total - len(pairs)
    progress = Progress(total, done=done_before, enabled=show_progress)
    if announce is not None:
        announce(len(tasks), len(pairs))
    own_resources = resources is None
    if resources is None:
        resources = RunResources(
            endpoint=cfg.model, seats=cfg.seats,
            max_connections=cfg.concurrency * max(1, len(env.seats)))
    log.info("runner.start", env=env.name, episodes=len(pairs), done_before=done_before,
             concurrency=cfg.concurrency, output_path=str(output))
    writer = EpisodeLog(episodes_path)
    writer.open()
    ran = 0

    def on_line(task_idx: int, rollout: int, line: bytes, slim: dict[str, Any]) -> None:
        nonlocal ran
        writer.append_line(line)
        records[(task_idx, rollout)] = slim
        ran += 1
        progress.count(slim.get("error_type"), slim.get("reward"))

    def on_episode(episode: Episode) -> None:
        on_line(episode.info.task_idx, episode.info.rollout, episode_line(episode),
                slim_episode(episode))

    t0 = time.monotonic()
    interrupted = False
    try:
        with collector_tuned_for_runs():
            await _run_all(cfg, env, resolved, pairs, resources, on_episode, on_line)
    except asyncio.CancelledError:
        interrupted = True
        raise
    finally:
        await writer.aclose()
        progress.finish()
        if own_resources:
            await asyncio.shield(resources.aclose())
        wall = time.monotonic() - t0
        summary = summarize(list(records.values()), pass_threshold=cfg.pass_threshold,
                            expected=total,
                            wall_s=wall, episodes_this_session=ran)
        summary["interrupted"] = interrupted
        _write_json(output / SUMMARY_FILE, summary)
    return RunOutcome(output=output, summary=summary, ran=ran, interrupted=interrupted)


@contextlib.contextmanager
def collector_tuned_for_runs() -> Iterator[None]:
    """The cyclic garbage collector set for a run, and set back after it.

    A run holds thousands of live objects per episode, and a finished episode is freed by
    reference counting (episodes break their own cycles). At the default thresholds the
    collector would scan them all again and again: at 1000 episodes at once, 1.5 s of a 10 s
    run, with pauses of up to 0.2 s that every call in flight waits out. Young objects are
    collected every 50,000 allocations instead of 700, and what existed before the run
    (modules, plugins, tasks) is left out of the scans."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


async def _run_all(cfg: RunConfig, env: Env, resolved: Mapping[str, Any],
                   pairs: Sequence[tuple[Task, int]], resources: Any,
                   on_episode: Callable[[Episode], None],
                   on_line: Callable[[int, int, bytes, dict[str, Any]], None]) -> None:
    if cfg.workers > 1:
        from interplay.workers import run_in_workers

        await run_in_workers(resolved, env.name, pairs, workers=cfg.workers,
                             concurrency=cfg.concurrency, seed=cfg.seed, on_line=on_line,
                             on_episode=on_episode)
    else:
        await run_pairs(env, pairs, resources=resources, seed=cfg.seed,
                        concurrency=cfg.concurrency, on_episode=on_episode)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=repr) + "\n")
    os.replace(tmp, path)


# -- the command -------------------------------------------------------------------------------


def add_eval(sub: Any) -> None:
    p = sub.add_parser(
        "eval", help="run an env's tasks and write a results folder with a report",
        description="Run N tasks x R rollouts of ENV, C episodes at once. Every finished episode "
        "is appended to OUTPUT/episodes.jsonl at once; --resume OUTPUT runs what is missing.")
    p.add_argument("env", nargs="?", help="env name (`interplay list envs`) or a TOML env file")
    p.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="TOML file with any of the run's settings (repeatable; later wins)")
    p.add_argument("-n", type=int, dest="n", help="tasks to run (default: all)")
    p.add_argument("-r", "--rollouts", type=int, help="rollouts per task (default 1)")
    p.add_argument("-c", "--concurrency", type=int,
                   help="episodes at once (default 8; 1 on the embedded model)")
    p.add_argument("-w", "--workers", type=int, help="processes that run the episodes, "
                   "sharing the -c (default 1); for runs past a few thousand model calls a "
                   "second")
    p.add_argument("-s", "--seed", type=int, help="the run's seed (default 0)")
    p.add_argument("-m", "--model", help="model name sent to the endpoint")
    p.add_argument("--base-url", help="OpenAI-compatible base URL (default: the embedded "
                   "local model)")
    p.add_argument("--api-key-var", help="environment variable holding the API key")
    p.add_argument("--pass-threshold", type=float,
                   help="reward at which an episode passes, for pass@k (default 1.0)")
    p.add_argument("-o", "--output", help="results folder (default results/ENV-TIMESTAMP)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR: run only the "
                   "missing episodes (refused if the config changed)")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="set any config field, e.g. --set env.relay.max_turns=4 or "
                   "--set seats.assistant.harness=null (repeatable)")
    p.add_argument("--retry-errors", action="store_true", help="with --resume: also run "
                   "again the episodes that ended in an error")
    p.add_argument("--no-report", action="store_true", help="do not write report.html")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_eval)


def _cli_data(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for f in args.config:
        data = config_mod.merge(data, config_mod.read_toml(f))
    flags: dict[str, Any] = {}
    if args.env:
        flags["env"] = {"name": args.env}
    for key in ("n", "rollouts", "concurrency", "workers", "seed", "pass_threshold", "output"):
        value = getattr(args, key)
        if value is not None:
            flags[key] = value
    if args.retry_errors:
        if not args.resume:
            raise InterplayError("--retry-errors goes with --resume DIR")
        flags["retry_errors"] = True
    model = {k: v for k, v in (("model", args.model), ("base_url", args.base_url),
                               ("api_key_var", args.api_key_var)) if v is not None}
    if model:
        flags["model"] = model
    data = config_mod.merge(data, flags)
    return config_mod.apply_overrides(data, args.overrides)


def prepare(args: argparse.Namespace) -> tuple[RunConfig, Env, dict[str, Any], Path]:
    """Resolve the config, load the env, and make (or check, when resuming) the results
    folder with its config.json."""
    data = _cli_data(args)
    if args.resume:
        output = Path(args.resume)
        stored_path = output / CONFIG_FILE
        if not stored_path.is_file():
            raise InterplayError(f"--resume {args.resume}: no {CONFIG_FILE} there; "
                                 f"point it at a results folder of `interplay eval`")
        try:
            stored = json.loads(stored_path.read_text())["config"]
        except (ValueError, KeyError, TypeError):
            raise InterplayError(f"{stored_path}: not a results config; "
                                 f"start a new run with -o") from None
        given = (data.get("env") or {}).get("name")
        if given is not None and given != (stored.get("env") or {}).get("name"):
            # Another env's settings would not even structure: name the real difference.
            raise InterplayError(f"--resume {args.resume}: the config changed (env.name); "
                                 f"resume with the same settings or start a new run with -o")
        merged = config_mod.merge(stored, data)
        merged["output"] = str(output)
        cfg, env, resolved = resolve(merged)
        changed = config_differences(stored, resolved)
        if changed:
            raise InterplayError(
                f"--resume {args.resume}: the config changed ({', '.join(changed[:8])}"
                f"{', ...' if len(changed) > 8 else ''}); resume with the same settings "
                f"or start a new run with -o")
        return cfg, env, resolved, output
    if "output" not in data:
        name = str((data.get("env") or {}).get("name") or "")
        data["output"] = default_output(name)
    cfg, env, resolved = resolve(data)
    output = Path(str(cfg.output))
    if (output / EPISODES_FILE).exists() or (output / CONFIG_FILE).exists():
        raise InterplayError(f"{output} already holds a run; continue it with --resume {output} "
                             f"or choose another -o")
    output.mkdir(parents=True, exist_ok=True)
    _write_json(output / CONFIG_FILE, {"config": resolved, "interplay": _version()})
    return cfg, env, resolved, output


def _version() -> str:
    from interplay import __version__

    return __version__


async def _run_cli(cfg: RunConfig, env: Env, resolved: Mapping[str, Any], output: Path,
                   **options: Any) -> RunOutcome:
    # A kill (SIGTERM) stops the run like Ctrl-C: running episodes are cancelled, finished
    # ones are already on disk, and the summary is written.
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    installed = False
    if main is not None and sys.platform != "win32":
        try:
            loop.add_signal_handler(signal.SIGTERM, main.cancel)
            installed = True
        except (NotImplementedError, RuntimeError):
            pass
    try:
        return await run(cfg, env, resolved, output, **options)
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGTERM)


def cmd_eval(args: argparse.Namespace) -> int:
    cfg, env, resolved, output = prepare(args)
    where = "the embedded local model" if cfg.model.base_url is None else cfg.model.base_url

    def announce(n_tasks: int, to_run: int) -> None:
        print(f"interplay eval {env.name}: {to_run} episodes to run "
              f"({n_tasks} tasks x {cfg.rollouts} rollouts, -c {cfg.concurrency}"
              f"{f', {cfg.workers} workers' if cfg.workers > 1 else ''}) on {where}; "
              f"results in {output}", file=sys.stderr)

    try:
        outcome = aio.run(_run_cli(cfg, env, resolved, output, show_progress=not args.quiet,
                                   announce=announce))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(f"interplay: interrupted; finished episodes are in {output / EPISODES_FILE}; "
              f"continue with: interplay eval --resume {output}", file=sys.stderr)
        return 130
    print(format_summary(outcome.summary, title=f"{env.name}: {output}"))
    if not args.no_report:
        from interplay.report import write_report

        path = write_report(output)
        print(f"report: {path}")
    return 0 if outcome.summary.get("complete") else 1


def main(argv: Iterable[str] | None = None) -> int:
    from interplay.cli import main as cli_main

    return cli_main(["eval", *(argv or [])])
