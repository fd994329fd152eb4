"""Wall time per Harbor trial: interplay's harbor env beside Harbor's own runner, on the same
tasks and the same machine.

Run by hand (needs the Docker daemon and base image, ``bash .ci/setup --test``, and Harbor 0.26
in a Python 3.12 venv with Docker Compose v2: plugins/interplay-harbor/README.md)::

    .venv/bin/python benchmarks/bench_harbor.py --harbor /path/venv312/bin/harbor \
        [--docker-config DIR] [-p TASKS] [--repeat 2]

For each agent (``oracle``: runs solution/solve.sh; ``nop``: does nothing) and each
concurrency (``-c 1``, ``-c 4``), the two runners in turn (Harbor, interplay, Harbor, ...),
after one unmeasured run of each that builds their images (both cache a task's image; a
measured run builds none). Printed per configuration: the run's wall time per trial (the
whole run over its trials), each runner's median seconds per trial of its phases as its
records split them (environment setup, agent, verifier; the trial as a whole), and the ratio
interplay / Harbor. Harbor's runner is ``harbor run -e docker`` with the overlay the
cross-check uses (host network, an init process); interplay's is ``interplay eval harbor``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from interplay_harbor.crosscheck import Side, differences, run_harbor, run_interplay
from interplay_harbor.env import examples

PHASES = ("environment_setup", "agent_execution", "verifier", "trial")


def medians(sides: list[Side]) -> dict[str, float]:
    return {p: statistics.median(t[p] for s in sides for t in s.phases.values())
            for p in PHASES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harbor", default=shutil.which("harbor") or "harbor")
    parser.add_argument("--docker-config", default=None)
    parser.add_argument("-p", "--path", type=Path, default=examples())
    parser.add_argument("--repeat", type=int, default=2, help="measured runs of each")
    parser.add_argument("-c", "--concurrency", type=int, action="append")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-harbor-"))
    run = 0

    def harbor(agent: str, c: int) -> Side:
        nonlocal run
        run += 1
        return run_harbor(args.harbor, args.path, agent, work / f"h{run}", concurrency=c,
                          docker_config=args.docker_config)

    def ours(agent: str, c: int) -> Side:
        nonlocal run
        run += 1
        return run_interplay(args.path, agent, work / f"i{run}", concurrency=c)

    harbor("oracle", 4)  # images built, not measured
    ours("oracle", 4)
    print(f"tasks: {args.path} ({sum(1 for _ in args.path.iterdir())} entries), "
          f"{args.repeat} measured runs of each")
    header = (f"{'agent':6} {'-c':>3} {'runner':9} {'wall/trial':>10} "
              + " ".join(f"{p[:11]:>11}" for p in PHASES))
    print(header)
    for agent in ("oracle", "nop"):
        for c in args.concurrency or [1, 4]:
            theirs, mine = [], []
            for _ in range(args.repeat):
                theirs.append(harbor(agent, c))
                mine.append(ours(agent, c))
            for t, m in zip(theirs, mine, strict=True):
                found = differences(t, m)
                if found:
                    print(f"  rewards differ: {found[0]}")
            n = len(theirs[0].rewards)
            walls = {"harbor": statistics.median(s.wall_s for s in theirs) / n,
                     "interplay": statistics.median(s.wall_s for s in mine) / n}
            phases = {"harbor": medians(theirs), "interplay": medians(mine)}
            for name in ("harbor", "interplay"):
                print(f"{agent:6} {c:>3} {name:9} {walls[name]:>9.2f}s "
                      + " ".join(f"{phases[name][p]:>10.2f}s" for p in PHASES))
            ratio = walls["interplay"] / walls["harbor"]
            print(f"{agent:6} {c:>3} {'ratio':9} {ratio:>10.2f} "
                  + " ".join(f"{phases['interplay'][p] / phases['harbor'][p]:>11.2f}"
                             if phases["harbor"][p] >= 0.01 else f"{'-':>11}" for p in PHASES))
    print(f"results: {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
