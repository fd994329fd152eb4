"""Where a run's episodes run: the one interface every executor implements, the registry the
runner picks one from, and the few things every executor does the same way.

The runner (:mod:`interplay.run.runner`) decides *what* to run, the (task, rollout) pairs its
results folder lacks, and writes what comes back; an executor decides *where*: this process
(:mod:`interplay.run.local`), worker processes on this machine (:mod:`interplay.run.workers`,
``-w``), actors on a Ray cluster (:mod:`interplay.run.ray_executor`). An executor never
imports the runner and never writes the results folder; it is imported only when a run
chooses it (Ray only with ``executor = "ray"``).

An executor is built from the run's config by the factory :data:`EXECUTORS` names (a class or
a function: ``factory(cfg) -> Executor``), which refuses settings it cannot work with in one
:class:`~interplay.errors.InterplayError` and starts nothing. Its :meth:`Executor.run` is
given the :class:`Work` and a :class:`Sink`, and must:

- report every pair it was given exactly once before it returns: to ``sink.episode`` when the
  episode finished in this process, to ``sink.line`` (a :class:`Finished`) when it finished in
  another, as it finishes: a finished episode is never held back, so none is lost when the
  run stops;
- record a pair whose process died while running it as a ``worker_error`` episode
  (:func:`lost_episode`), give the pairs that process had not started to the others, and
  raise an InterplayError when none is left to run them (the run then ends, resumable);
- run each pair with :func:`run_one` wherever it runs, so an episode's seed comes from (seed,
  task, rollout) alone and the same pair gives the same episode on every executor;
- when cancelled (Ctrl-C or SIGTERM cancel the runner's task), stop what it started (episodes,
  whose harnesses then end their programs, processes, actors) before it returns;
- give every wait on something outside this machine (a cluster that does not answer) a
  deadline, with the event loop free meanwhile to answer a cancellation;
- in each process it starts to run episodes, call :func:`prepare_process` first.

A new executor (a Slurm array, say) is one module with a factory and its ``run``, and its line
in :data:`EXECUTORS`; settings of its own go in :class:`~interplay.run.config.RunConfig`
prefixed with its name (``ray_address``): a run on another executor refuses them.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from interplay._plumbing import fds as _fds
from interplay.errors import ErrorType, InterplayError, error_of
from interplay.log import get_logger
from interplay.run.config import RunConfig, episode_seed
from interplay.values.records import Episode, EpisodeInfo, Task

if TYPE_CHECKING:
    from interplay.contracts.env import Env

log = get_logger("interplay.run")

#: The executors by the name a run's ``executor`` setting gives: ``"module:factory"``, the
#: factory building the executor from the run's config. Imported only when chosen.
EXECUTORS: dict[str, str] = {
    "local": "interplay.run.local:executor",  # this process, or -w worker processes
    "ray": "interplay.run.ray_executor:RayExecutor",
}


@attrs.frozen
class Work:
    """What an executor runs: pairs of one env, and what it needs to run them here or to build
    them again in another process."""

    #: The env, loaded in this process.
    env: Env
    #: The (task, rollout) pairs to run.
    pairs: Sequence[tuple[Task, int]]
    #: The run's seed, from which each episode's is derived (:func:`run_one`).
    seed: int
    #: Episodes at once, in all (an executor of several processes shares it out:
    #: :func:`shares`).
    concurrency: int
    #: The run's config as plain data (:func:`interplay.run.config.resolve`'s third value):
    #: what another process loads the env and resolves the seats from, with ``resolve``.
    resolved: Mapping[str, Any]
    #: This process's model clients and interception server
    #: (:class:`~interplay.run.episode.RunResources`): what episodes run here share.
    resources: Any


@attrs.frozen
class Finished:
    """An episode that finished in another process, as that process made its record."""

    task_idx: int
    rollout: int
    #: Its line in episodes.jsonl, without the newline
    #: (:func:`interplay.run.results.episode_parts`).
    line: bytes
    #: What the summary and the progress display need of it
    #: (:func:`interplay.run.results.slim_episode`).
    slim: dict[str, Any]
    #: Its side file's content; None when its line is whole.
    side: bytes | None = None


class Sink(Protocol):
    """Where an executor reports each finished episode, the moment it finishes. The runner's
    appends it to the results folder and counts it; a call returns once the line is written."""

    def episode(self, episode: Episode) -> None:
        """An episode that finished in this process, or the error episode made here for a pair
        whose process died (:func:`lost_episode`)."""

    def line(self, finished: Finished) -> None:
        """An episode that finished in another process, as its line."""


class Executor(Protocol):
    """Runs the pairs of a :class:`Work` somewhere, reporting each finished episode to the
    :class:`Sink` (what it must guarantee: the module's docstring)."""

    async def run(self, work: Work, sink: Sink) -> None: ...


def executor_for(cfg: RunConfig) -> Executor:
    """The executor ``cfg`` chooses, built from it; a setting that cannot work, or one that
    belongs to another executor, raises the one-line error that says what to change."""
    name = cfg.executor
    if name not in EXECUTORS:
        raise InterplayError(f"executor: no executor named {name!r}; executors: "
                             f"{', '.join(EXECUTORS)}")
    _refuse_others_settings(cfg)
    module, _, factory = EXECUTORS[name].partition(":")
    made: Callable[[RunConfig], Executor] = getattr(importlib.import_module(module), factory)
    return made(cfg)


def _refuse_others_settings(cfg: RunConfig) -> None:
    """A setting named for another executor (``ray_address`` on a local run) does nothing
    there: refused rather than ignored."""
    defaults = RunConfig()
    for field in attrs.fields(RunConfig):
        owner, named, _ = field.name.partition("_")
        if not named or owner == cfg.executor or owner not in EXECUTORS:
            continue
        if getattr(cfg, field.name) != getattr(defaults, field.name):
            raise InterplayError(f"{field.name}: goes with executor = \"{owner}\" "
                                 f"(--executor {owner})")


def shares(concurrency: int, parts: int) -> list[int]:
    """``concurrency`` split over ``parts`` processes as evenly as it goes (each at least 1;
    fewer parts than asked when there is not one episode for each)."""
    n = max(1, min(parts, concurrency))
    return [concurrency // n + (1 if i < concurrency % n else 0) for i in range(n)]


async def run_one(env: Env, task: Task, rollout: int, *, resources: Any, seed: int) -> Episode:
    """One (task, rollout) pair as an episode, its seed derived from (``seed``, task, rollout);
    one that raises comes back as an error episode."""
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


def failed_episode(env_name: str, task: Task, rollout: int, seed: int, exc: BaseException,
                   started_at: float, *, error_type: ErrorType | None = None) -> Episode:
    """The record of an episode that could not run: its pair, seed and error (a bug of the
    runner's is a ``runner_error``; ``error_type`` says otherwise)."""
    from interplay.run.episode import new_episode_id

    info = EpisodeInfo(episode_id=new_episode_id(), env=env_name, task_idx=task.idx,
                       rollout=rollout, seed=seed)
    kind, error = error_of(exc, ErrorType.RUNNER_ERROR, located=False)
    return Episode(info=info, task=task, started_at=started_at, error=error,
                   error_type=error_type or kind, wall_s=time.time() - started_at)


def lost_episode(work: Work, task: Task, rollout: int, started_at: float,
                 reason: str) -> Episode:
    """The ``worker_error`` episode of a pair whose process died while running it; ``reason``
    says which process and how (``the worker process running it exited (code -9)``)."""
    return failed_episode(work.env.name, task, rollout,
                          episode_seed(work.seed, task.idx, rollout), RuntimeError(reason),
                          started_at, error_type=ErrorType.WORKER_ERROR)


def prepare_process() -> None:
    """What a process started to run episodes does first, as the ``interplay`` command does
    for its own: the soft descriptor limit raised to the hard one (each connection, upstream
    call and program's pipe takes one)."""
    _fds.raise_limit()


@contextlib.contextmanager
def collector_tuned_for_runs() -> Iterator[None]:
    """The cyclic garbage collector set for running episodes, and set back after.

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
