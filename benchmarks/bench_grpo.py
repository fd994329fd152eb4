"""A GRPO run on the CPU through interplay-trl, measured: the reward per step (mean and spread
over the step's episodes), the step time, and ``interplay compare`` between the model before
and after on held-out tasks.

The env is a short alphabet-sort (benchmarks/data/sort_short.jsonl: two turns, two names then
one more, by first name). Training takes the file's first ``--train-tasks`` tasks; the held-out
tasks are the rest, evaluated before and after on the same policy server (the transformers
model, sampled at temperature 1 as in training), the "before" model being the embedded model's
GGUF dequantized, the "after" the run's final model.

Needs the plugin (see docs/training.md, "Training with TRL"). Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_grpo.py --steps 30 -o /tmp/grpo-bench
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
TASKS = HERE / "data" / "sort_short.jsonl"
BIN = Path(sys.executable).parent


@contextmanager
def served(model: Path | None) -> Iterator[str]:
    """An ``interplay-trl serve`` of ``model`` (None: the embedded model's GGUF); its URL."""
    args = [str(BIN / "interplay-trl"), "serve"] + ([str(model)] if model else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit(f"interplay-trl serve did not start: {url!r}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def held_out(train_tasks: int, n: int, out: Path) -> Path:
    rows = TASKS.read_text().splitlines()[train_tasks:train_tasks + n]
    path = out / "held_out.jsonl"
    # Their own idx: the tasks (and the names their episodes draw) are not the trained ones.
    path.write_text("".join(json.dumps({"idx": 1000 + i, **json.loads(r)}) + "\n"
                            for i, r in enumerate(rows)))
    return path


def evaluate(url: str, tasks: Path, rollouts: int, out: Path, max_tokens: int) -> dict:
    subprocess.run([str(BIN / "interplay"), "eval", "alphabet-sort", "--base-url", url,
                    "-m", "policy", "-r", str(rollouts), "-c", "1", "-o", str(out),
                    # One generation at a time on a CPU: a call waits its turn for minutes.
                    "--set", "model.timeout_s=3600", "--set", "model.max_retries=0",
                    "--set", "seats.assistant.timeout_s=3600",
                    "--set", f"env.taskset={tasks}",
                    "--set", f"model.sampling.max_tokens={max_tokens}",
                    "--no-report", "--quiet"], check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--train-tasks", type=int, default=32)
    p.add_argument("--held-out", type=int, default=16, help="held-out tasks evaluated")
    p.add_argument("--eval-rollouts", type=int, default=2)
    p.add_argument("--tasks-per-step", type=int, default=2)
    p.add_argument("-g", "--generations", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("-o", "--output", type=Path, default=Path("/tmp/grpo-bench"))
    args = p.parse_args()
    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    tasks = held_out(args.train_tasks, args.held_out, out)

    with served(None) as url:
        t0 = time.monotonic()
        evaluate(url, tasks, args.eval_rollouts, out / "before", args.max_tokens)
        print(f"before: held-out eval {time.monotonic() - t0:.0f} s")
    run = out / "run"
    subprocess.run([str(BIN / "interplay-trl"), "train", "alphabet-sort", "-o", str(run),
                    "--steps", str(args.steps), "--tasks-per-step", str(args.tasks_per_step),
                    "-g", str(args.generations),
                    "--train-tasks", str(args.train_tasks), "--lr", str(args.lr),
                    "--max-tokens", str(args.max_tokens), "--save-every", str(args.steps),
                    "--env-settings", json.dumps({"taskset": str(TASKS)})], check=True)
    lines = [json.loads(x) for x in (run / "rewards.jsonl").read_text().splitlines()]
    print("step  reward mean  std    n  step s")
    for x in lines:
        r = x["reward"]
        mean = "   -  " if r["mean"] is None else f"{r['mean']:.3f}"
        std = "  -  " if r["std"] is None else f"{r['std']:.3f}"
        print(f"{x['step']:4d}  {mean:>11}  {std:>5}  {r['n']:2d}  {x['step_s']:6.1f}")
    times = [x["step_s"] for x in lines]
    print(f"step time: mean {statistics.fmean(times):.1f} s, median "
          f"{statistics.median(times):.1f} s over {len(times)} steps")
    with served(run / "final") as url:
        evaluate(url, tasks, args.eval_rollouts, out / "after", args.max_tokens)
    compared = subprocess.run([str(BIN / "interplay"), "compare", str(out / "before"),
                               str(out / "after")], capture_output=True, text=True)
    print(compared.stdout)


if __name__ == "__main__":
    main()
