"""What interplay adds per sandboxed episode, beside bare ``docker run`` / ``docker exec``.

Run by hand: ``.venv/bin/python benchmarks/bench_sandbox.py [--episodes N] [--image NAME]``
(needs the Docker daemon and the base image: ``bash .ci/setup --test``).

One workload, two ways, the same image and commands, at ``-c 1`` and ``-c 8``:

- **bare**: the ``docker`` CLI as a script would drive it: ``docker run -d --network none``
  (kept alive by ``sleep infinity``), the task's file written in with ``docker exec -i``, five
  commands by ``docker exec``, the test by ``docker exec``, ``docker rm -f``;
- **interplay**: ``run_episode`` of an env whose task brings the same file as its workspace,
  whose step runs the same five commands through the episode's sandbox and whose verifier runs
  the same test there (the docker backend: the container, its workspace, the commands with
  their process tracking, the changes found at the end, the removal, the records).

Each configuration runs the two in turn, pair by pair (bare, interplay, bare, ...), so the
ratio holds when the machine's speed drifts. Printed: seconds per episode (median), the ratio
interplay / bare, and episodes per second at ``-c 8``.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import time
from typing import Any, ClassVar

from interplay import Env, EpisodeContext, Reward, SeatSpec, Step, Task, Verifier, Workspace
from interplay.run import RunResources, run_episode
from interplay.testing import ScriptedModel

IMAGE = "interplay-base:bookworm"
FILE = "def add(a, b):\n    return a + b\n"
COMMANDS = [
    ["sh", "-c", "true"],
    ["python3", "-c", "print(sum(range(1000)))"],
    ["sh", "-c", "ls -la /workspace"],
    ["git", "--version"],
    ["sh", "-c", "echo changed >> /workspace/notes.txt"],
]
TEST = ["python3", "-c", "import calc; assert calc.add(2, 3) == 5"]
LABEL = "interplay.bench"


class Commands(Step):
    name = "commands"

    async def run(self, ctx: EpisodeContext) -> None:
        sandbox = await ctx.sandbox()
        assert sandbox is not None
        for argv in COMMANDS:
            result = await sandbox.exec(argv)
            assert result.ok, (argv, result)


class Tested(Verifier):
    name = "tested"

    async def score(self, episode: Any, ctx: EpisodeContext) -> Reward:
        sandbox = await ctx.sandbox()
        assert sandbox is not None
        result = await sandbox.exec(TEST)
        return Reward(self.name, 1.0 if result.ok else 0.0)


class Bench(Env):
    name = "sandbox_bench"
    needs_sandbox = True
    seats: ClassVar = {"assistant": SeatSpec(harness="chat")}

    def tasks(self) -> list[Task]:
        return [Task(0, "bench", workspace=Workspace(files={"calc.py": FILE}))]

    def steps(self) -> list[Step]:
        return [Commands()]

    def verifiers(self) -> list[Verifier]:
        return [Tested()]


async def docker(*argv: str, stdin: bytes | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        "docker", *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        raise SystemExit(f"docker {argv[0]} failed: {err.decode().strip()}")
    return out.decode().strip()


async def bare_episode(image: str, tag: str) -> None:
    cid = await docker("run", "-d", "--network", "none", "--label", f"{LABEL}={tag}",
                       "-w", "/workspace", image, "sleep", "infinity")
    try:
        await docker("exec", "-i", cid, "sh", "-c",
                     "mkdir -p /workspace && cat > /workspace/calc.py", stdin=FILE.encode())
        for argv in COMMANDS:
            await docker("exec", "-w", "/workspace", cid, *argv)
        await docker("exec", "-w", "/workspace", cid, *TEST)
    finally:
        await docker("rm", "-f", cid)


async def interplay_episode(env: Bench, resources: RunResources) -> None:
    ep = await run_episode(env, env.tasks()[0], resources=resources)
    if ep.error is not None or ep.reward != 1.0:
        raise SystemExit(f"the sandboxed episode failed: {ep.error}")


async def batch(concurrency: int, episodes: int, one: Any) -> float:
    """Seconds for ``episodes`` episodes, ``concurrency`` at once."""
    gate = asyncio.Semaphore(concurrency)

    async def run() -> None:
        async with gate:
            await one()

    t0 = time.perf_counter()
    await asyncio.gather(*(run() for _ in range(episodes)))
    return time.perf_counter() - t0


async def measure(image: str, concurrency: int, episodes: int, rounds: int) -> None:
    tag = secrets.token_hex(4)
    env = Bench()
    with ScriptedModel(lambda r: "unused") as model:
        resources = RunResources(endpoint=model.endpoint,
                                 sandbox={"kind": "docker", "image": image})
        try:
            # One of each first, not counted: the image's layers and the imports warm.
            await bare_episode(image, tag)
            await interplay_episode(env, resources)
            bare, ours = [], []
            for _ in range(rounds):
                bare.append(await batch(concurrency, episodes,
                                        lambda: bare_episode(image, tag)))
                ours.append(await batch(concurrency, episodes,
                                        lambda: interplay_episode(env, resources)))
        finally:
            await resources.aclose()
    ratios = [o / b for o, b in zip(ours, bare, strict=True)]
    b, o = statistics.median(bare), statistics.median(ours)
    print(f"-c {concurrency}: {episodes} episodes x {rounds} rounds")
    print(f"  bare docker CLI   {b / episodes:7.3f} s/episode  {episodes / b:6.2f} episodes/s"
          f"  (rounds {min(bare):.2f}-{max(bare):.2f} s)")
    print(f"  interplay         {o / episodes:7.3f} s/episode  {episodes / o:6.2f} episodes/s"
          f"  (rounds {min(ours):.2f}-{max(ours):.2f} s)")
    print(f"  ratio interplay/bare, median of pairs: {statistics.median(ratios):.2f}"
          f"  (pairs {min(ratios):.2f}-{max(ratios):.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=IMAGE)
    parser.add_argument("--episodes", type=int, default=16, help="episodes per round at -c 8")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(measure(args.image, 1, 4, args.rounds))
    asyncio.run(measure(args.image, 8, args.episodes, args.rounds))


if __name__ == "__main__":
    main()
