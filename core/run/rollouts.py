"""Rollouts for a trainer: groups of k finished episodes per task, handed over as each group
completes, run as ``interplay eval`` runs them in one process
(:func:`interplay.run.local.run_pairs`: the same concurrency bound, per-seat retries, error
episodes, seeds and records).

A training loop keeps one :class:`Rollouts` (its model clients and interception server live
across steps) and asks it for each step's groups::

    async with Rollouts("alphabet-sort", model=Endpoint(base_url=URL, capture_tokens=True),
                        concurrency=64) as runner:
        async for group in runner.groups(batch, k=8):
            ...  # group.task, group.episodes (k, by rollout), each with its rewards and tokens

It runs the episodes in this process only, on the in-process executor
(:mod:`interplay.run.local`): a trainer takes the Episode objects themselves between steps, and
an Env given as an object cannot be built again in another process. ``-w`` and Ray are
``interplay eval``'s. It does not train, and writes nothing unless given an ``output`` folder,
where each call of ``groups`` appends its episodes' lines to ``step-NNNNN/episodes.jsonl`` (a
folder per call: a step's rollouts have the (task, rollout) pairs of the last step's) as
``interplay eval`` does, for ``interplay export`` and ``interplay report`` to read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from interplay.config.endpoint import Endpoint
from interplay.contracts.env import Env
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.run.config import DEFAULT_CONCURRENCY, check_harnesses, check_seats
from interplay.run.episode import RunResources
from interplay.run.loader import load_env
from interplay.run.local import run_pairs
from interplay.run.results import EPISODES_FILE, EpisodeLog
from interplay.values.records import Episode, Task

log = get_logger("interplay.run.rollouts")


@attrs.define
class RolloutGroup:
    """k finished episodes of one task, by rollout. Episodes that ended in an error are
    among them, with no reward (``reward`` None): a trainer leaves them out."""

    task: Task
    episodes: list[Episode]

    @property
    def rewards(self) -> list[float | None]:
        return [e.reward for e in self.episodes]


class Rollouts:
    """Runs groups of rollouts for a trainer (see the module docstring).

    ``env`` is an Env or a registered name (or env file) with ``env_settings``; ``model`` the
    endpoint every seat uses unless its own says otherwise (default: the embedded model);
    ``seats`` overrides seat settings as ``--set seats.<seat>...`` does. ``concurrency``
    bounds the episodes running at once across all groups (default 8, 1 on the embedded
    model). Each call of :meth:`groups` draws new episode seeds from ``seed``.
    """

    def __init__(self, env: Env | str, *, model: Endpoint | None = None,
                 env_settings: Mapping[str, Any] | None = None,
                 seats: Mapping[str, Mapping[str, Any]] | None = None,
                 concurrency: int | None = None, seed: int = 0,
                 output: str | Path | None = None) -> None:
        self.env = env if isinstance(env, Env) else load_env(env, env_settings or {})
        if isinstance(env, Env) and env_settings:
            raise InterplayError("env_settings go with an env's name; an Env object is "
                                 "configured already")
        self.model = model or Endpoint()
        if concurrency is None:
            concurrency = 1 if self.model.is_local else DEFAULT_CONCURRENCY
        if concurrency < 1:
            raise InterplayError(f"concurrency: must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self.seed = seed
        unknown = set(seats or {}) - set(self.env.seats)
        if unknown:
            raise InterplayError(f"seats.{sorted(unknown)[0]}: env {self.env.name!r} has no "
                                 f"such seat; seats: {', '.join(self.env.seats)}")
        self.env.check()
        self.resources = RunResources(
            endpoint=self.model, seats=seats,
            max_connections=concurrency * max(1, len(self.env.seats)))
        check_seats(self.env, self.resources)
        check_harnesses(self.env, self.resources)
        self._output = Path(output) if output is not None else None
        self._calls = 0

    async def __aenter__(self) -> Rollouts:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop what the runs started (model clients, the embedded model, the interception
        server)."""
        await self.resources.aclose()

    async def groups(self, tasks: Iterable[Task] | None = None, k: int = 1, *,
                     n: int | None = None, seed: int | None = None,
                     ) -> AsyncIterator[RolloutGroup]:
        """Run ``k`` rollouts of each task (default: the env's tasks, the first ``n``) and
        yield each task's group once its k episodes have finished, in the order groups
        complete. ``seed`` (default: the next of this runner's) gives the episodes their
        seeds as ``interplay eval --seed`` does. Leaving the loop early cancels the episodes
        still running."""
        if k < 1:
            raise InterplayError(f"k: must be at least 1, got {k}")
        batch = list(self.env.tasks() if tasks is None else tasks)
        if n is not None:
            batch = batch[:n]
        by_idx: dict[int, Task] = {}
        for task in batch:
            if task.idx in by_idx:
                raise InterplayError(f"tasks: idx {task.idx} appears twice; give each task "
                                     f"of a batch its own idx")
            by_idx[task.idx] = task
        if seed is None:
            seed = self.seed + self._calls
        writer = self._open_log(self._calls)
        self._calls += 1
        ready: asyncio.Queue[RolloutGroup | BaseException | None] = asyncio.Queue()
        pending: dict[int, list[Episode]] = {idx: [] for idx in by_idx}

        def on_episode(episode: Episode) -> None:
            if writer is not None:
                writer.append_episode(episode)
            done = pending[episode.info.task_idx]
            done.append(episode)
            if len(done) == k:
                episodes = sorted(pending.pop(episode.info.task_idx),
                                  key=lambda e: e.info.rollout)
                ready.put_nowait(RolloutGroup(by_idx[episode.info.task_idx], episodes))

        async def run() -> None:
            try:
                pairs = [(task, r) for task in batch for r in range(k)]
                await run_pairs(self.env, pairs, resources=self.resources, seed=seed,
                                concurrency=self.concurrency, on_episode=on_episode)
            except BaseException as exc:
                ready.put_nowait(exc)
                raise
            ready.put_nowait(None)

        log.info("rollouts.start", env=self.env.name, tasks=len(batch), k=k,
                 concurrency=self.concurrency)
        runner = asyncio.ensure_future(run())
        try:
            while True:
                item = await ready.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not runner.done():
                runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
            if writer is not None:
                await writer.aclose()

    def _open_log(self, call: int) -> EpisodeLog | None:
        if self._output is None:
            return None
        folder = self._output / f"step-{call:05d}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InterplayError(f"output {self._output}: cannot make {folder.name} in it "
                                 f"({exc.strerror or type(exc).__name__})") from None
        writer = EpisodeLog(folder / EPISODES_FILE)
        writer.open()
        return writer
