"""The ``codex`` harness: the OpenAI codex CLI as an agent, with native resume.

Each trace gets its own CODEX_HOME (a temp dir made on the first launch and kept in
``ctx.state``) and, unless ``workdir`` is configured, its own working directory. The first
segment is ``codex exec``; every continuation is ``codex exec resume <thread_id>`` of that
trace's own session, so codex keeps its history, tool state and rollout file across turns.
codex talks to the interception server through the Responses API with the trace's secret, so
every model request it makes is a recorded call on the trace. The tools the env gives the seat
reach codex as an MCP server, the run's tool gateway, named ``interplay`` (so the model sees
them as ``mcp__interplay__<tool>``), through ``-c`` overrides on every launch and resume (no
file is written); each call codex makes of one runs in-process and is recorded as the ``chat``
harness records it. A segment's messages are read back from the last call recorded during it:
the model's own view of its function calls, their outputs and the final answer. Timeouts and
cancellation kill codex's whole process tree, and when a segment ends, however it ends, every
process codex started is killed (Linux), so no command the model ran outlives its segment;
``close`` removes the per-trace directories. codex is started with ``interplay.start_process``
and its commands carry the run's tag (``interplay.owner_tag``), so a run that is killed
outright takes them along too.

This module owns launching codex and reading what it did; it must not reach into the
interception server or the trace beyond what ``SegmentContext`` offers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import attrs

from interplay import (
    Harness,
    InterplayError,
    Message,
    ModelCall,
    Segment,
    SegmentContext,
    Task,
    ToolRun,
    assistant_message,
    get_logger,
    owner_tag,
    request_messages,
    start_process,
)

log = get_logger("interplay.codex")

#: The codex CLI version this harness is tested against.
CODEX_VERSION = "0.169.0"
INSTALL_HINT = (f"install the codex CLI into the venv with "
                f"`npm install --prefix .venv/npm @openai/codex@{CODEX_VERSION}` and link "
                f".venv/npm/node_modules/.bin/codex into .venv/bin (or run `bash .ci/setup "
                f"--test`), or set harness_config.binary to its path")
#: The environment variable that carries the trace's secret to codex (its provider's env_key).
KEY_VAR = "INTERPLAY_CODEX_KEY"
#: The environment variable that tags every process of one codex run (codex passes it to the
#: commands it runs, which pass it on), so the ones that left codex's process tree (``setsid``,
#: double forks; codex itself only ends their process group) are found and killed at the end.
RUN_VAR = "INTERPLAY_CODEX_RUN"
PROVIDER = "interplay"
#: The name codex knows the tool gateway by (``mcp_servers.<name>``): the model sees the env's
#: tools in the namespace ``mcp__<name>`` (``mcp__interplay__message_user`` to a Chat
#: Completions model, through the interception server).
MCP_SERVER = "interplay"
#: The environment variable that carries the trace's tool-gateway token to codex (its MCP
#: server's ``bearer_token_env_var``).
TOKEN_VAR = "INTERPLAY_MCP_TOKEN"
#: Seconds codex waits for the tool gateway to answer its handshake and tool list.
MCP_STARTUP_S = 30
#: Seconds codex waits for a tool call beyond the slowest tool's own timeout, so that the
#: gateway's timeout (the text the chat harness gives the model too) always answers first.
MCP_CALL_MARGIN_S = 15
#: Where the per-trace state lives in ``ctx.state``.
STATE_KEY = "codex"
#: Bytes of codex's stderr kept on the trace per segment.
KEEP_STDERR = 16 * 1024
#: codex prints one JSON event per line; a command's whole output can sit in one of them.
LINE_LIMIT = 64 * 1024 * 1024

Sandbox = Literal["read-only", "workspace-write", "danger-full-access"]


@attrs.define
class CodexConfig:
    """Settings of the codex harness (a seat's ``harness_config``)."""

    #: The codex executable; None looks next to the running Python (the venv's bin) and then
    #: on PATH.
    binary: str | None = None
    #: codex's sandbox for the shell commands the model runs.
    sandbox: Sandbox = "workspace-write"
    #: Wall-time limit of one segment; past it codex's process tree is killed.
    timeout_s: float = attrs.field(default=600.0, validator=attrs.validators.gt(0))
    #: Extra arguments for ``codex exec`` (placed before the prompt, also on resume), e.g.
    #: ``["-c", "model_reasoning_effort=\"low\""]``.
    extra_args: list[str] = attrs.Factory(list)
    #: The directory codex works in (created if missing, kept). None gives every trace a fresh
    #: temp dir, removed when the trace closes.
    workdir: str | None = None
    #: Where the per-trace directories (CODEX_HOME, and the workdir unless configured) are
    #: made. None is the system temp dir.
    state_dir: str | None = None
    #: codex's own request and stream retries against the interception server (which already
    #: retries the real endpoint).
    max_retries: int = attrs.field(default=0, validator=attrs.validators.ge(0))


@attrs.define
class _TraceState:
    """What the harness keeps for one trace between segments."""

    root: Path
    home: Path
    workdir: Path
    instructions: str | None = None
    thread_id: str | None = None
    segments: int = 0


@attrs.define
class _Run:
    """What one codex process did."""

    exit_code: int | None = None
    timed_out: bool = False
    #: The segment was cancelled from outside (the session's timeout) and codex killed.
    cancelled: bool = False
    thread_id: str | None = None
    usage: dict[str, Any] | None = None
    agent_texts: list[str] = attrs.Factory(list)
    #: (item id, the tool's name as the model called it, as recorded, duration, error type) of
    #: the tools codex ran itself, and of the env's tools whose calls never reached the
    #: gateway (the gateway records those that did).
    tool_items: list[tuple[str, str, str, float, str | None]] = attrs.Factory(list)
    #: Tools started and not finished: item id -> (tool name, start time).
    running: dict[str, tuple[str, float]] = attrs.Factory(dict)
    #: Fatal errors codex reported (``error``/``turn.failed`` events).
    errors: list[str] = attrs.Factory(list)
    #: Non-fatal error items (an unknown model's metadata, a skipped feature).
    warnings: list[str] = attrs.Factory(list)
    #: Processes codex started that were still alive after it exited, killed then.
    strays: int = 0
    stderr: bytes = b""


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
        state = self._state(ctx)
        instructions, prompt = render_task(task)
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
        state = ctx.state.get(STATE_KEY)
        if not isinstance(state, _TraceState) or state.thread_id is None:
            return await super().resume(messages, ctx)
        last = messages[-1] if messages else None
        if last is None or last.role != "user" or not last.text.strip():
            raise InterplayError("harness 'codex' continues a chat from a non-empty user "
                                 "message; the conversation must end with one")
        return await self._segment(ctx, state, ["resume", state.thread_id], last.text)

    async def close(self, ctx: SegmentContext) -> None:
        """Remove the trace's CODEX_HOME (and its own workdir)."""
        state = ctx.state.pop(STATE_KEY, None)
        if not isinstance(state, _TraceState):
            return
        # The root holds CODEX_HOME and the trace's own workdir; a configured workdir is kept.
        await asyncio.to_thread(shutil.rmtree, state.root, True)
        log.debug("codex.closed", agent=ctx.trace.agent, segments=state.segments)

    # -- running codex ---------------------------------------------------------------------------

    def binary(self) -> str:
        """The codex executable (resolved once); InterplayError saying how to install it."""
        if self._binary is None:
            self._binary = find_codex(self.config.binary)
        return self._binary

    def _state(self, ctx: SegmentContext) -> _TraceState:
        state = ctx.state.get(STATE_KEY)
        if isinstance(state, _TraceState):
            return state
        cfg: CodexConfig = self.config
        parent = None
        if cfg.state_dir is not None:
            parent = _make_dir(Path(cfg.state_dir).expanduser(), "state_dir", cfg.state_dir)
        try:
            root = Path(tempfile.mkdtemp(prefix="interplay-codex-", dir=parent))
        except OSError as e:
            raise _dir_error("state_dir", cfg.state_dir or tempfile.gettempdir(), e) from None
        # The root is not in ctx.state until the end, so close() could not remove it: any
        # failure before that removes it here.
        try:
            home = _make_dir(root / "home", "state_dir", str(root))  # codex needs it to exist
            if cfg.workdir is None:
                workdir = _make_dir(root / "work", "state_dir", str(root))
            else:
                workdir = _make_dir(Path(cfg.workdir).expanduser().resolve(), "workdir",
                                    cfg.workdir)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        state = _TraceState(root=root, home=home, workdir=workdir)
        ctx.state[STATE_KEY] = state
        return state

    def argv(self, base_url: str, model: str, state: _TraceState,
             subcommand: Sequence[str], run_tag: str | None = None,
             tools_url: str | None = None, tool_timeout_s: float = 30.0) -> list[str]:
        """The codex command line of one segment (the prompt comes on stdin: ``-``);
        ``run_tag`` is set as ``RUN_VAR`` in the commands' environment; ``tools_url`` is the
        tool gateway codex is given as an MCP server (its token in ``TOKEN_VAR``), with calls
        allowed up to ``tool_timeout_s`` (the slowest tool's own timeout)."""
        cfg: CodexConfig = self.config
        p = f"model_providers.{PROVIDER}"
        argv = [self.binary(), "exec", "--skip-git-repo-check", "--json",
                "-c", f"model_provider={PROVIDER}",
                "-c", f"{p}.name={PROVIDER}",
                "-c", f"{p}.base_url={toml_string(base_url)}",
                "-c", f"{p}.wire_api=responses",
                "-c", f"{p}.env_key={KEY_VAR}",
                "-c", f"{p}.request_max_retries={cfg.max_retries}",
                "-c", f"{p}.stream_max_retries={cfg.max_retries}",
                # Offline: no analytics and no plugin fetches, so the interception server (and
                # the tool gateway, when the seat has tools) is all codex connects to.
                "-c", "analytics.enabled=false", "--disable", "plugins",
                # Before `resume`, which has no -s of its own and otherwise drops to read-only.
                "-s", cfg.sandbox,
                "-m", model]
        if state.instructions:
            argv += ["-c", f"developer_instructions={toml_string(state.instructions)}"]
        if tools_url is not None:
            m = f"mcp_servers.{MCP_SERVER}"
            argv += ["-c", f"{m}.url={toml_string(tools_url)}",
                     "-c", f"{m}.bearer_token_env_var={TOKEN_VAR}",
                     # codex exec never asks: without this, every call of an MCP tool is
                     # refused ("requires approval, but approval policy is never").
                     "-c", f"{m}.default_tools_approval_mode=\"approve\"",
                     "-c", f"{m}.startup_timeout_sec={MCP_STARTUP_S}",
                     "-c", f"{m}.tool_timeout_sec="
                           f"{math.ceil(tool_timeout_s) + MCP_CALL_MARGIN_S}"]
        if run_tag is not None:
            # Set by codex itself too, so a shell_environment_policy that inherits nothing
            # still tags the commands: with this segment's tag, and with the run's, which
            # ends them if the run is killed.
            argv += ["-c", f"shell_environment_policy.set.{RUN_VAR}={toml_string(run_tag)}"]
            owner = owner_tag()
            if owner is not None:
                argv += ["-c", f"shell_environment_policy.set.{owner[0]}="
                               f"{toml_string(owner[1])}"]
        argv += list(cfg.extra_args)
        # The prompt goes on stdin: no argv length limit, and text starting with "-" stays text.
        return [*argv, *subcommand, "-"]

    async def _segment(self, ctx: SegmentContext, state: _TraceState,
                       subcommand: Sequence[str], prompt: str) -> Segment:
        route = await ctx.route()
        tools = await ctx.tool_route()
        tag = uuid.uuid4().hex
        argv = self.argv(route.base_url, ctx.client.endpoint.model, state, subcommand, tag,
                         tools_url=None if tools is None else tools.url,
                         tool_timeout_s=max((t.timeout_s for t in ctx.tools), default=30.0))
        env = {**os.environ, "CODEX_HOME": str(state.home), KEY_VAR: route.secret,
               RUN_VAR: tag}
        if tools is not None:
            env[TOKEN_VAR] = tools.token
        first_call = len(ctx.trace.model_calls)
        state.segments += 1
        t0 = time.monotonic()
        run = _Run()
        try:
            await self._run(argv, env, state.workdir, prompt.encode(), run)
        except asyncio.CancelledError:
            # The session's own timeout (or the run's end): codex is dead; keep what it did.
            run.cancelled = True
            self._finish(ctx, state, run, subcommand, first_call, prompt, t0)
            raise
        messages = self._finish(ctx, state, run, subcommand, first_call, prompt, t0)
        calls = ctx.trace.model_calls[first_call:]
        if run.timed_out:
            return Segment(messages, stop_condition="timeout", error_type="timeout",
                           error=f"codex exceeded {self.config.timeout_s:g} s")
        failed = next((c for c in reversed(calls) if c.error_type is not None), None)
        if run.exit_code != 0:
            if failed is not None:
                return Segment(messages, stop_condition="error",
                               error_type=failed.error_type,
                               error=f"codex stopped on a failed model call: {failed.error}")
            return Segment(messages, stop_condition="error", error_type="codex_failed",
                           error=f"codex exited with code {run.exit_code}: "
                                 f"{last_line(run.stderr, run.errors)}")
        if not messages or messages[-1].role != "assistant":
            return Segment(messages, stop_condition="error", error_type="codex_failed",
                           error="codex finished without a recorded model answer")
        return Segment(messages)

    def _finish(self, ctx: SegmentContext, state: _TraceState, run: _Run,
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

    async def _run(self, argv: list[str], env: Mapping[str, str], cwd: Path,
                   stdin: bytes, run: _Run) -> None:
        try:
            proc = await start_process(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env, limit=LINE_LIMIT)
        except FileNotFoundError:
            raise InterplayError(f"harness 'codex': {argv[0]!r} not found; "
                                 f"{INSTALL_HINT}") from None
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
            tag = env.get(RUN_VAR)
            if tag:
                run.strays = await asyncio.shield(asyncio.to_thread(kill_tagged, RUN_VAR, tag))
            now = time.monotonic()
            for item_id, (name, t) in run.running.items():
                run.tool_items.append((item_id, name, name, now - t, "timeout" if killed
                                       else "interrupted"))
            run.running.clear()

    @staticmethod
    async def _talk(proc: asyncio.subprocess.Process, stdin: bytes, run: _Run) -> None:
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
    def _record(ctx: SegmentContext, state: _TraceState, run: _Run, subcommand: Sequence[str],
                calls: int, wall_s: float, messages: list[Message]) -> None:
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


# -- reading codex -----------------------------------------------------------------------------

_TOOL_ITEMS = {"command_execution": "exec_command", "file_change": "apply_patch"}


def read_event(line: bytes, run: _Run) -> None:
    """Take what matters from one ``--json`` event line into ``run``."""
    try:
        event = json.loads(line)
    except ValueError:
        return
    if not isinstance(event, dict):
        return
    kind = event.get("type")
    item = event.get("item") if isinstance(event.get("item"), dict) else {}
    if kind == "thread.started" and isinstance(event.get("thread_id"), str):
        run.thread_id = event["thread_id"]
    elif kind == "turn.completed" and isinstance(event.get("usage"), dict):
        run.usage = event["usage"]
    elif kind == "turn.failed":
        err = event.get("error")
        run.errors.append(str(err.get("message") if isinstance(err, dict) else err))
    elif kind == "error":
        run.errors.append(str(event.get("message")))
    elif kind == "item.started" and item.get("type") in _TOOL_ITEMS:
        run.running[str(item.get("id"))] = (_TOOL_ITEMS[item["type"]], time.monotonic())
    elif kind == "item.completed":
        if item.get("type") == "agent_message":
            run.agent_texts.append(str(item.get("text") or ""))
        elif item.get("type") == "mcp_tool_call" and item.get("status") == "failed" \
                and item.get("result") is None:
            # A call of an env tool that failed in codex before the gateway answered it (the
            # gateway records every call it answers, errors included).
            tool_name = str(item.get("tool") or "")
            run.tool_items.append((str(item.get("id")),
                                   f"mcp__{item.get('server')}__{tool_name}",
                                   tool_name, 0.0, "mcp_call_failed"))
        elif item.get("type") in _TOOL_ITEMS:
            began = run.running.pop(str(item.get("id")), None)
            code = item.get("exit_code")
            if isinstance(code, int) and code != 0:
                error_type: str | None = "exit_code"
            elif item.get("status") in ("failed", "declined"):
                error_type = str(item["status"])
            else:
                error_type = None
            name = _TOOL_ITEMS[item["type"]]
            run.tool_items.append((str(item.get("id")), name, name,
                                   0.0 if began is None else time.monotonic() - began[1],
                                   error_type))
        elif item.get("type") == "error":
            run.warnings.append(str(item.get("message")))


def segment_messages(calls: Sequence[ModelCall], prompt: str) -> list[Message]:
    """The messages one segment added, as the model saw them.

    The last answered call's request holds the segment's whole history (codex resends it every
    time): everything after the user message carrying ``prompt``, then that call's answer.
    """
    answered = [c for c in calls if c.response is not None and c.error_type is None]
    if not answered:
        return []
    call = answered[-1]
    history = request_messages(call)
    start = None
    for i in range(len(history) - 1, -1, -1):
        if history[i].role == "user" and (start is None or history[i].text == prompt):
            start = i
            if history[i].text == prompt:
                break
    new = history[start + 1:] if start is not None else []
    reply = assistant_message(call)
    return [*new, reply] if reply is not None else new


# -- helpers -----------------------------------------------------------------------------------


def find_codex(binary: str | None = None) -> str:
    """The codex executable: ``binary`` if given, else next to the running Python (the venv's
    bin), else on PATH. InterplayError with the install command when there is none."""
    if binary:
        found = shutil.which(os.path.expanduser(binary))
        if found is None:
            raise InterplayError(f"harness 'codex': binary {binary!r} not found or not "
                                 f"executable; {INSTALL_HINT}")
        return found
    beside = Path(sys.executable).parent / "codex"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("codex")
    if found is None:
        raise InterplayError(f"harness 'codex': the codex CLI is not installed; {INSTALL_HINT}")
    return found


def render_task(task: Task) -> tuple[str | None, str]:
    """``(developer instructions, prompt text)`` for a fresh codex session on ``task``.

    System messages become codex's developer instructions; the rest is the prompt: one user
    message as it is, a longer conversation as a labelled transcript.
    """
    messages = task.messages()
    system = [m.text for m in messages if m.role in ("system", "developer") and m.text]
    rest = [m for m in messages if m.role not in ("system", "developer")]
    if len(rest) == 1 and rest[0].role == "user":
        prompt = rest[0].text
    elif all(m.role == "user" for m in rest):
        prompt = "\n\n".join(m.text for m in rest if m.text)
    else:
        parts = []
        for m in rest:
            body = m.text
            if m.tool_calls:
                body = "\n".join([body, *(f"(called {c.name} {c.arguments})"
                                          for c in m.tool_calls)]).strip()
            parts.append(f"[{m.role}]\n{body}")
        prompt = "\n\n".join(parts)
    return ("\n\n".join(system) or None), prompt


def _dir_error(setting: str, value: str, error: OSError) -> InterplayError:
    return InterplayError(f"harness 'codex': cannot use {setting} {value!r} "
                          f"({error.strerror or error}); set harness_config.{setting} to a "
                          f"writable directory")


def _make_dir(path: Path, setting: str, value: str) -> Path:
    """``path`` made (with parents) if missing; InterplayError naming ``setting`` if it cannot
    be (a file in the way, no permission)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _dir_error(setting, value, e) from None
    return path


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (``-c key=value`` parses its value as TOML)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def last_line(stderr: bytes, errors: Sequence[str]) -> str:
    if errors:
        return errors[-1]
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ")".
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux /proc; empty elsewhere)."""
    if not os.path.isdir("/proc"):
        return []
    kids = _children()
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in kids.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def freeze(scan: Callable[[], list[int]]) -> set[int]:
    """SIGSTOP what ``scan`` finds, scanning again until nothing new turns up (a process may
    fork between a scan and its stop); the stopped pids."""
    frozen: set[int] = set()
    for _ in range(20):
        found = [p for p in scan() if p not in frozen]
        if not found:
            break
        for p in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGSTOP)
            frozen.add(p)
    return frozen


def kill_tree(pid: int) -> None:
    """Kill ``pid``, its process group and every descendant, even ones that left the group
    (codex runs commands in sessions of their own). The tree is frozen first so nothing forks
    between the scan and the kill."""
    frozen = freeze(lambda: [pid, *descendants(pid)])
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for p in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


def tagged(var: str, tag: str) -> list[int]:
    """Live processes whose environment holds ``var=tag`` (Linux /proc; empty elsewhere)."""
    if not os.path.isdir("/proc"):
        return []
    entry_bytes = f"{var}={tag}".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if entry_bytes in environ.split(b"\0"):
            found.append(int(entry))
    return found


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    fields = stat[stat.rfind(b")") + 2:].split()
    return not fields or fields[0] in (b"Z", b"X")


def kill_tagged(var: str, tag: str, wait_s: float = 10.0, grace_s: float = 1.0) -> int:
    """Kill every process tagged ``var=tag`` and wait (up to ``wait_s``) until they are dead;
    the number killed. They get SIGTERM and ``grace_s`` first, so a process that holds a lock
    (a login shell's ``pyenv rehash``, say) can release it; what is left is frozen, so nothing
    forks between the scan and the kill, then killed."""
    signalled = tagged(var, tag)
    termed = list(signalled)
    for p in termed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while termed and time.monotonic() < deadline:
        termed = [p for p in termed if not _gone(p)]
        if termed:
            time.sleep(0.01)
    frozen = freeze(lambda: tagged(var, tag))
    for p in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    # SIGKILL is delivered asynchronously: wait, so the segment ends with the processes gone.
    deadline = time.monotonic() + wait_s
    alive = set(frozen)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if not _gone(p)}
        if alive:
            time.sleep(0.01)
    return len(frozen | set(signalled))
