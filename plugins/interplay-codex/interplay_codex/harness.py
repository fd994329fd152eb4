"""The ``codex`` harness: the OpenAI codex CLI as an agent, with native resume.

Each trace gets its own CODEX_HOME (a temp dir made on the first launch and kept in
``ctx.state``: :mod:`~interplay_codex.session`) and, unless ``workdir`` is configured, its own
working directory. The first segment is ``codex exec``; every continuation is ``codex exec
resume <thread_id>`` of that trace's own session, so codex keeps its history, tool state and
rollout file across turns. codex talks to the interception server through the Responses API
with the trace's secret, so every model request it makes is a recorded call on the trace. The
tools the env gives the seat reach codex as an MCP server, the run's tool gateway, named
``interplay`` (so the model sees them as ``mcp__interplay__<tool>``), through ``-c`` overrides
on every launch and resume (no file is written: :mod:`~interplay_codex.command_line`); each
call codex makes of one runs in-process and is recorded as the ``chat`` harness records it. A
segment's messages are read back from the last call recorded during it
(:mod:`~interplay_codex.events`). Timeouts and cancellation kill codex's whole process tree,
and when a segment ends, however it ends, every process codex started is killed (Linux:
:mod:`~interplay_codex.process_tree`), so no command the model ran outlives its segment;
``close`` removes the per-trace directories. codex is started with ``interplay.start_process``
and its commands carry the run's tag (``interplay.owner_tag``), so a run that is killed
outright takes them along too.

A codex that cannot run as configured (not found, not executable) is a config error; one the
system could not start for want of descriptors, processes or memory is tried again under the
seat's retry policy (its endpoint's ``max_retries`` and ``retry_max_s``), and if it still
cannot start the segment ends as a ``spawn_error``, as the ``command`` harness's program does.

This module owns a segment's course: start codex, talk to it, wait for it, keep what it did on
the trace. It must not reach into the interception server or the trace beyond what
``SegmentContext`` offers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from interplay import (
    AttemptFailure,
    Harness,
    InterplayError,
    Message,
    RetryPolicy,
    Segment,
    SegmentContext,
    Task,
    ToolRun,
    get_logger,
    not_runnable,
    other_version,
    refusal_reason,
    request_tool_names,
    start_process,
    text_prompt,
)
from interplay_codex import command_line as cl
from interplay_codex.command_line import CodexConfig
from interplay_codex.events import (
    CodexRun,
    last_line,
    mcp_line,
    read_event,
    segment_messages,
)
from interplay_codex.process_tree import kill_tagged, kill_tree
from interplay_codex.session import TraceState, close_state, session_of, trace_state

log = get_logger("interplay.codex")

#: Bytes of codex's stderr kept on the trace per segment.
KEEP_STDERR = 16 * 1024
#: codex prints one JSON event per line; a command's whole output can sit in one of them.
LINE_LIMIT = 64 * 1024 * 1024


class CodexHarness(Harness):
    """The codex CLI against the interception server; continues with codex exec resume."""

    name = "codex"
    Config: ClassVar[type] = CodexConfig

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._binary: str | None = None

    # -- the contract ----------------------------------------------------------------------------

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        """A fresh ``codex exec`` session on ``task``."""
        state = trace_state(ctx.state, self.config)
        instructions, prompt = text_prompt(task)
        if not prompt.strip():
            raise InterplayError("harness 'codex' needs a task with a non-empty prompt "
                                 "(or a chat opened by a user message)")
        state.instructions = instructions
        state.thread_id = None
        return await self._segment(ctx, state, [], prompt)

    async def resume(self, messages: Sequence[Message], ctx: SegmentContext) -> Segment:
        """``codex exec resume`` of this trace's session with the new user message.

        With no session yet (the first segment failed before codex started one) the whole
        conversation is launched fresh instead.
        """
        state = session_of(ctx.state)
        if state is None or state.thread_id is None:
            return await super().resume(messages, ctx)
        last = messages[-1] if messages else None
        if last is None or last.role != "user" or not last.text.strip():
            raise InterplayError("harness 'codex' continues a chat from a non-empty user "
                                 "message; the conversation must end with one")
        return await self._segment(ctx, state, ["resume", state.thread_id], last.text)

    async def close(self, ctx: SegmentContext) -> None:
        """Remove the trace's CODEX_HOME (and its own workdir)."""
        state = await close_state(ctx.state)
        if state is not None:
            log.debug("codex.closed", agent=ctx.trace.agent, segments=state.segments)

    def check(self) -> list[str]:
        """codex installed where the run starts (it says how to install it if not)."""
        try:
            self.binary()
        except InterplayError as exc:
            return [str(exc)]
        return []

    # -- running codex ---------------------------------------------------------------------------

    def binary(self) -> str:
        """The codex executable (resolved once); InterplayError saying how to install it.
        Another version than the pinned one is said once per executable."""
        if self._binary is None:
            self._binary = cl.find_codex(self.config.binary)
            other = other_version(self._binary, cl.CODEX_VERSION)
            if other is not None:
                # The version it is tested with, as the package to install.
                log.warning("codex.version_differs", version=other,
                            package=f"{cl.NPM_PACKAGE}@{cl.CODEX_VERSION}",
                            binary_path=self._binary)
        return self._binary

    async def _segment(self, ctx: SegmentContext, state: TraceState,
                       subcommand: Sequence[str], prompt: str) -> Segment:
        route = await ctx.route()
        tools = await ctx.tool_route()
        tag = uuid.uuid4().hex
        # The first time, `codex --version` runs (a Node start-up): not on the run's loop.
        binary = self._binary or await asyncio.to_thread(self.binary)

        def argv() -> list[str]:
            return cl.argv(binary, self.config, base_url=route.base_url,
                           model=ctx.client.endpoint.model, instructions=state.instructions,
                           subcommand=subcommand, run_tag=tag,
                           tools_url=None if tools is None else tools.url,
                           tool_timeout_s=max((t.timeout_s for t in ctx.tools), default=30.0))

        env = cl.environment(home=state.dirs.home, secret=route.secret, run_tag=tag,
                             tools_token=None if tools is None else tools.token)
        first_call = len(ctx.trace.model_calls)
        state.segments += 1
        t0 = time.monotonic()
        run = CodexRun()
        try:
            await self._run(argv, env, state.dirs.workdir, prompt.encode(), run, ctx)
        except asyncio.CancelledError:
            # The session's own timeout (or the run's end): codex is dead; keep what it did.
            run.cancelled = True
            self._finish(ctx, state, run, subcommand, first_call, prompt, t0)
            raise
        except AttemptFailure as failure:  # the system would not start codex
            run.errors.append(failure.message)
            messages = self._finish(ctx, state, run, subcommand, first_call, prompt, t0)
            return Segment(messages, stop_condition="error", error_type=failure.error_type,
                           error=failure.message)
        messages = self._finish(ctx, state, run, subcommand, first_call, prompt, t0)
        calls = ctx.trace.model_calls[first_call:]
        if run.timed_out:
            return Segment(messages, stop_condition="timeout", error_type="timeout",
                           error=f"codex exceeded {self.config.timeout_s:g} s")
        failed = next((c for c in reversed(calls) if c.error_type is not None), None)
        if run.exit_code != 0:
            if failed is not None:
                error = f"codex stopped on a failed model call: {failed.error}"
                if ctx.client.endpoint.is_local and "context window" in (failed.error or ""):
                    error += ("; codex's own prompt and tools outgrow the embedded model's "
                              "window: give the seat a model with a larger one (--base-url, "
                              "model.base_url)")
                return Segment(messages, stop_condition="error",
                               error_type=failed.error_type, error=error)
            return Segment(messages, stop_condition="error", error_type="codex_failed",
                           error=f"codex exited with code {run.exit_code}: "
                                 f"{last_line(run.stderr, run.errors)}")
        if tools is not None and calls and not any(
                name.startswith(cl.TOOL_PREFIX) for c in calls for name in request_tool_names(c)):
            # codex goes on without an MCP server it could not start (its stderr says why):
            # the model would be answered "unsupported call" for every tool of the env.
            return Segment(messages, stop_condition="error", error_type="tools_unreachable",
                           error=f"codex could not reach the env's tools: its MCP server "
                                 f"{cl.MCP_SERVER!r} (the tool gateway) did not start, and its "
                                 f"model was offered none of them: {mcp_line(run.stderr)}")
        if not messages or messages[-1].role != "assistant":
            return Segment(messages, stop_condition="error", error_type="codex_failed",
                           error="codex finished without a recorded model answer")
        return Segment(messages)

    def _finish(self, ctx: SegmentContext, state: TraceState, run: CodexRun,
                subcommand: Sequence[str], first_call: int, prompt: str,
                t0: float) -> list[Message]:
        """Keep what one codex run did on the trace; return the messages it added."""
        if run.thread_id is not None:
            state.thread_id = run.thread_id
        calls = ctx.trace.model_calls[first_call:]
        messages = segment_messages(calls, prompt)
        self._record(ctx, state, run, subcommand, len(calls), time.monotonic() - t0, messages)
        log.debug("codex.segment", agent=ctx.trace.agent, segment=state.segments,
                  resumed=bool(subcommand), exit_code=run.exit_code, calls=len(calls),
                  added=len(messages), timed_out=run.timed_out, cancelled=run.cancelled,
                  strays=run.strays)
        return messages

    async def _start(self, argv: Callable[[], list[str]], env: Mapping[str, str], cwd: Path,
                     ctx: SegmentContext) -> asyncio.subprocess.Process:
        """codex started, tried again under the seat's retry policy while the system is short
        of what it takes to start it; AttemptFailure (``spawn_error``) once that is spent.
        ``argv`` is made in each attempt: making it may start the run's reaper (for the
        run's tag, :func:`interplay.owner_tag`), which takes descriptors too."""

        async def attempt() -> asyncio.subprocess.Process:
            binary = self.binary()
            try:
                return await start_process(
                    *argv(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env, limit=LINE_LIMIT)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError):
                    raise InterplayError(f"harness 'codex': {binary!r} not found; "
                                         f"{cl.INSTALL_HINT}") from None
                if not_runnable(exc):
                    raise InterplayError(f"harness 'codex': cannot run {binary!r} "
                                         f"({exc.strerror or type(exc).__name__}); "
                                         f"{cl.INSTALL_HINT}") from None
                raise AttemptFailure("spawn_error", f"the system could not start codex "
                                     f"({refusal_reason(exc)})") from None

        return await RetryPolicy(ctx.client.endpoint).run(attempt, event="codex.start_retry")

    async def _run(self, argv: Callable[[], list[str]], env: Mapping[str, str], cwd: Path,
                   stdin: bytes, run: CodexRun, ctx: SegmentContext) -> None:
        proc = await self._start(argv, env, cwd, ctx)
        try:
            await asyncio.wait_for(self._talk(proc, stdin, run), self.config.timeout_s)
        except TimeoutError:
            run.timed_out = True
        finally:
            # Also on cancellation (the session's own timeout): nothing of codex outlives it.
            killed = proc.returncode is None
            if killed:
                await asyncio.to_thread(kill_tree, proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await asyncio.shield(proc.wait())
            run.exit_code = proc.returncode
            # Commands codex started in sessions of their own survive its exit (and its
            # process group's end); they carry the run's tag.
            tag = env.get(cl.RUN_VAR)
            if tag:
                run.strays = await asyncio.shield(asyncio.to_thread(kill_tagged, cl.RUN_VAR,
                                                                    tag))
            run.interrupted(killed)

    @staticmethod
    async def _talk(proc: asyncio.subprocess.Process, stdin: bytes, run: CodexRun) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

        async def feed() -> None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

        async def errors() -> None:
            assert proc.stderr is not None
            run.stderr = await proc.stderr.read()

        feeder = asyncio.ensure_future(feed())
        reader = asyncio.ensure_future(errors())
        try:
            async for line in proc.stdout:
                read_event(line, run)
            await proc.wait()
            await feeder
            await reader
        finally:
            for task in (feeder, reader):
                task.cancel()

    @staticmethod
    def _record(ctx: SegmentContext, state: TraceState, run: CodexRun,
                subcommand: Sequence[str], calls: int, wall_s: float,
                messages: list[Message]) -> None:
        info = ctx.trace.info.setdefault("codex", {"segments": []})
        info["thread_id"] = state.thread_id
        info["segments"].append({
            "command": "resume" if subcommand else "exec", "exit_code": run.exit_code,
            "timed_out": run.timed_out, "cancelled": run.cancelled, "thread_id": run.thread_id,
            "model_calls": calls, "usage": run.usage, "wall_s": round(wall_s, 3),
            "errors": run.errors, "warnings": run.warnings, "strays_killed": run.strays,
            "stderr": run.stderr[-KEEP_STDERR:].decode(errors="replace")})
        # codex ran these tools; pair them with the model's calls of the same kind, in order,
        # past those the gateway recorded already (env tools' calls it answered).
        recorded = {r.call_id for r in ctx.trace.tool_runs}
        ids = {name: [c.id for m in messages for c in m.tool_calls
                      if c.name == name and c.id not in recorded]
               for name in {item[1] for item in run.tool_items}}
        for item_id, called, name, duration, error_type in run.tool_items:
            pool = ids.get(called) or []
            call_id = pool.pop(0) if pool else item_id
            ctx.record_tool(ToolRun(call_id=call_id, name=name, duration_s=round(duration, 4),
                                    error_type=error_type))
