"""The run: N tasks x R rollouts, C episodes at once, each finished episode appended to
the results folder as it ends and the summary written at the end, however the run ends.

``-c`` bounds episodes, never chat sessions: an episode that holds several sessions at once runs
them all inside its one slot. It does not run steps or score episodes
(:mod:`interplay.run.episode`), and leaves config to :mod:`interplay.run.config`, the folder to
:mod:`interplay.run.results` and the figures to :mod:`interplay.run.summary`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from interplay.env import Env
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.records import Episode, EpisodeInfo, Task
from interplay.run.config import RunConfig, episode_seed
from interplay.run.progress import Progress
from interplay.run.results import (
    EPISODES_FILE,
    SUMMARY_FILE,
    EpisodeLog,
    episode_parts,
    judged_in,
    pair_of,
    read_episodes,
    slim_episode,
    write_json,
)
from interplay.run.summary import summarize

log = get_logger("interplay.run")


def failed_episode(env_name: str, task: Task, rollout: int, seed: int, exc: BaseException,
                   started_at: float, *, error_type: str | None = None) -> Episode:
    """The record of an episode that could not run: its pair, seed and error."""
    from interplay.run.episode import new_episode_id

    info = EpisodeInfo(episode_id=new_episode_id(), env=env_name, task_idx=task.idx,
                       rollout=rollout, seed=seed)
    return Episode(info=info, task=task, started_at=started_at,
                   error=f"{type(exc).__name__}: {exc}",
                   error_type=error_type or ("config_error" if isinstance(exc, InterplayError)
                                             else "runner_error"),
                   wall_s=time.time() - started_at)


async def run_one(env: Env, task: Task, rollout: int, *, resources: Any, seed: int) -> Episode:
    """One (task, rollout) pair as an episode; one that raises comes back as an error episode."""
    from interplay.run.episode import run_episode

    ep_seed = episode_seed(seed, task.idx, rollout)
    started = time.time()
    try:
        return await run_episode(env, task, resources=resources, rollout=rollout, seed=ep_seed)
    except Exception as exc:
        episode = failed_episode(env.name, task, rollout, ep_seed, exc, started)
        log.warning("runner.episode_raised", env=env.name, task_idx=task.idx,
                    rollout=rollout, error_type=episode.error_type,
                    exception_type=type(exc).__name__)
        return episode


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
                # requests would otherwise wait for all 1000 episodes to be set up before any
                # went out, and come back as one burst.
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
    from interplay.run.episode import RunResources

    tasks = list(env.tasks())
    if cfg.n is not None:
        tasks = tasks[: cfg.n]
    if not tasks:
        raise InterplayError(f"env {env.name!r} has no tasks")
    episodes_path = output / EPISODES_FILE
    wanted = [(t, r) for r in range(cfg.rollouts) for t in tasks]
    wanted_pairs = {(t.idx, r) for t, r in wanted}
    # Slim records only: the summary never needs the transcripts in memory. A record of a pair
    # this run does not have (a taskset that shrank since) is kept in the file, not counted.
    records = {pair: r for r in read_episodes(episodes_path, repair=True, slim=True)
               if (pair := pair_of(r)) in wanted_pairs}
    have = {p for p, r in records.items() if not (cfg.retry_errors and r.get("error_type"))}
    pairs = [(t, r) for t, r in wanted if (t.idx, r) not in have]
    total = len(wanted)
    progress = Progress(total, enabled=show_progress)
    progress.add_done(records[p] for p in have)
    if announce is not None:
        announce(len(tasks), len(pairs))
    own_resources = resources is None
    if resources is None:
        resources = RunResources(
            endpoint=cfg.model, seats=cfg.seats, interception=cfg.interception,
            max_connections=cfg.concurrency * max(1, len(env.seats)))
    log.info("runner.start", env=env.name, episodes=len(pairs), done_before=len(have),
             concurrency=cfg.concurrency, output_path=str(output))
    writer = EpisodeLog(episodes_path)
    ran = 0

    def on_line(task_idx: int, rollout: int, line: bytes, slim: dict[str, Any],
                side: bytes | None = None) -> None:
        nonlocal ran
        writer.append(line, side, episode_id=str(slim["info"]["episode_id"]))
        records[(task_idx, rollout)] = slim
        ran += 1
        progress.count(slim)

    def on_episode(episode: Episode) -> None:
        line, side = episode_parts(episode)
        on_line(episode.info.task_idx, episode.info.rollout, line, slim_episode(episode), side)

    t0 = time.monotonic()
    failure: BaseException | None = None
    try:
        writer.open()
        progress.start()
        await _run_all(cfg, env, resolved, pairs, resources, on_episode, on_line)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        progress.finish()
        try:
            await writer.aclose()
        except OSError as exc:
            log.warning("runner.episodes_not_synced", exception_type=type(exc).__name__)
        if own_resources:
            await asyncio.shield(resources.aclose())
        summary = summarize(list(records.values()), pass_threshold=cfg.pass_threshold,
                            expected=total, session_wall_s=time.monotonic() - t0,
                            session_episodes=ran,
                            judged=judged_in(output))
        summary["interrupted"] = isinstance(failure, asyncio.CancelledError | KeyboardInterrupt)
        try:
            write_json(output / SUMMARY_FILE, summary)
        except OSError as exc:
            # The episodes are the record; a summary is made from them again by a resume or
            # `interplay report`.
            if failure is None:
                raise InterplayError(f"{output / SUMMARY_FILE}: cannot write it "
                                     f"({exc.strerror or exc}); the episodes are kept") from None
            log.warning("runner.summary_not_written", exception_type=type(exc).__name__)
    return RunOutcome(output=output, summary=summary, ran=ran,
                      interrupted=bool(summary["interrupted"]))


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
    if cfg.executor == "ray":
        from interplay.run.ray_executor import run_on_ray

        await run_on_ray(cfg, env, resolved, pairs, on_line=on_line, on_episode=on_episode)
    elif cfg.workers > 1:
        from interplay.run.workers import run_in_workers

        await run_in_workers(resolved, env.name, pairs, workers=cfg.workers,
                             concurrency=cfg.concurrency, seed=cfg.seed, on_line=on_line,
                             on_episode=on_episode)
    else:
        await run_pairs(env, pairs, resources=resources, seed=cfg.seed,
                        concurrency=cfg.concurrency, on_episode=on_episode)


