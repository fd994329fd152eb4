"""Harbor's own runner as the judge: the same tasks run by ``harbor run -a oracle`` (and
``-a nop``) and by interplay's ``oracle`` (and ``nop``) harness must give the same reward dict,
task by task::

    interplay-harbor-crosscheck --harbor /path/to/venv312/bin/harbor [-p TASKS] [-c 4]

Harbor 0.26 needs Python 3.12 and Docker Compose v2 (``docker compose``; ``--docker-config``
names a folder whose ``cli-plugins/`` holds it). Each trial runs with a compose overlay that
gives its container the host's network namespace and an init process (``--extra-docker-compose``),
so compose makes no bridge network: interplay's containers have no network at all (the oracle
needs none). ``HARBOR_TELEMETRY=0`` keeps Harbor from its one outside call. Exit code 0 when
every task agrees, 1 when one differs (each difference printed), 2 when a runner fails.

This module owns the comparison and running both runners for it (the benchmark reuses it); it
must not change what either runner does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

#: The compose overlay every Harbor trial runs with (no bridge network, an init process).
OVERLAY = """services:
  main:
    network_mode: host
    init: true
    build:
      network: host
"""


@attrs.define
class Side:
    """One runner's results on the tasks: the reward dict of each task (None: no reward), its
    phases' seconds per task, and the wall time of the whole run."""

    rewards: dict[str, dict[str, float] | None]
    phases: dict[str, dict[str, float]]
    wall_s: float
    folder: Path


def run_harbor(harbor: str, tasks: Path, agent: str, out: Path, *, concurrency: int = 1,
               docker_config: str | None = None, timeout_s: float = 3600) -> Side:
    """``harbor run -p TASKS -a AGENT`` with the overlay, its job read back."""
    out.mkdir(parents=True, exist_ok=True)
    overlay = out / "overlay.yaml"
    overlay.write_text(OVERLAY)
    env = {**os.environ, "HARBOR_TELEMETRY": "0"}
    if docker_config:
        env["DOCKER_CONFIG"] = docker_config
    name = f"{agent}-{int(time.time() * 1000)}"
    t0 = time.monotonic()
    done = subprocess.run([harbor, "run", "-p", str(tasks), "-a", agent, "-e", "docker",
                           "--extra-docker-compose", str(overlay), "-n", str(concurrency),
                           "-o", str(out), "--job-name", name, "-q"],
                          env=env, capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    wall = time.monotonic() - t0
    job = out / name
    if done.returncode != 0 or not (job / "result.json").is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"harbor run -a {agent} failed (exit {done.returncode}): "
                           + " | ".join(tail))
    rewards: dict[str, dict[str, float] | None] = {}
    phases: dict[str, dict[str, float]] = {}
    for folder in sorted(p for p in job.iterdir() if (p / "result.json").is_file()):
        trial = json.loads((folder / "result.json").read_text())
        task = trial["task_name"]
        rewards[task] = (trial.get("verifier_result") or {}).get("rewards")
        phases[task] = {key: _seconds(trial.get(key)) for key in
                        ("environment_setup", "agent_execution", "verifier")}
        phases[task]["trial"] = _seconds(trial)
    return Side(rewards=rewards, phases=phases, wall_s=wall, folder=job)


def run_interplay(tasks: Path, harness: str, out: Path, *, concurrency: int = 1,
                  timeout_s: float = 3600) -> Side:
    """``interplay eval harbor --set env.path=TASKS`` with ``harness`` in the agent's seat."""
    interplay = shutil.which("interplay", path=str(Path(sys.executable).parent)) or "interplay"
    t0 = time.monotonic()
    done = subprocess.run([interplay, "eval", "harbor", "--set", f"env.path={tasks}",
                           "--set", f"seats.assistant.harness={harness}", "-c",
                           str(concurrency), "-o", str(out), "--quiet", "--no-report"],
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    wall = time.monotonic() - t0
    episodes = out / "episodes.jsonl"
    if done.returncode not in (0, 1) or not episodes.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"interplay eval harbor ({harness}) failed (exit "
                           f"{done.returncode}): " + " | ".join(tail))
    rewards: dict[str, dict[str, float] | None] = {}
    phases: dict[str, dict[str, float]] = {}
    for line in episodes.read_text().splitlines():
        record = json.loads(line)
        task = record["task"]["info"]["harbor"]["name"]
        harbor = (record.get("results") or {}).get("harbor") or {}
        rewards[task] = (harbor.get("verifier") or {}).get("rewards") \
            if record.get("error_type") is None else None
        timing = harbor.get("timing") or {}
        phases[task] = {key: float((timing.get(key) or {}).get("seconds", 0.0)) for key in
                        ("environment_setup", "agent_execution", "verifier")}
        phases[task]["trial"] = float(record.get("wall_s") or 0.0)
    return Side(rewards=rewards, phases=phases, wall_s=wall, folder=out)


def differences(harbor: Side, own: Side) -> list[str]:
    """Each task whose reward dicts differ (or that one runner lacks), in one line."""
    out = []
    for task in sorted(set(harbor.rewards) | set(own.rewards)):
        theirs, ours = harbor.rewards.get(task, "missing"), own.rewards.get(task, "missing")
        if theirs != ours:
            out.append(f"{task}: harbor {theirs} != interplay {ours}")
    return out


def _seconds(timing: Any) -> float:
    from datetime import datetime

    if not isinstance(timing, dict) or not timing.get("started_at") or \
            not timing.get("finished_at"):
        return 0.0
    start = datetime.fromisoformat(timing["started_at"])
    end = datetime.fromisoformat(timing["finished_at"])
    return (end - start).total_seconds()


def main(argv: list[str] | None = None) -> int:
    from interplay_harbor.env import examples

    parser = argparse.ArgumentParser(
        prog="interplay-harbor-crosscheck",
        description="The same Harbor tasks through Harbor's own runner and interplay's: the "
                    "same reward dict, task by task, for the oracle and nop agents.")
    parser.add_argument("--harbor", default=shutil.which("harbor") or "harbor",
                        help="Harbor 0.26's executable (in a Python 3.12 venv)")
    parser.add_argument("-p", "--path", type=Path, default=examples(),
                        help="a folder of Harbor tasks (default: this plugin's examples)")
    parser.add_argument("-a", "--agent", action="append", choices=["oracle", "nop"],
                        help="the agents to compare (default: oracle and nop)")
    parser.add_argument("-c", "--concurrency", type=int, default=2)
    parser.add_argument("--docker-config", default=os.environ.get("DOCKER_CONFIG"),
                        help="DOCKER_CONFIG for Harbor's `docker compose` (its cli-plugins/)")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="where both runners' results go (default: a temporary folder)")
    args = parser.parse_args(argv)
    work = args.output or Path(tempfile.mkdtemp(prefix="harbor-crosscheck-"))
    failed = False
    for agent in args.agent or ["oracle", "nop"]:
        try:
            theirs = run_harbor(args.harbor, args.path, agent, work / "harbor",
                                concurrency=args.concurrency,
                                docker_config=args.docker_config)
            ours = run_interplay(args.path, agent, work / f"interplay-{agent}",
                                 concurrency=args.concurrency)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"{agent}: {exc}", file=sys.stderr)
            return 2
        found = differences(theirs, ours)
        print(f"{agent}: {len(theirs.rewards)} tasks, "
              f"{len(theirs.rewards) - len(found)} the same reward dict "
              f"(harbor {theirs.wall_s:.1f} s, interplay {ours.wall_s:.1f} s)")
        for line in found:
            print(f"  {line}")
        failed |= bool(found)
    print(f"results: {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
