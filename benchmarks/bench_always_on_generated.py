"""Generated always_on scenarios at scale: the same bytes from the same seeds, every world
loading, and ``interplay eval`` on generated weeks scored by code.

1. ``interplay generate errands -n 1000`` (seeds 0-999) in two processes of their own: the two
   files byte for byte (their SHA-256), the time each took, and every task's world, person and
   goals loading as a run would load them (the time it takes).
2. ``interplay eval always-on-generated -n N`` on the scripted model (this process serves it:
   the reference agent of ``interplay.builtin_envs.always_on.reference``, which does what each
   goal asks, and her user sim answered yes), as a user runs it: the mean reward, each goal's
   mean, the episodes that scored below 1, events that reached the agent late, wall time.
   ``--mistake NAME`` runs the agent with one of its named mistakes, to see the goal it fails
   fall to 0 across the run. ``--game NAME`` runs one of the gaming agents of
   ``interplay.builtin_envs.always_on.gaming`` instead (``--game all``: each in turn).
3. ``--embedded N``: the same eval of N generated weeks on the embedded model (both seats; it
   takes tens of minutes a week on two cores): its scores, wakes, calls and wall.

Run by hand (it prints figures; nothing is asserted):

    .venv/bin/python benchmarks/bench_always_on_generated.py                 # 1000 + 100
    .venv/bin/python benchmarks/bench_always_on_generated.py --skip-generate --mistake relay_late
    .venv/bin/python benchmarks/bench_always_on_generated.py --skip-generate -n 30 --game all
    .venv/bin/python benchmarks/bench_always_on_generated.py --skip-generate -n 0 --embedded 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from interplay.builtin_envs.always_on.reference import reference_model
from interplay.builtin_envs.user_sim_step import UserSimStep
from interplay.builtin_verifiers.goals import Goals
from interplay.run import whole_record
from interplay.values import load_jsonl
from interplay.values.records import Episode, EpisodeInfo
from interplay.world.scenario import scenario_from


def interplay(*args: str, timeout: float | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "interplay.cli", *args], capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"interplay {' '.join(args)} failed ({done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    return time.perf_counter() - t0, done.stderr


def generate(folder: Path, count: int) -> dict[str, Any]:
    files, walls = [], []
    for name in ("first", "second"):
        path = folder / f"{name}.jsonl"
        wall, _ = interplay("generate", "errands", "-n", str(count), "-o", str(path))
        files.append(path.read_bytes())
        walls.append(round(wall, 2))
    t0 = time.perf_counter()
    tasks = load_jsonl(folder / "first.jsonl")
    step = UserSimStep({"user_sim": "llm"})
    goals = Goals()
    kinds: dict[str, int] = defaultdict(int)
    for task in tasks:
        scenario_from({**task.info["world"], "user": task.info["user"]}, source="generated")
        step.record(task)
        episode = Episode(info=EpisodeInfo(episode_id="x", env="always-on-generated",
                                           task_idx=task.idx), task=task)
        for _, verifier in goals.goals(episode):
            kinds[verifier.name] += 1
    return {"tasks": count, "identical": files[0] == files[1],
            "sha256": [hashlib.sha256(f).hexdigest()[:16] for f in files],
            "bytes": len(files[0]), "generate_s": walls,
            "load_all_s": round(time.perf_counter() - t0, 2), "goals": dict(sorted(kinds.items()))}


def scores(output: Path) -> dict[str, Any]:
    summary = json.loads((output / "summary.json").read_text())
    goals: dict[str, list[float]] = defaultdict(list)
    below, late, wakes = [], 0, []
    for line in (output / "episodes.jsonl").read_text().splitlines():
        record = whole_record(json.loads(line), output)
        for reward in record["rewards"]:
            goals[reward["info"].get("goal", reward["name"])].append(reward["value"])
        if record.get("reward") is not None and record["reward"] < 1:
            below.append({"task": record["info"]["task_idx"], "reward": round(record["reward"], 3),
                          "missed": [r["info"].get("goal") for r in record["rewards"]
                                     if r["value"] < 1]})
        counts = record["results"]["always_on"]["summary"]["counts"]
        late += counts["late_events"]
        wakes.append(counts["wakes"])
    return {"episodes": summary["episodes"], "scored": summary["scored"],
            "errors": summary["errors"], "truncated": summary.get("truncated"),
            "reward_mean": summary["reward_mean"],
            "goal_means": {g: round(statistics.mean(v), 3) for g, v in sorted(goals.items())},
            "below_1": below[:10], "late_events": late,
            "wakes_mean": round(statistics.mean(wakes), 1) if wakes else None,
            "model_calls": summary["model_calls"], "tokens": summary["tokens"],
            "wall_s": summary.get("wall_s")}


def scripted_eval(folder: Path, n: int, concurrency: int, mistake: str | None,
                  game: str | None = None) -> dict[str, Any]:
    from interplay.builtin_envs.always_on.gaming import gaming_model
    from interplay.contracts.scenario import generate_tasks
    from interplay.run.loader import load_env
    from interplay.testing import ScriptedModel

    env = load_env("always-on-generated", {"count": n})
    tasks = list(generate_tasks(env.kind(), count=n))
    output = folder / f"scripted-{game or mistake or 'reference'}"
    handler = gaming_model(tasks, game) if game else reference_model(
        tasks, [mistake] if mistake else [])
    with ScriptedModel(handler, keep_requests=0) as model:
        wall, _ = interplay("eval", "always-on-generated", "-n", str(n), "-c", str(concurrency),
                            "--base-url", model.base_url, "-o", str(output), "--quiet",
                            "--no-report")
    return {"n": n, "mistake": mistake, "game": game, "eval_wall_s": round(wall, 1),
            **scores(output)}


def embedded_eval(output: Path, n: int, concurrency: int, budget_s: float | None,
                  rate: float | None) -> dict[str, Any]:
    args = ["eval", "always-on-generated", "-n", str(n), "-c", str(concurrency), "-o",
            str(output), "--quiet", "--no-report"]
    if budget_s is not None:
        args += ["--set", f"env.always_on.budget_s={budget_s}"]
    if rate is not None:
        args += ["--set", f"env.always_on.rate={rate}"]
    wall, _ = interplay(*args)
    return {"n": n, "embedded": True, "concurrency": concurrency, "rate": rate,
            "eval_wall_s": round(wall, 1), **scores(output)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="scenarios to generate twice")
    parser.add_argument("--skip-generate", action="store_true")
    parser.add_argument("-n", type=int, default=100, help="generated weeks on the scripted model")
    parser.add_argument("-c", type=int, default=8, help="episodes at once (scripted)")
    parser.add_argument("--mistake", help="the reference agent's mistake (scripted run)")
    parser.add_argument("--game", help="a gaming agent instead (scripted run), or all")
    parser.add_argument("--embedded", type=int, default=0,
                        help="generated weeks on the embedded model")
    parser.add_argument("--embedded-output", default="results/generated-embedded")
    parser.add_argument("--embedded-c", type=int, default=1,
                        help="embedded weeks at once")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="env.always_on.budget_s for the embedded weeks")
    parser.add_argument("--rate", type=float, default=None,
                        help="env.always_on.rate for the embedded weeks (default: the env's, 0)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if not args.skip_generate:
            print(json.dumps({"generate": generate(folder, args.count)}), flush=True)
        if args.n:
            from interplay.builtin_envs.always_on.gaming import GAMES

            games = list(GAMES) if args.game == "all" else [args.game]
            for game in games:
                print(json.dumps({"scripted": scripted_eval(folder, args.n, args.c,
                                                            args.mistake, game)}), flush=True)
    if args.embedded:
        print(json.dumps({"embedded": embedded_eval(Path(args.embedded_output), args.embedded,
                                                    args.embedded_c, args.budget_s,
                                                    args.rate)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
