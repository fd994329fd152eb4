"""What `interplay eval` costs around each model call: the runner's own overhead, measured.

Runs the builtin ``user-sim`` env as a 10-turn relay (the user sim and the assistant are both
answered by a model that always gives the same short reply, so each episode makes 21 model
calls: 11 user turns, 10 assistant turns) through ``interplay.runner.run`` (episodes.jsonl
fsync'd per episode, summary written), against a model served from a separate process, so the
figures are this process's CPU alone.

The model is ``benchmarks/fast_model.py`` by default (``--server fast``): the figures are meant
to be the framework's, and on this 2-core machine every millisecond the model server spends
is taken from the framework under test. The scripted model kit (``--server scripted``, a
general ASGI test double) spends 0.11-0.15 ms of CPU per call, over half a core at the
latency bench's rates; fast_model.py spends 0.03-0.05 ms. Every line says which server ran
and what it spent per call (``server_cpu_ms_per_call``).

With ``--workers W`` the run spreads its episodes over W worker processes (``interplay eval
-w``); CPU then counts the workers too, and memory per live episode is the parent's growth plus
the workers' whole RSS, their interpreters and imports included.

With ``--executor ray`` the runs go to Ray actors on a local Ray cluster started once before them
(how long that takes is printed: a run with no ``--ray-address`` pays it each time); the latency
bench then runs three times, in one process, with ``-w 2`` and on Ray, so the three rows share one
machine's spell. CPU and memory count every process of this process's tree but the model
server: the workers, and the Ray cluster's own processes (its actors, raylet, GCS and agents)
while the run lasts.

* instant model at -c 1, 64, 256: episodes/s and CPU ms per model call (target <= 2 ms);
* 200 ms model latency at -c 1000: model calls/s as a ratio of the ideal concurrency / latency
  (target >= 0.9) and peak memory per live episode (target <= 100 KB). ``ratio_of_ideal`` is
  the whole run's (every call over the wall time, the start-up of worker processes and the
  drain at the end, when slots empty, included); ``steady_ratio_of_ideal`` counts the calls
  that finished while every one of the c slots held an episode (from the c-th start to the
  last start), the rate a longer run tends to. Beside them, where the rest of the wall time
  went: ``first_start_s`` (until the first episode started: worker processes start in it),
  ``drain_s`` (after the last episode started) and ``call_latency_ms`` (a call as the episode
  saw it: the model's latency plus the wait in the framework's queue of ready work).

Run by hand (it prints figures; nothing is asserted):

    .venv/bin/python benchmarks/bench_run.py
    .venv/bin/python benchmarks/bench_run.py --only latency --latency-n 2000
    .venv/bin/python benchmarks/bench_run.py --only instant --conc 64 --server scripted
    .venv/bin/python benchmarks/bench_run.py --only latency --executor ray
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from interplay import log
from interplay._plumbing import aio
from interplay.plugins import host as plugins
from interplay.run import config, results, runner
from interplay.run.executor import collector_tuned_for_runs
from interplay.testing import descendants

ROUNDS = 10
FAST_MODEL = Path(__file__).resolve().parent / "fast_model.py"


def serve(port: int, latency_ms: float) -> None:
    """The ``scripted`` server: the scripted kit answering every request with a short reply."""
    from interplay.testing import ScriptedModel, ScriptedReply

    latency = latency_ms / 1000

    def handler(_: Any) -> ScriptedReply:
        return ScriptedReply.text("ok, noted", latency_s=latency)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with ScriptedModel(handler, port=port):
        print("ready", flush=True)
        done.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """The model in its own process: ``fast`` (benchmarks/fast_model.py) or ``scripted``."""

    def __init__(self, latency_ms: float, kind: str = "fast") -> None:
        self.kind = kind
        self.port = free_port()
        if kind == "fast":
            cmd = [sys.executable, str(FAST_MODEL), "--port", str(self.port)]
        elif kind == "scripted":
            cmd = [sys.executable, __file__, "--serve", str(self.port)]
        else:
            raise ValueError(f"unknown model server {kind!r}")
        self.proc = subprocess.Popen([*cmd, "--latency-ms", str(latency_ms)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            self.stop()
            raise RuntimeError(f"the {kind} model server did not start")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def cpu_seconds(self) -> float:
        """The model server's own CPU so far: a saturated server caps the ratio, not us."""
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def rss_bytes(pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # gone meanwhile
        return 0


def _rusage_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Tree:
    """This process and its descendants but the model server, watched while a run lasts: their
    memory and their CPU. Children this process waits for (the runner's workers) are counted
    whole by its rusage; any other process is counted to its last sample, since one that ends
    leaves its CPU in no rusage (Ray's raylet does not wait for the actors it ends). A process
    born during the run counts from zero; one there before it (a Ray cluster's raylet, GCS and
    agents) from where it was."""

    REFRESH_S = 0.5

    def __init__(self, server: Server) -> None:
        self.server = server.proc.pid
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.members: set[int] = set()
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.parent: dict[int, int] = {}
        self.refreshed = 0.0
        self.rusage0 = _rusage_seconds()
        self.base_rss = self.sample(first=True)

    def sample(self, *, first: bool = False) -> int:
        """Read every member's CPU; return the tree's RSS."""
        now = time.monotonic()
        if first or now - self.refreshed >= self.REFRESH_S:
            self.members = (descendants(os.getpid()) - {self.server}
                            - descendants(self.server))
            self.refreshed = now
        rss = rss_bytes()
        for pid in list(self.members):
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                fields = []
            if len(fields) < 13 or fields[0] in ("Z", "X"):
                self.members.discard(pid)
                continue
            cpu = (int(fields[11]) + int(fields[12])) / self.ticks
            self.first.setdefault(pid, cpu if first else 0.0)
            self.last[pid] = cpu
            self.parent[pid] = int(fields[1])
            rss += rss_bytes(pid)
        return rss

    def cpu_seconds(self) -> float:
        """CPU since this Tree was made."""
        self.sample(first=False)
        total = _rusage_seconds() - self.rusage0
        me = os.getpid()
        for pid, last in self.last.items():
            if pid not in self.members and self.parent.get(pid) == me:
                continue  # waited for by this process: in its rusage, whole
            total += last - self.first[pid]
        return total


def phases(path: Path, concurrency: int, t0: float) -> dict[str, Any]:
    """Where a latency run's wall time goes, from its episodes' records: ``t0`` is when the
    run was started (``time.time()``).

    ``steady_calls_per_s`` counts the model calls that finished while all ``concurrency``
    slots held a running episode: from the moment the c-th episode started until the last one
    started (after that, slots only empty); None when the run never filled its slots twice
    over. ``first_start_s`` is how long the run took to start its first episode (worker
    processes start in it), ``drain_s`` how long the last episodes ran after the last one
    started, and ``call_latency_ms`` the mean and 90th percentile of a call as the episode saw
    it (the model's latency plus the time the framework kept it waiting, in its own queue of
    ready work: what the calls of one burst cost each other)."""
    starts: list[float] = []
    finished: list[float] = []
    latencies: list[float] = []
    with path.open("rb") as fh:
        for line in fh:
            record = json.loads(line)
            starts.append(record["started_at"])
            for trace in record["traces"]:
                for call in trace["model_calls"]:
                    finished.append(call["started_at"] + call["latency_s"])
                    latencies.append(call["latency_s"])
    starts.sort()
    latencies.sort()
    out: dict[str, Any] = {
        "first_start_s": round(starts[0] - t0, 3),
        "drain_s": round(max(finished) - starts[-1], 3),
        "call_latency_ms": {"mean": round(1000 * sum(latencies) / len(latencies), 1),
                            "p90": round(1000 * latencies[int(0.9 * (len(latencies) - 1))], 1)},
        "steady_calls_per_s": None, "steady_window_s": None}
    if len(starts) > concurrency:
        t1, t2 = starts[concurrency - 1], starts[-1]
        if t2 > t1:
            out["steady_calls_per_s"] = round(sum(1 for t in finished if t1 <= t <= t2)
                                              / (t2 - t1), 1)
            out["steady_window_s"] = round(t2 - t1, 2)
    return out


async def one_run(server: Server, episodes: int, concurrency: int, work: Path,
                  sample_memory: bool = False, workers: int = 1,
                  executor: str = "local") -> dict[str, Any]:
    tasks_file = work / f"tasks-{episodes}.jsonl"
    if not tasks_file.exists():
        tasks_file.write_text("".join(
            json.dumps({"prompt": f"You want to know thing {i}.", "answer": "never said"}) + "\n"
            for i in range(episodes)))
    out = Path(tempfile.mkdtemp(dir=work))
    data = {"env": {"name": "user-sim", "taskset": str(tasks_file),
                    "relay": {"max_turns": ROUNDS}},
            "n": episodes, "concurrency": concurrency, "output": str(out), "workers": workers,
            "executor": executor, "model": {"base_url": server.base_url, "model": "scripted"}}
    cfg, env, resolved = config.resolve(data)
    # Other processes to watch, or memory to sample: otherwise nothing runs beside the run (the
    # instruction counts of bench_instructions.py are this function's).
    tree = Tree(server) if sample_memory or workers > 1 or executor != "local" else None
    peak = base = tree.base_rss if tree else 0
    stop = asyncio.Event()

    async def sampler() -> None:
        nonlocal peak
        while tree is not None and not stop.is_set():
            peak = max(peak, tree.sample())
            await asyncio.sleep(0.05 if sample_memory else 0.25)

    sampling = asyncio.ensure_future(sampler())
    rusage0, server0, t0 = _rusage_seconds(), server.cpu_seconds(), time.perf_counter()
    started = time.time()
    own0 = cpu_seconds()
    with collector_tuned_for_runs():  # as `interplay eval` runs
        outcome = await runner.run(cfg, env, resolved, out)
    wall, own = time.perf_counter() - t0, cpu_seconds() - own0
    cpu = tree.cpu_seconds() if tree else _rusage_seconds() - rusage0
    server_cpu = server.cpu_seconds() - server0
    stop.set()
    await sampling
    summary = outcome.summary
    calls = int(summary["model_calls"])
    timing = phases(out / results.EPISODES_FILE, concurrency, started) if sample_memory else {}
    return {"episodes": outcome.ran, "c": concurrency, "workers": workers, "executor": executor,
            "wall_s": round(wall, 3),
            "episodes_per_s": round(outcome.ran / wall, 2), "model_calls": calls,
            "model_calls_per_s": round(calls / wall, 1),
            "cpu_ms_per_call": round(cpu * 1000 / max(calls, 1), 3),
            # This process alone: with workers or on Ray, what coordinating an episode costs.
            "driver_cpu_ms_per_episode": round(own * 1000 / max(outcome.ran, 1), 3),
            "server_cpu_ms_per_call": round(server_cpu * 1000 / max(calls, 1), 3),
            "errors": summary["error_episodes"],
            "mean_turns": summary["metrics"].get("turns"),
            "peak_rss_delta_mb": round((peak - base) / 2**20, 1) if sample_memory else None,
            **timing}


async def bench(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="interplay-bench-run-"))
    try:
        await run_benches(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def run_benches(args: argparse.Namespace, work: Path) -> None:
    if args.executor == "ray":
        import ray

        t0 = time.perf_counter()
        ray.init(address="local", include_dashboard=False, logging_level="WARNING")
        print(json.dumps({"bench": "ray_start", "local_cluster_start_s":
                          round(time.perf_counter() - t0, 2),
                          "cpus": ray.cluster_resources().get("CPU")}), flush=True)
    if args.only in (None, "instant"):
        server = Server(0.0, args.server)
        try:
            await one_run(server, 4, 2, work, executor=args.executor)  # warm-up
            for c in args.conc:
                n = max(args.n, c)
                row = await one_run(server, n, c, work, workers=args.workers,
                                    executor=args.executor)
                row["target_cpu_ms_per_call"] = 2.0
                print(json.dumps({"bench": "instant", "server": args.server, **row}),
                      flush=True)
        finally:
            server.stop()
    if args.only in (None, "latency"):
        # On Ray, next to one process and -w 2, in the same spell of this machine.
        shapes = ([(1, "local"), (2, "local"), (1, "ray")] if args.executor == "ray"
                  else [(args.workers, "local")])
        server = Server(args.latency_ms, args.server)
        try:
            await one_run(server, 4, 4, work)  # warm-up
            for workers, executor in shapes:
                await latency_row(args, server, work, workers, executor)
        finally:
            server.stop()


async def latency_row(args: argparse.Namespace, server: Server, work: Path, workers: int,
                      executor: str) -> None:
    c = args.latency_c
    row = await one_run(server, args.latency_n, c, work, sample_memory=True, workers=workers,
                        executor=executor)
    ideal = c / (args.latency_ms / 1000)
    row["ideal_calls_per_s"] = ideal
    row["ratio_of_ideal"] = round(row["model_calls_per_s"] / ideal, 3)
    if row.get("steady_calls_per_s") is not None:
        row["steady_ratio_of_ideal"] = round(row["steady_calls_per_s"] / ideal, 3)
    row["kb_per_live_episode"] = round(row["peak_rss_delta_mb"] * 1024 / c, 1)
    row["targets"] = {"ratio_of_ideal": 0.9, "kb_per_live_episode": 100}
    print(json.dumps({"bench": "latency", "server": args.server,
                      "latency_ms": args.latency_ms, **row}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=("instant", "latency"))
    parser.add_argument("--server", choices=("fast", "scripted"), default="fast",
                        help="the model server: fast_model.py (default) or the scripted kit")
    parser.add_argument("-n", type=int, default=200, help="episodes per instant run")
    parser.add_argument("-w", "--workers", type=int, default=1,
                        help="worker processes for the runs (interplay eval -w)")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="where the runs' episodes go (interplay eval --executor); with ray "
                        "the latency bench also runs in one process and with -w 2")
    parser.add_argument("--conc", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 64, 256])
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--latency-c", type=int, default=1000)
    parser.add_argument("--latency-n", type=int, default=2000)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.latency_ms)
        return
    log.configure(level="warning")
    plugins.reset(load_entry_points=False)
    aio.run(bench(args))


if __name__ == "__main__":
    main()
