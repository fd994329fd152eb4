"""tau2-bench through interplay beside tau2's own runner: the same tasks, the same scripted
model, the same concurrency.

Run by hand: ``.venv/bin/python benchmarks/bench_tau2.py [--domain mock|retail|airline]
[-n TASKS] [-r TRIALS] [-c CONCURRENCY]`` (needs ``pip install -e plugins/interplay-tau2``).

The model is the cross-check's (:mod:`interplay_tau2.scripted`: each task played through
from its expected actions, on both seats) served from a process of its own, which counts the
calls. Each runner runs in a process of its own: tau2's as its ``tau2 run`` does
(``tau2.run.run_domain``, trials in threads, the results file rewritten after each
simulation), interplay's as ``interplay eval`` (``interplay.cli.main``, the episodes file,
no report page). In each, the CPU is read after the imports (tau2's modules, and for
interplay its own and the plugin's) and again at the end, with that of any child process; a
figure per model call is the run's CPU (imports excluded) over the calls the model served.
Both runners score every conversation with tau2's evaluator, which replays the database
(0.2-0.75 s of CPU per retail or airline simulation, ~1 ms on mock): the CPU spent in it is
summed in each run (per thread) and the figure is shown without it too (``scoring
excluded``). A figure per call is marginal: the difference between a run of R trials and one
of 4R, over the difference in calls, so what a run costs once (loading the plugins, the
tasks, the first episode's warm-up) is left out, and shown as ``fixed``.

Target: interplay at most 0.05 of tau2's CPU per model call.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from interplay_tau2 import scripted

#: Each domain's tasks to play (test split where tau2 has one), each fully played through.
DOMAINS = {"mock": ["create_task_1", "create_task_1_nl_eval", "update_task_1",
                    "update_task_with_initialization_data",
                    "update_task_with_initialization_actions", "impossible_task_1"],
           "retail": ["5", "9", "17", "18", "26", "27", "32"],
           "airline": ["2", "8", "13", "16", "18", "19", "22", "24"]}


def cpu_s() -> float:
    """This process's CPU and that of the children it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Scoring:
    """CPU spent in tau2's evaluator (``evaluate_simulation``), summed over the threads that
    call it: both runners score with it (tau2's in its trial threads, interplay's verifier in
    a worker thread)."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self._lock = threading.Lock()

    def install(self) -> None:
        import tau2.evaluator.evaluator
        import tau2.run

        real = tau2.evaluator.evaluator.evaluate_simulation

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return real(*args, **kwargs)
            finally:
                with self._lock:
                    self.cpu_s += time.thread_time() - t0

        tau2.evaluator.evaluator.evaluate_simulation = timed
        tau2.run.evaluate_simulation = timed


def serve(domain: str, task_ids: list[str]) -> None:
    """The scripted model: prints its URL, answers ``count`` lines on stdin with the calls so
    far, stops at end of input."""
    from interplay.testing import ScriptedModel

    book, _ = scripted.script_book(domain, dict.fromkeys(task_ids, "complete"))
    with ScriptedModel(book) as model:
        print(model.base_url, flush=True)
        for line in sys.stdin:
            if line.strip() == "count":
                print(book.user_calls + book.agent_calls, book.misses, flush=True)


def run_tau2(domain: str, task_ids: list[str], url: str, trials: int, concurrency: int,
             out: str) -> dict[str, Any]:
    os.environ.update(scripted.OFFLINE_ENVIRON)
    import tau2.run
    from tau2.data_model.simulation import RunConfig

    scoring = Scoring()
    scoring.install()
    args = {"api_base": url, "temperature": 0.0}
    config = RunConfig(domain=domain, task_ids=task_ids, agent="llm_agent",
                       llm_agent="openai/scripted", llm_args_agent=dict(args),
                       user="user_simulator", llm_user="openai/scripted",
                       llm_args_user=dict(args), llm_args_judge={}, num_trials=trials,
                       max_steps=100, max_concurrency=concurrency, results_dir=out,
                       save_to="bench", log_level="ERROR")
    cpu0, t0 = cpu_s(), time.monotonic()
    results = tau2.run.run_domain(config)
    cpu1, t1 = cpu_s(), time.monotonic()
    rewards = [s.reward_info.reward for s in results.simulations]
    return {"import_cpu_s": cpu0, "run_cpu_s": cpu1 - cpu0, "wall_s": t1 - t0,
            "episodes": len(results.simulations), "scoring_cpu_s": scoring.cpu_s,
            "mean_reward": sum(rewards) / len(rewards)}


def run_interplay(domain: str, task_ids: list[str], url: str, trials: int,
                  concurrency: int, out: str) -> dict[str, Any]:
    from interplay_tau2 import domains

    import interplay.cli

    domains.tau2()  # tau2's modules, imported as the first episode would
    scoring = Scoring()
    scoring.install()
    argv = ["eval", f"tau2-{domain}", "--base-url", url, "-m", "scripted", "-r", str(trials),
            "-c", str(concurrency), "-o", out, "--no-report", "--quiet",
            "--set", f"env.task_ids={json.dumps(task_ids)}", "--set", "env.max_steps=100"]
    for seat in ("assistant", "user"):
        argv += ["--set", f"seats.{seat}.sampling.temperature=0.0",
                 "--set", f"seats.{seat}.harness_config.max_turns=200"]
    cpu0, t0 = cpu_s(), time.monotonic()
    code = interplay.cli.main(argv)
    cpu1, t1 = cpu_s(), time.monotonic()
    if code:
        raise SystemExit(f"interplay eval exited {code}")
    rewards = []
    with open(os.path.join(out, "episodes.jsonl")) as f:
        for line in f:
            rewards.append(json.loads(line).get("reward") or 0.0)
    return {"import_cpu_s": cpu0, "run_cpu_s": cpu1 - cpu0, "wall_s": t1 - t0,
            "episodes": len(rewards), "scoring_cpu_s": scoring.cpu_s,
            "mean_reward": sum(rewards) / len(rewards)}


def side(which: str, domain: str, task_ids: list[str], url: str, trials: int,
         concurrency: int, server: subprocess.Popen[str]) -> dict[str, Any]:
    def calls() -> int:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write("count\n")
        server.stdin.flush()
        n, misses = map(int, server.stdout.readline().split())
        if misses:
            raise SystemExit(f"the scripted model answered {misses} requests with no script")
        return n

    before = calls()
    with tempfile.TemporaryDirectory(prefix="bench-tau2-") as tmp:
        proc = subprocess.run(
            [sys.executable, __file__, f"--{which}", domain, url, str(trials),
             str(concurrency), os.path.join(tmp, "out"), *task_ids],
            capture_output=True, text=True, env={**os.environ, **scripted.OFFLINE_ENVIRON})
    if proc.returncode:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"{which} failed")
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    figures["calls"] = calls() - before
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="mock", choices=sorted(DOMAINS))
    parser.add_argument("-n", type=int, default=None, help="tasks (default: all listed)")
    parser.add_argument("-r", type=int, default=2,
                        help="trials of each task in the small run; the large run has 4x")
    parser.add_argument("-c", type=int, default=4, help="episodes at once")
    args = parser.parse_args()
    task_ids = DOMAINS[args.domain][:args.n]
    server = subprocess.Popen([sys.executable, __file__, "--serve", args.domain, *task_ids],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **scripted.OFFLINE_ENVIRON})
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    loads = [os.getloadavg()[0]]
    try:
        runs = {which: [side(which, args.domain, task_ids, url, trials, args.c, server)
                        for trials in (args.r, 4 * args.r)]
                for which in ("tau2", "interplay")}
        loads.append(os.getloadavg()[0])
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait()
    print(f"{args.domain}: {len(task_ids)} tasks x {args.r} and {4 * args.r} trials, "
          f"-c {args.c}; load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'':10} {'episodes':>8} {'calls':>6} {'reward':>6} {'ep/s':>6} {'imports':>8} "
          f"{'run CPU':>8} {'scoring':>8}")
    marginal = {}
    for which, (small, large) in runs.items():
        scoring = [small["scoring_cpu_s"], large["scoring_cpu_s"]]
        calls = large["calls"] - small["calls"]
        per_call = (large["run_cpu_s"] - small["run_cpu_s"]) / calls
        excl = (large["run_cpu_s"] - scoring[1] - small["run_cpu_s"] + scoring[0]) / calls
        fixed = small["run_cpu_s"] - per_call * small["calls"]
        marginal[which] = (per_call, excl)
        for r in (small, large):
            print(f"{which:10} {r['episodes']:>8} {r['calls']:>6} {r['mean_reward']:>6.2f} "
                  f"{r['episodes'] / r['wall_s']:>6.2f} {r['import_cpu_s']:>7.2f}s "
                  f"{r['run_cpu_s']:>7.2f}s {r['scoring_cpu_s']:>7.2f}s")
        print(f"{which:10} marginal: {per_call * 1000:.2f} ms per call ({excl * 1000:.2f} ms "
              f"scoring excluded), fixed {fixed:.2f} s per run; tau2's evaluator in it "
              f"{scoring[1] / large['episodes'] * 1000:.1f} ms per simulation")
    ratio = marginal["interplay"][0] / marginal["tau2"][0]
    ratio_ex = marginal["interplay"][1] / marginal["tau2"][1]
    print(f"interplay / tau2, CPU per model call: {ratio:.3f} ({ratio_ex:.3f} scoring "
          f"excluded); target at most 0.05")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) > 1 and sys.argv[1] in ("--tau2", "--interplay"):
        which, domain, url, trials, concurrency, out, *ids = sys.argv[1:]
        run = run_tau2 if which == "--tau2" else run_interplay
        print(json.dumps(run(domain, ids, url, int(trials), int(concurrency), out)))
    else:
        main()
