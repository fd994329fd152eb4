"""The ``claude-code`` harness: Anthropic's Claude Code CLI as an agent, with native resume.

Each trace gets its own config home (a temp dir made on the first launch and kept in
``ctx.state``: :mod:`~interplay_claude_code.session`) and, unless ``workdir`` is configured, its
own working directory. The first segment starts Claude Code with a session id interplay chose;
every continuation resumes that session (``--resume``), so Claude Code keeps its own history,
tool calls and results across turns and sends them to the model itself. Claude Code talks to
the interception server's Messages route with the trace's secret, so every model request it
makes is a recorded call on the trace. The tools the env gives the seat reach it as an MCP
server, the run's tool gateway, named ``interplay`` (the model sees them as
``mcp__interplay__<tool>``); each call of one runs in-process and is recorded as the ``chat``
harness records it, under the model's own call id. A segment's messages are read back from the
last call recorded during it (:mod:`~interplay_claude_code.events`).

Claude Code runs through ``interplay.run_program``: in a process group of its own, with a
per-segment tag its commands inherit; when the segment ends (however it ends: an exit, its
timeout, the seat's timeout) the group and every tagged process are killed, and the ones left
behind after an exit are counted on the trace (``strays_killed``). Started through
``interplay.start_process``, it and its commands end with the run too, ``kill -9`` of the run
included. ``close`` removes the per-trace directories.

A Claude Code that cannot run as configured (not found, not executable) is a config error; one
of another version than the pinned one is said once, when it first starts; one the system could
not start for want of descriptors, processes or memory is tried again under the seat's retry
policy, and if it still cannot start the segment ends as a ``spawn_error``.

This module owns a segment's course: start Claude Code, wait for it, keep what it did on the
trace. It must not reach into the interception server or the trace beyond what
``SegmentContext`` offers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from interplay import (
    AttemptFailure,
    Harness,
    InterplayError,
    Message,
    ProgramRun,
    RetryPolicy,
    Segment,
    SegmentContext,
    Task,
    ToolRun,
    get_logger,
    not_runnable,
    other_version,
    refusal_reason,
    run_program,
    text_prompt,
)
from interplay_claude_code import command_line as cl
from interplay_claude_code.command_line import ClaudeCodeConfig
from interplay_claude_code.events import (
    ClaudeRun,
    duration_s,
    last_line,
    read_events,
    segment_messages,
)
from interplay_claude_code.session import (
    TraceState,
    close_state,
    new_session_id,
    session_of,
    trace_state,
)

log = get_logger("interplay.claude_code")

#: Bytes of Claude Code's stderr kept on the trace per segment.
KEEP_STDERR = 16 * 1024


class ClaudeCodeHarness(Harness):
    """The Claude Code CLI against the interception server; continues with ``--resume``."""

    name = "claude-code"
    Config: ClassVar[type] = ClaudeCodeConfig

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._binary: str | None = None

    # -- the contract ----------------------------------------------------------------------------

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        """A new Claude Code session on ``task``."""
        state = trace_state(ctx.state, self.config)
        system, prompt = text_prompt(task)
        if not prompt.strip():
            raise InterplayError("harness 'claude-code' needs a task with a non-empty prompt "
                                 "(or a chat opened by a user message)")
        if state.started:  # a relaunch on the whole conversation: a session of its own
            state.session_id, state.started = new_session_id(), False
        state.system_prompt = system
        return await self._segment(ctx, state, prompt)

    async def resume(self, messages: Sequence[Message], ctx: SegmentContext) -> Segment:
        """``--resume`` of this trace's session with the new user message.

        With no session yet (the first segment failed before Claude Code started one) the
        whole conversation is launched afresh instead.
        """
        state = session_of(ctx.state)
        if state is None:
            return await super().resume(messages, ctx)
        last = messages[-1] if messages else None
        if last is None or last.role != "user" or not last.text.strip():
            raise InterplayError("harness 'claude-code' continues a chat from a non-empty "
                                 "user message; the conversation must end with one")
        return await self._segment(ctx, state, last.text)

    async def close(self, ctx: SegmentContext) -> None:
        """Remove the trace's config home (and its own workdir)."""
        state = await close_state(ctx.state)
        if state is not None:
            log.debug("claude_code.closed", agent=ctx.trace.agent, segments=state.segments)

    def check(self) -> list[str]:
        """Claude Code installed where the run starts (it says how to install it if not); a
        version other than the pinned one is said then."""
        try:
            self.binary()
        except InterplayError as exc:
            return [str(exc)]
        return []

    # -- running Claude Code ---------------------------------------------------------------------

    def binary(self) -> str:
        """The ``claude`` executable (resolved once); InterplayError saying how to install
        it. Another version than the pinned one is said once per executable."""
        if self._binary is None:
            self._binary = cl.find_claude(self.config.binary)
            other = other_version(self._binary, cl.CLAUDE_CODE_VERSION)
            if other is not None:
                # The version it is tested with, as the package to install.
                log.warning("claude_code.version_differs", version=other,
                            package=f"{cl.NPM_PACKAGE}@{cl.CLAUDE_CODE_VERSION}",
                            binary_path=self._binary)
        return self._binary

    async def _segment(self, ctx: SegmentContext, state: TraceState, prompt: str) -> Segment:
        # The first time, `claude --version` runs (a Node start-up): not on the run's loop.
        binary = self._binary or await asyncio.to_thread(self.binary)
        route = await ctx.route()
        tools = await ctx.tool_route()
        resume = state.started
        system_file = None
        if state.system_prompt:
            system_file = cl.write_private(state.dirs.root / "system-prompt.md",
                                           state.system_prompt)
        mcp_file = None
        tool_timeout_s = max((t.timeout_s for t in ctx.tools), default=30.0)
        if tools is not None:
            mcp_file = cl.write_private(state.dirs.root / "mcp.json", cl.dump_json(
                cl.mcp_config(tools.url, tool_timeout_s)))
        argv = cl.argv(binary, self.config, model=ctx.client.endpoint.model,
                       session_id=state.session_id, resume=resume,
                       system_prompt_file=system_file, mcp_config_file=mcp_file)
        env = cl.environment(home=state.dirs.home, base_url=route.base_url, secret=route.secret,
                             model=ctx.client.endpoint.model,
                             wait_s=max(ctx.timeout_s, self.config.timeout_s),
                             tools_token=None if tools is None else tools.token,
                             tool_timeout_s=tool_timeout_s,
                             max_retries=self.config.max_retries,
                             # Claude Code always sends a limit, which the endpoint's
                             # sampling would sit under: the seat's or the endpoint's, told
                             # to it, else the harness's.
                             max_output_tokens=cl.seat_max_tokens(ctx.sampling)
                             or cl.seat_max_tokens(ctx.client.endpoint.sampling)
                             or self.config.max_output_tokens)
        first_call = len(ctx.trace.model_calls)
        state.segments += 1
        state.started = True  # from here on the session may exist: the next turn resumes it
        t0 = time.monotonic()
        run = ClaudeRun(session_id=state.session_id)
        try:
            program = await self._run(argv, env, state.dirs.workdir, prompt, ctx)
        except asyncio.CancelledError:
            # The seat's own timeout (or the run's end): Claude Code is dead; keep what it did.
            run.cancelled = True
            self._finish(ctx, state, run, resume, first_call, prompt, t0)
            raise
        except AttemptFailure as failure:  # the system would not start Claude Code
            state.started = resume
            run.result = {"is_error": True}
            run.text = failure.message
            messages = self._finish(ctx, state, run, resume, first_call, prompt, t0)
            return Segment(messages, stop_condition="error", error_type=failure.error_type,
                           error=failure.message)
        run.exit_code, run.timed_out, run.strays = program.exit_code, program.timed_out, \
            program.strays
        run.stderr = program.stderr
        read_events(program.stdout, run)
        messages = self._finish(ctx, state, run, resume, first_call, prompt, t0)
        return self._outcome(ctx, run, messages, first_call, tools is not None)

    def _outcome(self, ctx: SegmentContext, run: ClaudeRun, messages: list[Message],
                 first_call: int, has_tools: bool) -> Segment:
        """The segment a finished Claude Code run amounts to."""
        if run.timed_out:
            return Segment(messages, stop_condition="timeout", error_type="timeout",
                           error=f"Claude Code exceeded {self.config.timeout_s:g} s")
        status = run.mcp_servers.get(cl.MCP_SERVER)
        if has_tools and status != "connected":
            return Segment(messages, stop_condition="error", error_type="tools_unreachable",
                           error=f"Claude Code could not reach the env's tools: its MCP server "
                                 f"{cl.MCP_SERVER!r} is {status or 'missing'} (the tool "
                                 f"gateway); see the trace's info.claude_code for its stderr")
        calls = ctx.trace.model_calls[first_call:]
        failed = next((c for c in reversed(calls) if c.error_type is not None), None)
        if run.result.get("subtype") == "error_max_turns":
            return Segment(messages, stop_condition="max_turns")
        if run.failed:
            if failed is not None:
                return Segment(messages, stop_condition="error", error_type=failed.error_type,
                               error=f"Claude Code stopped on a failed model call: "
                                     f"{failed.error}")
            return Segment(messages, stop_condition="error", error_type="claude_code_failed",
                           error=f"Claude Code exited with code {run.exit_code}: "
                                 f"{last_line(run.stderr, run)}")
        if not messages or messages[-1].role != "assistant":
            return Segment(messages, stop_condition="error", error_type="claude_code_failed",
                           error="Claude Code finished without a recorded model answer")
        return Segment(messages)

    def _finish(self, ctx: SegmentContext, state: TraceState, run: ClaudeRun, resume: bool,
                first_call: int, prompt: str, t0: float) -> list[Message]:
        """Keep what one Claude Code run did on the trace; return the messages it added."""
        calls = ctx.trace.model_calls[first_call:]
        messages = segment_messages(calls, prompt)
        self._record(ctx, state, run, resume, len(calls), time.monotonic() - t0)
        log.debug("claude_code.segment", agent=ctx.trace.agent, segment=state.segments,
                  resumed=resume, exit_code=run.exit_code, calls=len(calls),
                  added=len(messages), timed_out=run.timed_out, cancelled=run.cancelled,
                  strays=run.strays)
        return messages

    async def _run(self, argv: list[str], env: dict[str, str], cwd: Path, prompt: str,
                   ctx: SegmentContext) -> ProgramRun:
        """Claude Code run to its end (or its timeout), tried again under the seat's retry
        policy while the system is short of what it takes to start it; AttemptFailure
        (``spawn_error``) once that is spent."""

        async def attempt() -> ProgramRun:
            try:
                return await run_program(argv, stdin=prompt.encode(),
                                         timeout_s=self.config.timeout_s, cwd=str(cwd),
                                         env=env, keep_stderr=KEEP_STDERR)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) or not_runnable(exc):
                    raise InterplayError(f"harness 'claude-code': cannot run {argv[0]!r} "
                                         f"({exc.strerror or type(exc).__name__}); "
                                         f"{cl.INSTALL_HINT}") from None
                raise AttemptFailure("spawn_error", f"the system could not start Claude Code "
                                     f"({refusal_reason(exc)})") from None

        return await RetryPolicy(ctx.client.endpoint).run(attempt,
                                                           event="claude_code.start_retry")

    @staticmethod
    def _record(ctx: SegmentContext, state: TraceState, run: ClaudeRun, resume: bool,
                calls: int, wall_s: float) -> None:
        info = ctx.trace.info.setdefault("claude_code", {"segments": []})
        info["session_id"] = state.session_id
        info["segments"].append({
            "command": "resume" if resume else "launch", "exit_code": run.exit_code,
            "timed_out": run.timed_out, "cancelled": run.cancelled,
            "session_id": run.session_id, "model_calls": calls, "wall_s": round(wall_s, 3),
            "mcp_servers": run.mcp_servers, "result": run.result, "text": run.text,
            "strays_killed": run.strays,
            "stderr": run.stderr.decode(errors="replace")})
        # Claude Code ran its own tools; the gateway recorded the env's it answered. A call of
        # an env tool it never answered (the gateway went away) is a run of its own.
        recorded = {r.call_id for r in ctx.trace.tool_runs}
        prefix = f"mcp__{cl.MCP_SERVER}__"
        for use in run.tool_uses:
            if use.id in recorded:
                continue
            if use.name.startswith(prefix):
                ctx.record_tool(ToolRun(call_id=use.id, name=use.name.removeprefix(prefix),
                                        error_type="mcp_call_failed"))
            else:
                ctx.record_tool(ToolRun(call_id=use.id, name=use.name,
                                        duration_s=round(duration_s(use), 4),
                                        error_type=None if use.is_error is False else
                                        "tool_error" if use.is_error else "interrupted"))
