"""A month of always_on on the embedded model, both seats, with the clock running during turns.

Runs ``interplay eval always-on-month -n 1`` as a user runs it (no model configured: the
agent, the user and every seat on the embedded SmolLM2 server), with the agent's turns on a
running clock (``--rate``, 600 by default: a real second of a turn is ten simulated minutes),
and while it runs samples the resident memory of the embedded model's server and of the run
itself every ``--every`` seconds (``<output>.rss.jsonl``, one line a sample, written as it
goes). When the run ends it prints, from the episode's record:

* wall time, wakes, the end reason, each seat's model calls and tokens;
* events fired late against the scenario (every time trigger's fire at its mark, every read of
  hers when her schedule says; target 0), recounted as ``bench_always_on.py`` does;
* deliveries that reached the agent after their due minute, recounted from the timeline, and
  whether the run recorded each of them (``late_events``, each source's ``late``);
* the server's memory over the run: the first sample, the samples at each tenth of the run,
  the peak, and the growth from the end of the first tenth to the end.

Run by hand (it takes an hour or more on two cores; nothing is asserted):

    .venv/bin/python benchmarks/bench_always_on_embedded.py -o results/month-embedded
    .venv/bin/python benchmarks/bench_always_on_embedded.py --analyze results/month-embedded

``--budget-s`` sets the run's real-time budget (``env.always_on.budget_s``; default: the
step's own, 3600 s), ``--set KEY=VALUE`` passes more settings to ``interplay eval``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).parent))

from bench_always_on import fired_late, recount

from interplay.run import whole_record
from interplay.run.loader import env_class

MB = 1024 * 1024


def rss_path(output: Path) -> Path:
    return output.with_name(output.name + ".rss.jsonl")


def server_of(proc: psutil.Process) -> psutil.Process | None:
    """The embedded model's server among the run's processes (None before it starts)."""
    try:
        for child in proc.children(recursive=True):
            if "serve-local" in " ".join(child.cmdline()):
                return child
    except psutil.Error:
        return None
    return None


def sample(proc: psutil.Process, server: psutil.Process | None, t0: float) -> dict[str, Any]:
    row: dict[str, Any] = {"t_s": round(time.monotonic() - t0, 1)}
    try:
        row["run_rss_mb"] = round(proc.memory_info().rss / MB, 1)
    except psutil.Error:
        row["run_rss_mb"] = None
    if server is not None:
        try:
            row["server_rss_mb"] = round(server.memory_info().rss / MB, 1)
            row["server_cpu_s"] = round(sum(server.cpu_times()[:2]), 1)
        except psutil.Error:
            row["server_rss_mb"] = None
    return row


def run(args: argparse.Namespace) -> int:
    output = Path(args.output)
    cmd = [sys.executable, "-m", "interplay.cli", "eval", args.env, "-n", "1", "-o",
           str(output), "--quiet", "--set", f"env.always_on.rate={args.rate}"]
    if args.budget_s is not None:
        cmd += ["--set", f"env.always_on.budget_s={args.budget_s}"]
    for item in args.overrides:
        cmd += ["--set", item]
    output.parent.mkdir(parents=True, exist_ok=True)
    log = output.with_name(output.name + ".log")
    t0 = time.monotonic()
    with log.open("w") as out, rss_path(output).open("w") as rss:
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        proc = psutil.Process(child.pid)
        server = None
        while child.poll() is None:
            server = server or server_of(proc)
            rss.write(json.dumps(sample(proc, server, t0)) + "\n")
            rss.flush()
            try:
                child.wait(timeout=args.every)
            except subprocess.TimeoutExpired:
                pass
    print(json.dumps({"command": " ".join(cmd[2:]), "exit": child.returncode,
                      "wall_s": round(time.monotonic() - t0, 1), "log": str(log)}), flush=True)
    return analyze(output)


def seat_figures(record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for trace in record["traces"]:
        calls = trace.get("model_calls") or []
        usage = [c.get("usage") or {} for c in calls]
        out[trace.get("agent") or trace.get("seat")] = {
            "model_calls": len(calls),
            "failed_calls": sum(1 for c in calls if c.get("error_type")),
            "prompt_tokens": sum(u.get("prompt_tokens") or 0 for u in usage),
            "completion_tokens": sum(u.get("completion_tokens") or 0 for u in usage),
            "stop_condition": trace.get("stop_condition")}
    return out


def memory(rows: list[dict[str, Any]]) -> dict[str, Any]:
    served = [r for r in rows if r.get("server_rss_mb")]
    if not served:
        return {"samples": 0}
    n = len(served)
    tenths = [served[min(n - 1, math.ceil(n * k / 10) - 1)] for k in range(1, 11)]
    first_tenth = tenths[0]["server_rss_mb"]
    return {"samples": n, "every_s": round(served[1]["t_s"] - served[0]["t_s"], 1)
            if n > 1 else None,
            "first_mb": served[0]["server_rss_mb"],
            "by_tenth_mb": [(r["t_s"], r["server_rss_mb"]) for r in tenths],
            "peak_mb": max(r["server_rss_mb"] for r in served),
            "growth_after_first_tenth_mb": round(served[-1]["server_rss_mb"] - first_tenth, 1),
            "run_peak_mb": max((r.get("run_rss_mb") or 0) for r in rows)}


def analyze(output: Path) -> int:
    lines = (output / "episodes.jsonl").read_text().splitlines()
    if not lines:
        raise SystemExit(f"{output}: no episode recorded (see {output}.log)")
    record = whole_record(json.loads(lines[-1]), output)
    ao = record["results"]["always_on"]
    counts = ao["summary"]["counts"]
    timeline = ao["timeline"]
    scenario = env_class(record["info"]["env"]).source
    late = fired_late({**ao, "_user": record["results"]["user"]}, scenario)
    delivered = recount(timeline)
    flagged = sum(bool(s.get("late")) for e in timeline if e["kind"] == "wake"
                  for s in e["sources"])
    rows = [json.loads(x) for x in rss_path(output).read_text().splitlines() if x.strip()] \
        if rss_path(output).exists() else []
    figures = {
        "episode_wall_s": round(record["wall_s"], 1),
        "error_type": record.get("error_type"),
        "end_reason": ao["end_reason"], "end_note": ao["end_note"],
        "ended_at": ao["ended_at"], "overran_s": ao["overran_s"],
        "rate": ao["summary"]["settings"]["rate"],
        "budget_s": ao["summary"]["settings"]["budget_s"],
        "wakes": counts["wakes"], "nudges": counts["nudges"],
        "messages_sent": counts["messages_sent"], "user_reads": counts["user_reads"],
        "user_replies": counts["user_replies"], "tool_calls": counts["tool_calls"],
        "folded_wakes": counts["folded_wakes"],
        "seats": seat_figures(record),
        **late,
        **delivered,
        "late_recorded_by_the_run": counts["late_events"],
        "late_sources_flagged": flagged,
        "every_late_delivery_recorded": delivered["reached_late"] == counts["late_events"]
        == flagged,
        "turn_sim_min_mean": round(sum(w["end_t"] - w["t"] for w in timeline
                                       if w["kind"] == "wake") / 60
                                   / max(1, counts["wakes"]), 1),
        "wake_real_s_mean": round(sum(ao["real"]["wake_s"]) / max(1, counts["wakes"]), 1),
        "memory": memory(rows),
    }
    print(json.dumps(figures, indent=1), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default="results/month-embedded",
                        help="the run's results folder")
    parser.add_argument("--env", default="always-on-month")
    parser.add_argument("--rate", type=float, default=600.0,
                        help="simulated seconds per real second during the agent's turns")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="the run's real-time budget (default: the step's, 3600 s)")
    parser.add_argument("--every", type=float, default=15.0,
                        help="seconds between memory samples")
    parser.add_argument("--set", action="append", default=[], dest="overrides",
                        metavar="KEY=VALUE", help="more settings for interplay eval")
    parser.add_argument("--analyze", metavar="DIR",
                        help="only print the figures of a run this script made")
    args = parser.parse_args(argv)
    if args.analyze:
        return analyze(Path(args.analyze))
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
