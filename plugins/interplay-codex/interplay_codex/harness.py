"""The ``codex`` harness: the OpenAI codex CLI as an agent, with native resume.

The first segment is ``codex exec``; every continuation is ``codex exec resume <thread_id>`` of
that trace's own session, so codex keeps its history, tool state and rollout file across
turns. codex talks to the interception server through the Responses API with the trace's
secret, so every model request it makes is a recorded call on the trace. The tools the env
gives the seat reach codex as an MCP server, the run's tool gateway, named ``interplay`` (the
model sees them as ``mcp__interplay__<tool>``), through ``-c`` overrides on every launch and
resume (no file is written: :mod:`~interplay_codex.command_line`); each call codex makes of
one runs in-process and is recorded as the ``chat`` harness records it.

Where it runs, how long, what it leaves and how a segment ends are the kernel's program
harness base (``interplay.ProgramHarness``): on this machine in a CODEX_HOME and
workdir of the trace's own, or inside the episode's sandbox (the native binary of this machine's npm
install brought in read-only, codex's own sandbox off there: the container is the sandbox).
This module holds what is codex's own: its command line, what its ``--json`` events say
(:mod:`~interplay_codex.events`) and its session.
"""

from __future__ import annotations

import os
import platform
import posixpath
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

from interplay import Heard, Launch, Message, ModelCall, ProgramHarness, Ran, SegmentContext, Turn
from interplay.contracts import Mount
from interplay.model import request_tool_names
from interplay_codex import command_line as cl
from interplay_codex.command_line import CodexConfig
from interplay_codex.events import CodexRun, last_line, mcp_line, read_event, tool_runs

#: The native build of codex an npm install carries, by this machine's architecture.
_TRIPLES = {"x86_64": "x86_64-unknown-linux-musl", "amd64": "x86_64-unknown-linux-musl",
            "aarch64": "aarch64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


class CodexHarness(ProgramHarness):
    """The codex CLI against the interception server; continues with codex exec resume."""

    name = "codex"
    Config: ClassVar[type] = CodexConfig
    program = "codex"
    pinned = cl.CODEX_VERSION
    package = cl.NPM_PACKAGE
    install_hint = cl.INSTALL_HINT
    title = "codex"
    info_key = "codex"
    session_key = "thread_id"
    launch_word = "exec"
    own_session = True

    def binary(self) -> str:
        """codex's native executable when ``codex`` is npm's Node launcher of it: run
        directly, so the process that calls the model is the one the harness started (an
        older Node's launcher runs it as a child of its own)."""
        found = super().binary()
        native = native_codex(found)
        return found if native is None else str(native)

    def brought(self, binary: str) -> tuple[list[Mount], str]:
        """The native codex of this machine's npm install (a static build: it runs in any
        Linux image), its platform folder mounted whole (codex finds its helpers beside
        it), or the executable alone when it is not in one."""
        real = Path(os.path.realpath(binary))
        folder = real.parent.parent
        if real.parent.name != "bin" or folder.name not in _TRIPLES.values():
            return super().brought(binary)
        target = self.mount_point()
        return [Mount(source=str(folder), target=target)], \
            posixpath.join(target, "bin", real.name)

    def command(self, turn: Turn) -> Launch:
        cfg: CodexConfig = self.config
        state, routes, place = turn.state, turn.routes, turn.place
        subcommand = ["resume", state.session] if turn.resume and state.session else []
        argv = cl.argv(place.binary, cfg, base_url=routes.base_url,
                       model=turn.ctx.client.endpoint.model, instructions=state.system,
                       subcommand=subcommand, run_tag=turn.tag, tools_url=routes.tools_url,
                       tool_timeout_s=routes.tool_timeout_s, inside=place.inside)
        env = cl.environment(turn.base_env(), home=place.home, secret=routes.secret,
                             tools_token=routes.tools_token)
        return Launch(argv=argv, env=env, stdin=turn.prompt.encode())

    def listen(self, turn: Turn) -> Callable[[bytes], None]:
        """codex's events read as they come (the times of the commands it runs)."""
        run = turn.scratch["run"] = CodexRun()
        return lambda line: read_event(line, run)

    def read(self, ran: Ran, turn: Turn, messages: Sequence[Message]) -> Heard:
        run: CodexRun = turn.scratch.get("run") or CodexRun()
        run.interrupted(killed=ran.timed_out or ran.cancelled)
        calls = turn.calls()
        reached = None
        if turn.routes.tools_url is not None and calls and not any(
                name.startswith(cl.TOOL_PREFIX) for c in calls for name in request_tool_names(c)):
            # codex goes on without an MCP server it could not start (its stderr says why):
            # the model would be answered "unsupported call" for every tool of the env.
            reached = False
        return Heard(session=run.thread_id, reason=last_line(ran.stderr, run.errors),
                     tools_reached=reached,
                     tools_problem=f"its MCP server {cl.MCP_SERVER!r} (the tool gateway) did "
                                   f"not start, and its model was offered none of them: "
                                   f"{mcp_line(ran.stderr)}",
                     tool_runs=tool_runs(run, messages, turn.ctx.trace.tool_runs),
                     detail={"usage": run.usage, "errors": run.errors,
                             "warnings": run.warnings})

    def failed_call_error(self, ctx: SegmentContext, call: ModelCall) -> str:
        error = f"codex stopped on a failed model call: {call.error}"
        if ctx.client.endpoint.is_local and "context window" in (call.error or ""):
            error += ("; codex's own prompt and tools outgrow the embedded model's window: "
                      "give the seat a model with a larger one (--base-url, model.base_url)")
        return error


def native_codex(binary: str) -> Path | None:
    """The native codex executable behind ``binary`` (npm's ``codex`` is a Node launcher of
    it), or None when it cannot be found (then ``binary`` is taken to be the program
    itself)."""
    real = Path(os.path.realpath(binary))
    if real.suffix != ".js":
        return real if real.is_file() else None
    triple = _TRIPLES.get(platform.machine().lower())
    if triple is None:
        return None
    package = real.parent.parent  # .../@openai/codex
    for root in (package.parent / "codex-linux-x64", package.parent / "codex-linux-arm64",
                 package / "node_modules" / "@openai" / "codex-linux-x64",
                 package / "node_modules" / "@openai" / "codex-linux-arm64", package):
        found = root / "vendor" / triple / "bin" / "codex"
        if found.is_file():
            return found
    return None
