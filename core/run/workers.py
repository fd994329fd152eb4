"""Episodes spread over worker processes on one machine: ``interplay eval --workers N``, the
``local`` executor's shape for ``-w`` above 1 (:mod:`interplay.run.executor`).

One Python process runs a few thousand model calls a second before the interpreter is the
bottleneck. With ``--workers N`` the parent starts N processes (``python -m
interplay.run.workers``), hands each (task, rollout) pairs as it has room for them (its share of
``-c``, so a slow worker is given less), and stays the only writer of the results folder: each
worker sends back every finished episode as its JSON line, which the parent appends to
``episodes.jsonl`` as it would its own. Seeds come from (seed, task, rollout), so the episodes
do not depend on which worker ran them.

A worker that dies (a crash, an out-of-memory kill) costs only the episodes it was running:
they are recorded as ``worker_error`` episodes, and the pairs it had not started go to the
others. Ctrl-C and SIGTERM reach the parent, which stops the workers with SIGTERM (their own
harnesses clean up, as in one process) and writes the summary. A parent that is killed takes
its workers along: each asks the kernel for SIGTERM when the thread that forked it (the run's
event loop's, which outlives every worker) ends, and the parent's reaper
(:mod:`interplay.processes`) ends what is left, while each worker's own reaper ends what that
worker started.

The protocol, over the worker's stdin and a private copy of its stdout (plugins that print go
to stderr instead): the parent sends one JSON line of set-up (the resolved config, the log
settings, the run's seed, the worker's concurrency), then one ``[task_idx, rollout]`` line per
pair, then EOF when there are no more. The worker answers each finished episode with a JSON
header line (``task_idx``, ``rollout``, the slim record the summary needs) followed by the
episode's line; a worker that cannot start sends ``{"error": ...}`` and exits.

Past one machine, episodes belong on a distributed engine (Ray), not on this.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from interplay import log as log_mod
from interplay import processes
from interplay._plumbing import aio
from interplay.errors import InterplayError
from interplay.plugins import host as plugins
from interplay.run import config, results
from interplay.run.executor import (
    Finished,
    Sink,
    Work,
    collector_tuned_for_runs,
    lost_episode,
    prepare_process,
    run_one,
    shares,
)
from interplay.values.records import Task

log = log_mod.get_logger("interplay.run.workers")

#: A finished episode's JSON line can be large (long transcripts); this bounds one message.
_LINE_LIMIT = 1 << 30
_STOP_GRACE_S = 10.0
_PARENT_VAR = "INTERPLAY_WORKER_PARENT"


class _Worker:
    def __init__(self, index: int, proc: asyncio.subprocess.Process, capacity: int) -> None:
        self.index = index
        self.proc = proc
        self.capacity = capacity
        #: (task_idx, rollout) -> (task, rollout, started_at), for pairs sent and not answered.
        self.outstanding: dict[tuple[int, int], tuple[Task, int, float]] = {}
        self.closed = False

    def send(self, data: Any) -> bool:
        """Write one line to the worker; False when it can no longer take one (it died, and
        its stdin is gone), after which the worker is closed and never written to again."""
        stdin = self.proc.stdin
        if self.closed or stdin is None or stdin.is_closing():
            self.closed = True
            return False
        try:
            stdin.write(json.dumps(data, separators=(",", ":")).encode() + b"\n")
        except (OSError, RuntimeError):  # uvloop raises RuntimeError on a closed pipe
            self.closed = True
            return False
        if stdin.is_closing():
            # asyncio's own loop swallows EPIPE and closes the pipe instead of raising.
            self.closed = True
            return False
        return True

    def close_input(self) -> None:
        if not self.closed and self.proc.stdin is not None:
            self.closed = True
            with contextlib.suppress(OSError, RuntimeError):
                self.proc.stdin.close()


class Workers:
    """Runs the episodes in ``count`` worker processes of this machine, each with its share of
    the run's concurrency."""

    def __init__(self, count: int) -> None:
        self.count = count

    async def run(self, work: Work, sink: Sink) -> None:
        """Start the workers, hand out ``work``'s pairs as they have room, report each
        finished episode as its line, and stop them however the run ends; the pairs a dead
        worker was running are reported as ``worker_error`` episodes."""
        if work.pairs:
            await _run(work, self.count, sink)


async def _run(work: Work, count: int, sink: Sink) -> None:
    pairs = work.pairs
    queue: Iterator[tuple[Task, int]] = iter(pairs)
    #: Pairs taken for a worker that turned out dead before it was sent them.
    returned: list[tuple[Task, int]] = []
    exhausted = False
    setup = {"config": work.resolved, "log": log_mod.settings(), "seed": work.seed,
             "entry_points": plugins.host().loads_entry_points}
    pool: list[_Worker] = []
    relays: list[asyncio.Future[None]] = []
    try:
        for i, share in enumerate(shares(work.concurrency, min(count, len(pairs)))):
            proc = await processes.start_process(
                sys.executable, "-m", "interplay.run.workers", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                limit=_LINE_LIMIT, env={**os.environ, _PARENT_VAR: str(os.getpid())})
            worker = _Worker(i, proc, share)
            relays.append(asyncio.ensure_future(_relay_stderr(proc)))
            worker.send({**setup, "concurrency": share})
            pool.append(worker)
        log.info("workers.start", workers=len(pool), concurrency=work.concurrency,
                 episodes=len(pairs))

        def feed(worker: _Worker) -> None:
            nonlocal exhausted
            while not worker.closed and len(worker.outstanding) < worker.capacity:
                pair = None if exhausted else (returned.pop() if returned else next(queue, None))
                if pair is None:
                    exhausted = True
                    for w in pool:
                        w.close_input()
                    return
                task, rollout = pair
                if not worker.send([task.idx, rollout]):
                    # The worker died before it could be told: the pair goes to another.
                    returned.append(pair)
                    return
                worker.outstanding[(task.idx, rollout)] = (task, rollout, time.time())

        for worker in pool:
            feed(worker)
        results = await asyncio.gather(
            *(_read(w, feed, sink.line, lambda w: _lost(w, work, sink)) for w in pool),
            return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if not exhausted:
            raise InterplayError("every worker process exited before the run ended (see the "
                                 "errors above); continue with --resume")
    finally:
        await _stop(pool)
        # The copies end when the workers' stderr closes; a program a worker started that
        # still holds it is not waited for.
        _, late = await asyncio.wait(relays, timeout=_STOP_GRACE_S) if relays else ((), ())
        for relay in late:
            relay.cancel()


async def _relay_stderr(proc: asyncio.subprocess.Process) -> None:
    """Copy what a worker writes to stderr (its log lines, a plugin's prints) to this
    process's stderr as it is at each write: a progress bar there prints it above itself,
    where the worker's own writes to the terminal would cross the bar."""
    assert proc.stderr is not None
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
    pending = ""
    while chunk := await proc.stderr.read(1 << 16):
        # Whole lines only: a line in two pieces would be shown as two.
        lines, newline, pending = (pending + decode(chunk)).rpartition("\n")
        if newline:
            _write_stderr(lines + newline)
    if pending:
        _write_stderr(pending + "\n")


def _write_stderr(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(text)
        sys.stderr.flush()


async def _read(worker: _Worker, feed: Callable[[_Worker], None],
                on_line: Callable[[Finished], None], lost: Callable[[_Worker], None]) -> None:
    """Take the worker's episodes as they come, giving it a new pair for each, until it
    exits; then record what it was still running (the pairs it never got go to the others,
    which keep asking)."""
    out = worker.proc.stdout
    assert out is not None
    while True:
        header_line = await out.readline()
        if not header_line.endswith(b"\n"):
            break  # the worker exited, or died mid-message
        try:
            header = json.loads(header_line)
            failed = header.get("error")
            if failed is None:
                pair = (int(header["task_idx"]), int(header["rollout"]))
                slim = dict(header["slim"])
        except (ValueError, TypeError, KeyError, AttributeError):
            # Not the protocol (something wrote into the worker's private pipe): the worker
            # cannot be trusted to go on; what it was running is lost like a crash's.
            log.warning("workers.bad_message", worker=worker.index, length=len(header_line))
            with contextlib.suppress(ProcessLookupError):
                worker.proc.kill()
            break
        if failed is not None:
            raise InterplayError(f"a worker process could not start: {failed}")
        line = await out.readline()
        if not line.endswith(b"\n"):
            break  # cut off mid-message: the worker died
        side: bytes | None = None
        if header.get("side"):
            side = await out.readline()
            if not side.endswith(b"\n"):
                break
            side = side[:-1]
        worker.outstanding.pop(pair, None)
        on_line(Finished(pair[0], pair[1], line[:-1], slim, side))
        feed(worker)
    code = await worker.proc.wait()
    worker.closed = True
    if worker.outstanding:
        log.warning("workers.lost", worker=worker.index, exit_code=code,
                    episodes=len(worker.outstanding))
        lost(worker)


def _lost(worker: _Worker, work: Work, sink: Sink) -> None:
    code = worker.proc.returncode
    for task, rollout, started in worker.outstanding.values():
        sink.episode(lost_episode(work, task, rollout, started,
                                  f"the worker process running it exited (code {code})"))
    worker.outstanding.clear()


async def _stop(pool: Sequence[_Worker]) -> None:
    """Let finished workers go; stop running ones with SIGTERM, then SIGKILL."""
    running = [w for w in pool if w.proc.returncode is None]
    for w in running:
        w.close_input()
        with contextlib.suppress(ProcessLookupError):
            w.proc.send_signal(signal.SIGTERM)
    for w in running:
        try:
            await asyncio.shield(asyncio.wait_for(w.proc.wait(), _STOP_GRACE_S))
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                w.proc.kill()
            await asyncio.shield(w.proc.wait())


# -- the worker process ---------------------------------------------------------------------------


async def _serve(reader: asyncio.StreamReader, out: asyncio.StreamWriter) -> None:
    from interplay.run.episode import RunResources

    setup = json.loads(await reader.readline())
    log_mod.configure(**setup["log"])
    try:
        # The parent's plugins: installed ones only if it loaded them (the allow- and
        # block-lists come with the environment).
        plugins.reset(load_entry_points=bool(setup.get("entry_points", True)))
        cfg, env, _ = config.resolve(setup["config"])
        tasks = {t.idx: t for t in env.tasks()}
    except Exception as exc:
        out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
        await out.drain()
        return
    concurrency = int(setup["concurrency"])
    seed = int(setup["seed"])
    resources = RunResources(endpoint=cfg.model, seats=cfg.seats, interception=cfg.interception,
                             sandbox=cfg.sandbox,
                             max_connections=concurrency * max(1, len(env.seats)))
    running: set[asyncio.Task[None]] = set()

    async def one(task: Task, rollout: int) -> None:
        episode = await run_one(env, task, rollout, resources=resources, seed=seed)
        line, side = results.episode_parts(episode)
        header = {"task_idx": task.idx, "rollout": rollout,
                  "slim": results.slim_episode(episode), "side": side is not None}
        del episode
        out.write(json.dumps(header, separators=(",", ":")).encode() + b"\n" + line + b"\n"
                  + (b"" if side is None else side + b"\n"))
        await out.drain()

    try:
        while line := await reader.readline():
            task_idx, rollout = json.loads(line)
            task = tasks.get(int(task_idx))
            if task is None:
                # The parent's tasks came from the same config: a taskset that changes between
                # reads. Recorded by the parent as a lost episode.
                log.warning("workers.unknown_task", task_idx=task_idx)
                continue
            job = asyncio.get_running_loop().create_task(one(task, int(rollout)))
            running.add(job)
            job.add_done_callback(running.discard)
        if running:
            await asyncio.gather(*running)
    finally:
        for job in running:
            job.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        await resources.aclose()


async def _worker_main(protocol_fd: int) -> None:
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    if main is not None:
        # SIGTERM from the parent: cancel, so harnesses stop what they started.
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(protocol_fd, "wb", buffering=0))
    out = asyncio.StreamWriter(transport, protocol, None, loop)
    try:
        with collector_tuned_for_runs():
            await _serve(reader, out)
    except asyncio.CancelledError:
        pass
    finally:
        transport.close()


def _die_with_parent() -> None:
    """A worker whose parent is killed (SIGKILL leaves it no say) must not go on making model
    calls: on Linux the kernel sends it SIGTERM when the parent's thread that forked it ends
    (the run's event-loop thread, which stops every worker before it returns). Elsewhere,
    and as a second line, the parent's reaper ends it (interplay.processes)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if str(os.getppid()) != os.environ.get(_PARENT_VAR):
        sys.exit(0)  # the parent died before the line above


def main() -> None:
    _die_with_parent()
    prepare_process()
    # One step below the parent (the only writer of the results) and below a model server on
    # the same machine, whose every wait for the CPU is added to every call.
    os.nice(1)
    # Ctrl-C is the parent's to answer: it decides and stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    protocol_fd = os.dup(1)
    os.dup2(2, 1)  # anything a plugin prints goes to stderr, not into the protocol
    aio.run(_worker_main(protocol_fd))


if __name__ == "__main__":
    main()
