"""The way mini-swe-agent's commands reach the episode's sandbox: a Unix socket served by the
harness in interplay's process for one segment.

mini-swe-agent's loop runs on this machine (it holds the trace's key to the model boundary);
its environment (:mod:`interplay_mini_swe_agent.environment`) sends each bash command here,
one connection each: a JSON line ``{"command", "cwd", "env", "timeout", "call_id"}``,
answered by one JSON object in the shape mini-swe-agent's environments return (``output``,
``returncode``, ``exception_info``), or ``{"error": ...}`` when the sandbox cannot run
anything any more. Each command runs through ``Sandbox.exec`` under ``shell`` (``bash -c``
by default) with its stderr on its stdout, as mini-swe-agent's own environments merge them;
what each did (not what it said) is kept for the trace.

The socket lives in a folder of the trace's own, which only interplay's user can open; a
command inside a container cannot reach it. Closing the bridge stops the commands still
running (the sandbox ends everything they started).

This module owns the socket and one command's run; it must not start mini-swe-agent or read
its trajectory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Sequence
from typing import Any

import attrs

from interplay import ErrorType, Sandbox, SandboxError, get_logger

log = get_logger("interplay_mini_swe_agent.bridge")

#: The largest request line taken (a command that writes a whole file in a here-document).
REQUEST_BYTES = 16 * 1024 * 1024
#: Runs the shell with its stderr on its stdout: one stream, in the order it was written.
_MERGED = ("sh", "-c", 'exec "$@" 2>&1', "sh")


@attrs.define
class CommandRun:
    """What one command the agent ran did (its output is in the conversation)."""

    call_id: str | None
    exit_code: int | None
    timed_out: bool
    duration_s: float
    #: Bytes of its output left out past the bound.
    output_cut: int = 0
    #: Why the sandbox stopped it other than its time limit (its wall time, its disk).
    stopped: str | None = None


class CommandBridge:
    """A Unix socket at ``path`` on which the commands of one segment are run in
    ``sandbox``; an async context manager (served on entering, closed on leaving)."""

    def __init__(self, sandbox: Sandbox, path: str, *, shell: Sequence[str],
                 output_bytes: int) -> None:
        self.sandbox = sandbox
        self.path = path
        self.shell = tuple(shell)
        self.output_bytes = output_bytes
        #: The commands run, in the order they ended.
        self.runs: list[CommandRun] = []
        #: Why the sandbox could not run a command, the first time it could not.
        self.failure: str | None = None
        self._server: asyncio.AbstractServer | None = None
        self._running: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> CommandBridge:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._server = await asyncio.start_unix_server(self._serve, path=self.path,
                                                       limit=REQUEST_BYTES)
        os.chmod(self.path, 0o600)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop serving, and stop the commands still running."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._running):
            task.cancel()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._running.add(task)
        try:
            try:
                request = json.loads(await reader.readline())
                answer = await self.run(request)
            except (ValueError, TypeError, KeyError, asyncio.LimitOverrunError) as exc:
                answer = {"error": f"a request the bridge could not read ({type(exc).__name__})"}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # mini-swe-agent went away (killed at its time limit): nothing to answer
        finally:
            writer.close()
            if task is not None:
                self._running.discard(task)

    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run one request's command in the sandbox; mini-swe-agent's answer to it."""
        command = str(request["command"])
        timeout = float(request.get("timeout") or 60)
        env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
        call_id = request.get("call_id")
        t0 = time.monotonic()
        try:
            result = await self.sandbox.exec([*_MERGED, *self.shell, command],
                                             cwd=request.get("cwd") or None, env=env,
                                             timeout_s=timeout, output_bytes=self.output_bytes)
        except SandboxError as exc:
            self.failure = self.failure or str(exc)
            log.warning("mini_swe_agent.command_failed", error_type=ErrorType.SANDBOX_ERROR,
                        command_len=len(command))
            return {"error": str(exc)}
        run = CommandRun(call_id=None if call_id is None else str(call_id),
                         exit_code=result.exit_code, timed_out=result.timed_out,
                         duration_s=round(time.monotonic() - t0, 4),
                         output_cut=result.stdout_cut + result.stderr_cut,
                         stopped=result.stopped)
        self.runs.append(run)
        log.debug("mini_swe_agent.command", exit_code=result.exit_code,
                  timed_out=result.timed_out, command_len=len(command),
                  output_len=len(result.stdout) + len(result.stderr),
                  duration_s=run.duration_s)
        output = result.output()
        if result.timed_out:
            # The words mini-swe-agent's own environments use (subprocess's TimeoutExpired).
            return {"output": output, "returncode": -1,
                    "exception_info": f"An error occurred while executing the command: "
                                      f"Command '{command}' timed out after {timeout:g} "
                                      f"seconds",
                    "extra": {"exception_type": "TimeoutExpired"}}
        if result.exit_code is None:
            return {"output": output, "returncode": -1,
                    "exception_info": f"The command was stopped: {result.stopped}",
                    "extra": {"exception_type": "Stopped"}}
        return {"output": output, "returncode": result.exit_code, "exception_info": ""}
