"""``executor = "local"``: the episodes run on this machine, in this process (:class:`InProcess`,
``-w 1``) or in ``-w`` worker processes (:class:`interplay.run.workers.Workers`).

In this process, ``-c`` bounds episodes, never chat sessions: an episode that holds several
sessions at once runs them all inside its one slot. :func:`run_pairs` is also what a trainer's
:class:`~interplay.run.rollouts.Rollouts` runs its groups with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from interplay.errors import InterplayError
from interplay.run.config import RunConfig
from interplay.run.executor import Executor, Sink, Work, run_one
from interplay.values.records import Episode, Task

if TYPE_CHECKING:
    from interplay.contracts.env import Env

#: Episodes a run starts per turn of the event loop while it fills its slots.
START_BATCH = 16


def executor(cfg: RunConfig) -> Executor:
    """This process for ``-w 1``, else ``cfg.workers`` worker processes."""
    if cfg.workers > 1:
        if cfg.model.base_url is None:
            raise InterplayError("workers: the embedded model answers one request at a time "
                                 "in this process; give --base-url for --workers above 1")
        from interplay.run.workers import Workers

        return Workers(cfg.workers)
    return InProcess()


class InProcess:
    """Runs the episodes on this process's event loop, with its model clients."""

    async def run(self, work: Work, sink: Sink) -> None:
        await run_pairs(work.env, work.pairs, resources=work.resources, seed=work.seed,
                        concurrency=work.concurrency, on_episode=sink.episode)


async def run_pairs(env: Env, pairs: Sequence[tuple[Task, int]], *, resources: Any,
                    seed: int, concurrency: int,
                    on_episode: Callable[[Episode], None]) -> None:
    """Run every (task, rollout) pair, at most ``concurrency`` episodes at once, calling
    ``on_episode(episode)`` as each finishes. An episode that raises is recorded as an
    error episode; it never stops the others. Cancelled, it cancels the running episodes
    (their harnesses stop what they started) and waits for them."""
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
                # requests would otherwise wait for all 1000 episodes to be set up before any
                # went out, and come back as one burst.
                await asyncio.sleep(0)
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
