"""The ``command`` harness: any CLI program as an agent.

The program runs as a subprocess pointed at the interception server (``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` set to the trace's secret, ``OPENAI_MODEL``), so every model request it
makes is a recorded call on the trace. When the env gives the seat tools, the program also gets
the tool gateway, an MCP server (streamable HTTP) serving them: ``INTERPLAY_MCP_URL`` and
``INTERPLAY_MCP_TOKEN`` (the trace's bearer token); each call it makes runs in-process and is
recorded as the ``chat`` harness records one. The task goes on stdin or as the last argument, as
text or (``prompt_format = "messages"``) as a JSON message list; its stdout is the reply.
Exit code, stdout and stderr are recorded on the trace. The segment ends when the program
exits (or at its timeout), even if something it started in the background still holds its
output: what it wrote until then is its answer. The program runs in a process group of its
own, killed when the segment ends (on a timeout, on cancellation, and after a normal exit, for
what it left in the background), with whatever carries the segment's tag
(``INTERPLAY_PROGRAM_RUN``), in its group or not (:func:`interplay.processes.run_program`);
it is started through :mod:`interplay.processes`, so a killed run takes it and its children
along.

A program that cannot run as configured (not found, not executable) is a config error; one the
system could not start for want of descriptors, processes or memory is tried again under the
seat's retry policy (its endpoint's ``max_retries`` and ``retry_max_s``), and if it still
cannot start the segment ends as a ``spawn_error``, transient like a model's connection error.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from typing import Any, ClassVar, Literal

import attrs

from interplay.contexts import SegmentContext
from interplay.errors import InterplayError
from interplay.harness import Harness, Segment
from interplay.model.retries import Failure, Policy
from interplay.processes import ProgramRun, not_runnable, refusal_reason, run_program
from interplay.records import Message, Task

#: Bytes of stdout/stderr kept on the trace per segment.
KEEP_BYTES = 64 * 1024
#: Where the program finds the seat's tools (an MCP server) and the token that reaches them;
#: neither is set when the seat has no tools.
MCP_URL_VAR = "INTERPLAY_MCP_URL"
MCP_TOKEN_VAR = "INTERPLAY_MCP_TOKEN"


#: In ``argv``, the Python that runs interplay (``sys.executable``: the venv's, with interplay
#: and its dependencies importable), so an agent written in Python needs no path to it.
PYTHON_PLACEHOLDER = "{python}"


@attrs.define
class CommandConfig:
    #: The program and its arguments, e.g. ``["{python}", "my_agent.py"]``; ``{python}`` is
    #: the Python that runs interplay (the venv's, where ``python`` on the PATH may be another).
    argv: list[str] = attrs.field(validator=attrs.validators.min_len(1))
    #: How the program gets the task: on stdin, or as its last argument.
    prompt_via: Literal["stdin", "argv"] = "stdin"
    #: The task as plain text, or as a JSON list of messages (the whole conversation, so the program
    #: can resume).
    prompt_format: Literal["text", "messages"] = "text"
    #: Seconds a segment may run before the program is killed (its output so far is the reply).
    timeout_s: float = 300.0
    #: The folder the program runs in (None: the current one).
    cwd: str | None = None
    #: Environment variables set for the program, over the inherited ones.
    env: dict[str, str] = attrs.Factory(dict)


class CommandHarness(Harness):
    """Runs any CLI program as a subprocess against the interception server."""

    name = "command"
    Config: ClassVar[type] = CommandConfig

    def __init__(self, config: Any = None) -> None:
        if config is None:
            raise InterplayError("harness 'command' needs harness_config.argv, "
                                 "e.g. argv = [\"{python}\", \"my_agent.py\"]")
        super().__init__(config)
        cfg: CommandConfig = self.config
        if cfg.cwd is not None and not os.path.isdir(cfg.cwd):
            raise InterplayError(f"harness 'command': cwd {cfg.cwd!r} is not a directory; "
                                 "fix harness_config.cwd")
        # Derived from what the program reads: a message list can carry a whole conversation.
        self.accepts_messages = cfg.prompt_format == "messages"

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        cfg: CommandConfig = self.config
        route = await ctx.route()
        prompt = self._render(task)
        program = [a.replace(PYTHON_PLACEHOLDER, sys.executable) for a in cfg.argv]
        argv = [*program, prompt] if cfg.prompt_via == "argv" else program
        env = {**os.environ, **cfg.env, "OPENAI_BASE_URL": route.base_url,
               "OPENAI_API_KEY": route.secret, "OPENAI_MODEL": ctx.client.endpoint.model}
        tools = await ctx.tool_route()
        if tools is not None:
            env[MCP_URL_VAR], env[MCP_TOKEN_VAR] = tools.url, tools.token
        else:  # never another run's, inherited
            env.pop(MCP_URL_VAR, None)
            env.pop(MCP_TOKEN_VAR, None)
        stdin = prompt.encode() if cfg.prompt_via == "stdin" else b""

        async def attempt() -> ProgramRun:
            try:
                return await run_program(argv, stdin=stdin, timeout_s=cfg.timeout_s,
                                         cwd=cfg.cwd, env=env, keep_stderr=KEEP_BYTES)
            except OSError as exc:
                reason = exc.strerror or type(exc).__name__
                if isinstance(exc, FileNotFoundError):
                    raise InterplayError(f"harness 'command': program {argv[0]!r} not found; "
                                         f"fix harness_config.argv") from None
                if exc.errno == errno.E2BIG and cfg.prompt_via == "argv":
                    raise InterplayError(f"harness 'command': the prompt is too long to pass "
                                         f"as an argument ({reason}); set "
                                         f"harness_config.prompt_via = \"stdin\"") from None
                if not_runnable(exc):
                    raise InterplayError(f"harness 'command': cannot run program {argv[0]!r} "
                                         f"({reason}); fix harness_config.argv") from None
                raise Failure("spawn_error", f"the system could not start program "
                              f"{argv[0]!r} ({refusal_reason(exc)})") from None

        try:
            run = await Policy(ctx.client.endpoint).run(attempt, event="command.start_retry")
        except Failure as failure:
            return Segment(stop_condition="error", error_type=failure.error_type,
                           error=failure.message)
        self._record(ctx, run.exit_code, run.stdout, run.stderr)
        if run.timed_out:
            return Segment(stop_condition="timeout", error_type="timeout",
                           error=f"command exceeded {cfg.timeout_s:g} s")
        text = run.stdout.decode(errors="replace").strip()
        if run.exit_code != 0:
            return Segment([Message("assistant", text)] if text else [], stop_condition="error",
                           error_type="command_failed",
                           error=f"exit code {run.exit_code}")
        return Segment([Message("assistant", text)])

    def _render(self, task: Task) -> str:
        if self.config.prompt_format == "messages":
            return json.dumps([m.to_openai() for m in task.messages()])
        if isinstance(task.prompt, str) or task.prompt is None:
            parts = [task.system_prompt or "", task.prompt or ""]
            return "\n\n".join(p for p in parts if p)
        return "\n\n".join(m.text for m in task.messages() if m.text)

    @staticmethod
    def _record(ctx: SegmentContext, code: int | None, out: bytes, err: bytes) -> None:
        runs = ctx.trace.info.setdefault("command_runs", [])
        runs.append({"exit_code": code, "stdout": out[-KEEP_BYTES:].decode(errors="replace"),
                     "stderr": err[-KEEP_BYTES:].decode(errors="replace")})

