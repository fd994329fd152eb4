"""The run: N tasks x R rollouts, C episodes at once, each finished episode appended to
the results folder as it ends and the summary written at the end, however the run ends.

It decides which (task, rollout) pairs the folder still lacks and hands them to the executor
the config chooses (:mod:`interplay.run.executor`: this process, ``-w`` workers or Ray), which
reports each finished episode back to it. It does not run steps or score episodes
(:mod:`interplay.run.episode`), and leaves config to :mod:`interplay.run.config`, the folder to
:mod:`interplay.run.results` and the figures to :mod:`interplay.run.summary`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from interplay.contracts.env import Env
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.run.config import RunConfig
from interplay.run.executor import Finished, Work, executor_for
from interplay.run.progress import Progress
from interplay.run.results import (
    EPISODES_FILE,
    SUMMARY_FILE,
    EpisodeLog,
    episode_parts,
    judged_in,
    mark_running,
    pair_of,
    read_episodes,
    slim_episode,
    unmark_running,
    write_json,
)
from interplay.run.summary import summarize
from interplay.values.records import Episode, Task

log = get_logger("interplay.run")


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
              resources: Any = None, tasks: list[Task] | None = None) -> RunOutcome:
    """Run what ``output`` is missing of ``cfg``'s (task, rollout) pairs and write the
    results folder. The caller has written ``config.json`` and checked it. ``announce`` is
    told the number of tasks and of episodes to run once they are known. ``tasks``: the
    env's tasks, when the caller has read them already (None: read here)."""
    from interplay.run.episode import RunResources

    chosen = executor_for(cfg)
    tasks = list(env.tasks()) if tasks is None else tasks
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
            sandbox=cfg.sandbox, max_connections=cfg.concurrency * max(1, len(env.seats)))
    log.info("runner.start", env=env.name, episodes=len(pairs), done_before=len(have),
             concurrency=cfg.concurrency, output_path=str(output))
    recorder = _Recorder(EpisodeLog(episodes_path), records, progress)
    work = Work(env=env, pairs=pairs, seed=cfg.seed, concurrency=int(cfg.concurrency),
                resolved=resolved, resources=resources)
    t0 = time.monotonic()
    failure: BaseException | None = None
    mark_running(output, expected=total)
    try:
        recorder.writer.open()
        progress.start()
        if pairs:
            await chosen.run(work, recorder)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        # No episode is appended past here; the summary follows.
        unmark_running(output)
        progress.finish()
        try:
            await recorder.writer.aclose()
        except OSError as exc:
            log.warning("runner.episodes_not_synced", exception_type=type(exc).__name__)
        if own_resources:
            await asyncio.shield(resources.aclose())
        summary = summarize(list(records.values()), pass_threshold=cfg.pass_threshold,
                            expected=total, session_wall_s=time.monotonic() - t0,
                            session_episodes=recorder.ran,
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
    return RunOutcome(output=output, summary=summary, ran=recorder.ran,
                      interrupted=bool(summary["interrupted"]))


class _Recorder:
    """The run's :class:`~interplay.run.executor.Sink`: each finished episode appended to
    episodes.jsonl (its side file first), kept slim for the summary, and counted."""

    def __init__(self, writer: EpisodeLog, records: dict[tuple[int, int], dict[str, Any]],
                 progress: Progress) -> None:
        self.writer = writer
        self.records = records
        self.progress = progress
        self.ran = 0

    def episode(self, episode: Episode) -> None:
        line, side = episode_parts(episode)
        self._add(episode.info.task_idx, episode.info.rollout, line, slim_episode(episode), side)

    def line(self, finished: Finished) -> None:
        self._add(finished.task_idx, finished.rollout, finished.line, finished.slim,
                  finished.side)

    def _add(self, task_idx: int, rollout: int, line: bytes, slim: dict[str, Any],
             side: bytes | None) -> None:
        self.writer.append(line, side, episode_id=str(slim["info"]["episode_id"]))
        self.records[(task_idx, rollout)] = slim
        self.ran += 1
        self.progress.count(slim)
