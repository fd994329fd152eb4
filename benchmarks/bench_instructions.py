"""Instructions per model call and per episode, counted by valgrind: the framework's cost in
a unit the machine's noise does not move.

Wall-clock CPU figures on a shared 2-core machine wander by 10-20% between runs, too much to
tell a 3% change from none. This runs the instant-model workload of ``bench_run.py`` (the
user-sim relay, ``-c 64``) under ``valgrind --tool=callgrind`` three times (100 and 400
one-round episodes, 100 ten-round episodes; the model server runs outside valgrind) and
solves for the instructions one model call costs and those one episode costs besides. Two
runs of the same tree agree to within 0.5%.

Needs valgrind (Debian's ``valgrind``); takes about a minute on two cores:

    .venv/bin/python benchmarks/bench_instructions.py
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(rounds: int, episodes: int) -> None:
    """The measured process: a warm-up, then one run of ``episodes`` relays."""
    sys.path.insert(0, str(HERE))
    import bench_run

    from interplay import log
    from interplay._plumbing import aio
    from interplay.plugins import host as plugins

    async def main() -> None:
        work = Path(tempfile.mkdtemp(prefix="interplay-bench-instr-"))
        server = bench_run.Server(0.0, "fast")
        try:
            await bench_run.one_run(server, 4, 4, work)
            bench_run.ROUNDS = rounds
            await bench_run.one_run(server, episodes, 64, work)
        finally:
            server.stop()
            shutil.rmtree(work, ignore_errors=True)

    log.configure(level="warning")
    plugins.reset(load_entry_points=False)
    aio.run(main())


def instructions(rounds: int, episodes: int) -> int:
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         __file__, "--child", str(rounds), str(episodes)],
        capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"valgrind run failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip().splitlines()[-1:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed; apt-get install valgrind")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        small, large, long = (pool.submit(instructions, r, n)
                              for r, n in ((1, 100), (1, 400), (10, 100)))
        i_small, i_large, i_long = small.result(), large.result(), long.result()
    # A one-round relay makes 3 model calls, a ten-round one 21.
    short_episode = (i_large - i_small) / 300
    long_episode = short_episode + (i_long - i_small) / 100
    per_call = (long_episode - short_episode) / 18
    per_episode = short_episode - 3 * per_call
    print(json.dumps({"bench": "instructions", "per_model_call": round(per_call),
                      "per_episode_besides_calls": round(per_episode),
                      "per_10_round_episode": round(long_episode)}))


if __name__ == "__main__":
    main()
