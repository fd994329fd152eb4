"""Harbor's two agents that need no model, as harnesses: ``oracle`` runs the task's
``solution/solve.sh`` in the sandbox (as Harbor's ``OracleAgent``: ``solution/`` copied to
``/solution``, ``solve.sh`` made executable and run with its output in
``/logs/agent/oracle.txt``, the task's ``[solution] env`` and ``DEBIAN_FRONTEND=noninteractive``),
and ``nop`` does nothing. A task author checks a task with them: the oracle should score 1 and
nop 0. Neither calls a model; what each did is kept on the trace (``trace.info["oracle"]``).

This module owns the two harnesses; it must not score.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from interplay import (
    Harness,
    InterplayError,
    Message,
    Segment,
    SegmentContext,
    Task,
)
from interplay_harbor.tasks import AGENT_LOGS, SOLUTION_DIR, read_task

#: Bytes of the solution's output kept on the trace.
KEEP_BYTES = 16 * 1024


def _harbor_path(task: Task, harness: str) -> Path:
    harbor = task.info.get("harbor")
    if not isinstance(harbor, dict) or "path" not in harbor:
        raise InterplayError(f"harness {harness!r} plays Harbor's agent of that name: it runs "
                             f"in the harbor env (a task with a Harbor task folder)")
    return Path(harbor["path"])


class OracleHarness(Harness):
    """Runs the Harbor task's solution/solve.sh in the episode's sandbox."""

    name = "oracle"
    accepts_messages = False

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        folder = _harbor_path(ctx.task, self.name)
        harbor = read_task(folder)
        solve = harbor.solution / "solve.sh"
        if not solve.is_file():
            raise InterplayError(f"{folder}: no solution/solve.sh for the oracle to run")
        sandbox = await ctx.sandbox()
        if sandbox is None:
            raise InterplayError("harness 'oracle' runs the solution in the episode's sandbox; "
                                 "the run gave it none")
        await sandbox.exec(["mkdir", "-p", SOLUTION_DIR, AGENT_LOGS], user="root")
        await sandbox.put(harbor.solution, SOLUTION_DIR)
        await sandbox.exec(["chmod", "+x", f"{SOLUTION_DIR}/solve.sh"], user="root")
        command = f"({SOLUTION_DIR}/solve.sh) > {AGENT_LOGS}/oracle.txt 2>&1"
        result = await sandbox.exec(
            ["bash", "-c", command], timeout_s=ctx.timeout_s,
            env={**harbor.solution_env, "DEBIAN_FRONTEND": "noninteractive"},
            user=harbor.agent_user)
        try:
            output = (await sandbox.read_file(f"{AGENT_LOGS}/oracle.txt")).decode(
                errors="replace")
        except FileNotFoundError:
            output = ""
        ctx.trace.info["oracle"] = {"command": command, "exit_code": result.exit_code,
                                    "timed_out": result.timed_out,
                                    "duration_s": round(result.duration_s, 3),
                                    "output": output[-KEEP_BYTES:]}
        # Harbor goes on to the tests whatever solve.sh exited with (it notes the code).
        return Segment([Message("assistant", f"ran solution/solve.sh: {result.ending()}")])

    async def resume(self, messages: Sequence[Message], ctx: SegmentContext) -> Segment:
        # The solution ran once; a user's later line changes nothing.
        return Segment([Message("assistant", "the solution has run")])


class NopHarness(Harness):
    """Does nothing: the tests score the environment as the task left it."""

    name = "nop"

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        return Segment([Message("assistant", "")])

    async def resume(self, messages: Sequence[Message], ctx: SegmentContext) -> Segment:
        return Segment([Message("assistant", "")])


HARNESSES: tuple[type[Harness], ...] = (OracleHarness, NopHarness)
