"""interplay on the peers' scripted server: N ten-turn episodes at concurrency C.

Meets the runner contract of ../shared/peers/README.md (``--server-url URL -n N -c C``, one JSON
line). The workload is the peers' one: a taskset of N prompt-less tasks; an env whose step
opens one chat on the ``assistant`` seat (the tool-less ``null`` harness, one model call per
segment) and sends ``ROUND k`` for k = 1..10; a verifier checks the last reply is ``done 10``.
It runs through interplay's own runner (``interplay.runner.run``), so the figures include
what a real ``interplay eval`` does per episode: episodes.jsonl appended and fsync'd, the
summary written. Prints one JSON line.

    .venv/bin/python benchmarks/run_interplay.py --server-url http://127.0.0.1:8765 -n 200 -c 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import sys
import tempfile
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

T_START = time.perf_counter()
import interplay  # noqa: E402 - the framework imports are timed as import_s
from interplay import log  # noqa: E402
from interplay._plumbing import aio  # noqa: E402
from interplay.contracts.env import Env, SeatSpec  # noqa: E402
from interplay.contracts.step import Step  # noqa: E402
from interplay.contracts.verifier import Verifier  # noqa: E402
from interplay.plugins import host as plugins  # noqa: E402
from interplay.run import config, results, runner  # noqa: E402
from interplay.run.episode import LiveEpisodeContext  # noqa: E402
from interplay.run.executor import collector_tuned_for_runs  # noqa: E402
from interplay.values.records import Episode, Reward, Task  # noqa: E402

IMPORT_S = time.perf_counter() - T_START
ROUNDS = 10
EXPECTED = f"done {ROUNDS}"


class Rounds(Step):
    """Opens one chat and sends ROUND 1 .. ROUND 10 as the user."""

    name = "bench_rounds"

    async def run(self, ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            for k in range(1, ROUNDS + 1):
                reply = await chat.turn(f"ROUND {k}")
                if reply.stopped:
                    break
            ctx.metrics["turns"] = float(chat.turns)


class Finished(Verifier):
    """1 when the conversation ended on the scripted closing reply."""

    name = "bench_finished"

    async def score(self, episode: Episode, ctx: LiveEpisodeContext) -> Reward:
        replies = [m.text for m in episode.trace("assistant").messages if m.role == "assistant"]
        return Reward(self.name, float(bool(replies) and replies[-1] == EXPECTED))


class RoundsEnv(Env):
    """N prompt-less tasks, ten rounds each."""

    name = "bench-rounds"
    seats: ClassVar = {"assistant": SeatSpec(harness="null")}
    num_tasks = 1

    def tasks(self) -> list[Task]:
        return [Task(idx=i) for i in range(self.num_tasks)]

    def steps(self) -> list[Step]:
        return [Rounds()]

    def verifiers(self) -> list[Verifier]:
        return [Finished(Finished.Config())]


class _Plugin:
    @interplay.hookimpl
    def register_envs(self, register: Any) -> None:
        register(RoundsEnv)


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def server_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as response:
        return json.load(response)


async def eval_once(args: argparse.Namespace, n: int, out: Path) -> list[dict[str, Any]]:
    RoundsEnv.num_tasks = n
    data = {"env": {"name": RoundsEnv.name}, "n": n, "concurrency": args.c,
            "model": {"base_url": f"{args.server_url}/v1", "model": "scripted"},
            "output": str(out)}
    cfg, env, resolved = config.resolve(data)
    await asyncio.to_thread(out.mkdir, parents=True)
    with collector_tuned_for_runs():  # as `interplay eval` runs
        outcome = await runner.run(cfg, env, resolved, out)
    assert outcome.ran == n
    return results.read_episodes(out / results.EPISODES_FILE)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="interplay-bench-"))
    try:
        t = time.perf_counter()
        await eval_once(args, args.warmup, work / "warmup")
        warmup_s = time.perf_counter() - t
        before = server_stats(args.server_url)
        cpu0, kids0 = cpu_seconds(), cpu_seconds(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        episodes = await eval_once(args, args.n, work / "run")
        wall = time.perf_counter() - t0
        cpu = cpu_seconds() - cpu0
        kids = cpu_seconds(resource.RUSAGE_CHILDREN) - kids0
        after = server_stats(args.server_url)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    calls = after["chat"] - before["chat"]
    per_call = 1000 / max(calls, 1)
    traces = [t for e in episodes for t in e["traces"]]

    def ok(e: dict[str, Any]) -> bool:
        t = e["traces"][0]
        replies = [m["content"] for m in t["messages"] if m["role"] == "assistant"]
        return e["error"] is None and len(replies) == ROUNDS and replies[-1] == EXPECTED

    return {
        "framework": "interplay",
        "version": version("interplay"),
        "n": args.n,
        "c": args.c,
        "rounds": ROUNDS,
        "wall_s": round(wall, 3),
        "episodes_per_s": round(args.n / wall, 2),
        "model_calls": calls,
        "model_calls_per_s": round(calls / wall, 1),
        "cpu_s": round(cpu, 3),
        "cpu_ms_per_call": round(cpu * per_call, 3),
        "server_cpu_ms_per_call": round((after["cpu_s"] - before["cpu_s"]) * per_call, 3),
        "children_cpu_s": round(kids, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "import_s": round(IMPORT_S, 3),
        "warmup_s": round(warmup_s, 3),
        "episodes_ok": sum(ok(e) for e in episodes),
        "mean_reward": round(sum(e["reward"] or 0 for e in episodes) / max(len(episodes), 1), 4),
        "mean_turns": round(sum(len([m for m in t["messages"] if m["role"] == "assistant"])
                                for t in traces) / max(len(traces), 1), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--server-url", default="http://127.0.0.1:8765")
    parser.add_argument("-n", type=int, default=200, help="episodes")
    parser.add_argument("-c", type=int, default=1, help="episodes in flight")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured episodes first")
    args = parser.parse_args()
    # A script is a CLI: it configures logging (warnings only, as `interplay` does).
    log.configure(level="warning")
    plugins.reset(load_entry_points=False)
    plugins.host().register_module(_Plugin(), "bench-rounds")
    result = aio.run(measure(args))
    print(json.dumps(result), flush=True)
    correct = result["episodes_ok"] == args.n and result["model_calls"] == ROUNDS * args.n
    sys.exit(0 if correct else 1)


if __name__ == "__main__":
    main()

