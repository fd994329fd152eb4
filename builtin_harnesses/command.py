"""The ``command`` harness: any CLI program as an agent.

The program runs pointed at the interception server (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``
set to the trace's secret, ``OPENAI_MODEL``), so every model request it makes is a recorded
call on the trace. When the env gives the seat tools, the program also gets the tool gateway,
an MCP server (streamable HTTP) serving them: ``INTERPLAY_MCP_URL`` and ``INTERPLAY_MCP_TOKEN``
(the trace's bearer token); each call it makes runs in-process and is recorded as the ``chat``
harness records one. The task goes on stdin or as the last argument, as text or
(``prompt_format = "messages"``) as a JSON message list; its stdout is the reply. Exit code,
stdout and stderr are recorded on the trace (``info.command_runs``).

Where it runs is the kernel's program harness base (:mod:`interplay.builtin_harnesses.program`):
on this machine in ``cwd`` (what it starts is ended when the segment ends, and with the run if
the run is killed), or, when the seat works in the episode's sandbox, inside it in the task's
workspace, with the files and folders of ``bring`` mounted read-only at ``/opt/interplay/bring``
(``{bring}`` in ``argv``) and ``{python}`` the image's ``python3``.

A program that cannot run as configured (not found, not executable) is a config error; one the
system could not start for want of descriptors, processes or memory is tried again under the
seat's retry policy (its endpoint's ``max_retries`` and ``retry_max_s``), and if it still
cannot start the segment ends as a ``spawn_error``, transient like a model's connection error.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import posixpath
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import attrs

from interplay.builtin_harnesses.program import (
    BROUGHT,
    Heard,
    Launch,
    Place,
    ProgramHarness,
    Ran,
    Turn,
)
from interplay.contracts.contexts import SegmentContext
from interplay.contracts.harness import Segment
from interplay.contracts.sandbox import Mount
from interplay.errors import ErrorType, InterplayError
from interplay.values.records import Message, Task

#: Bytes of stdout/stderr kept on the trace per segment.
KEEP_BYTES = 64 * 1024
#: Where the program finds the seat's tools (an MCP server) and the token that reaches them;
#: neither is set when the seat has no tools.
MCP_URL_VAR = "INTERPLAY_MCP_URL"
MCP_TOKEN_VAR = "INTERPLAY_MCP_TOKEN"
#: In ``argv``, the Python that runs interplay (``sys.executable``: the venv's, with interplay
#: and its dependencies importable), so an agent written in Python needs no path to it; inside
#: a sandbox, the image's ``python3``.
PYTHON_PLACEHOLDER = "{python}"
#: In ``argv``, the folder where the paths of ``bring`` are (inside a sandbox:
#: ``/opt/interplay/bring``; on this machine a folder of links to them).
BRING_PLACEHOLDER = "{bring}"
_INSIDE_BRING = posixpath.join(BROUGHT, "bring")


@attrs.define
class CommandConfig:
    #: The program and its arguments, e.g. ``["{python}", "my_agent.py"]``; ``{python}`` is
    #: the Python that runs interplay (the venv's, where ``python`` on the PATH may be another;
    #: inside a sandbox, the image's python3); ``{bring}`` the folder of ``bring``'s paths.
    argv: list[str] = attrs.field(validator=attrs.validators.min_len(1))
    #: How the program gets the task: on stdin, or as its last argument.
    prompt_via: Literal["stdin", "argv"] = "stdin"
    #: The task as plain text, or as a JSON list of messages (the whole conversation, so the program
    #: can resume).
    prompt_format: Literal["text", "messages"] = "text"
    #: Seconds a segment may run before the program is killed (its output so far is the reply).
    timeout_s: float = 300.0
    #: The folder the program runs in on this machine (None: the current one); in a sandbox
    #: it runs in the task's workspace.
    cwd: str | None = None
    #: Environment variables set for the program, over the inherited ones (inside a sandbox,
    #: over the image's).
    env: dict[str, str] = attrs.Factory(dict)
    #: Files and folders of this machine the program needs (its own script, say), each found
    #: in ``{bring}`` under its name: inside a sandbox mounted read-only at
    #: /opt/interplay/bring.
    bring: list[str] = attrs.Factory(list)


class CommandHarness(ProgramHarness):
    """Runs any CLI program as a subprocess against the interception server."""

    name = "command"
    Config: ClassVar[type] = CommandConfig
    title = "command"
    info_key = "command"

    def __init__(self, config: Any = None) -> None:
        if config is None:
            raise InterplayError("harness 'command' needs harness_config.argv, "
                                 "e.g. argv = [\"{python}\", \"my_agent.py\"]")
        super().__init__(config)
        cfg: CommandConfig = self.config
        if cfg.cwd is not None and not os.path.isdir(cfg.cwd):
            raise InterplayError(f"harness 'command': cwd {cfg.cwd!r} is not a directory; "
                                 "fix harness_config.cwd")
        for path in cfg.bring:
            if not os.path.exists(os.path.expanduser(path)):
                raise InterplayError(f"harness 'command': bring {path!r} does not exist; "
                                     f"fix harness_config.bring")
        # Derived from what the program reads: a message list can carry a whole conversation.
        self.accepts_messages = cfg.prompt_format == "messages"
        self._links: str | None = None

    @property
    def failed_type(self) -> str:
        return ErrorType.COMMAND_FAILED

    # -- the program ---------------------------------------------------------------------------

    def binary(self) -> str:
        return self.config.argv[0].replace(PYTHON_PLACEHOLDER, sys.executable)

    def check(self) -> list[str]:
        return []

    def brought(self, binary: str) -> tuple[list[Mount], str]:
        mounts = [Mount(source=os.path.realpath(os.path.expanduser(path)),
                        target=posixpath.join(_INSIDE_BRING,
                                              os.path.basename(os.path.normpath(path))))
                  for path in self.config.bring]
        return mounts, self.config.argv[0]

    def host_place(self, binary: str) -> Place:
        cwd = self.config.cwd or os.getcwd()
        return Place(sandbox=None, root=cwd, home=os.path.expanduser("~"), workdir=cwd,
                     binary=binary)

    # -- a segment -----------------------------------------------------------------------------

    async def resume(self, messages: Sequence[Message], ctx: SegmentContext) -> Segment:
        if not self.accepts_messages:
            raise InterplayError(
                "harness 'command' takes a text prompt (harness_config.prompt_format = "
                "\"text\"), so it cannot continue a chat; for a program that reads the "
                "conversation as a JSON list of messages on stdin, set "
                "harness_config.prompt_format = \"messages\"")
        return await super().resume(messages, ctx)

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        state = await self._state(ctx)
        return await self._segment(ctx, state, self._render(task), resume=False)

    def _render(self, task: Task) -> str:
        if self.config.prompt_format == "messages":
            return json.dumps([m.to_openai() for m in task.messages()])
        if isinstance(task.prompt, str) or task.prompt is None:
            parts = [task.system_prompt or "", task.prompt or ""]
            return "\n\n".join(p for p in parts if p)
        return "\n\n".join(m.text for m in task.messages() if m.text)

    def command(self, turn: Turn) -> Launch:
        cfg: CommandConfig = self.config
        # In a sandbox of its own (not one whose commands run on this machine), the image's
        # Python and the mounted paths; else this machine's.
        apart = turn.place.sandbox is not None and turn.place.sandbox.isolated
        python = "python3" if apart else sys.executable
        bring = _INSIDE_BRING if apart else self._host_bring() if cfg.bring else ""
        program = [a.replace(PYTHON_PLACEHOLDER, python).replace(BRING_PLACEHOLDER, bring)
                   for a in cfg.argv]
        argv = [*program, turn.prompt] if cfg.prompt_via == "argv" else program
        env = {**turn.base_env(), **cfg.env, "OPENAI_BASE_URL": turn.routes.base_url,
               "OPENAI_API_KEY": turn.routes.secret,
               "OPENAI_MODEL": turn.ctx.client.endpoint.model}
        if turn.routes.tools_url is not None and turn.routes.tools_token is not None:
            env[MCP_URL_VAR], env[MCP_TOKEN_VAR] = turn.routes.tools_url, turn.routes.tools_token
        else:  # never another run's, inherited
            env.pop(MCP_URL_VAR, None)
            env.pop(MCP_TOKEN_VAR, None)
        stdin = turn.prompt.encode() if cfg.prompt_via == "stdin" else b""
        return Launch(argv=argv, env=env, stdin=stdin)

    def _host_bring(self) -> str:
        """A folder of links to ``bring``'s paths on this machine (made once)."""
        if self._links is None:
            folder = tempfile.mkdtemp(prefix="interplay-bring-")
            for path in self.config.bring:
                real = os.path.realpath(os.path.expanduser(path))
                os.symlink(real, os.path.join(folder, os.path.basename(os.path.normpath(path))))
            self._links = folder
        return self._links

    def read(self, ran: Ran, turn: Turn, messages: Sequence[Message]) -> Heard:
        text = ran.stdout.decode(errors="replace").strip()
        return Heard(messages=[Message("assistant", text)] if text else [],
                     reason=f"exit code {ran.exit_code}")

    def keep(self, ctx: SegmentContext, turn: Turn, ran: Ran, heard: Heard,
             calls: Sequence[Any]) -> None:
        runs = ctx.trace.info.setdefault("command_runs", [])
        runs.append({"exit_code": ran.exit_code,
                     "stdout": ran.stdout[-KEEP_BYTES:].decode(errors="replace"),
                     "stderr": ran.stderr[-KEEP_BYTES:].decode(errors="replace"),
                     "where": "sandbox" if turn.place.inside else "host"})

    def start_error(self, argv0: str, exc: OSError) -> InterplayError:
        reason = exc.strerror or type(exc).__name__
        if isinstance(exc, FileNotFoundError):
            return InterplayError(f"harness 'command': program {argv0!r} not found; "
                                  f"fix harness_config.argv")
        if exc.errno == errno.E2BIG and self.config.prompt_via == "argv":
            return InterplayError(f"harness 'command': the prompt is too long to pass as an "
                                  f"argument ({reason}); set harness_config.prompt_via = "
                                  f"\"stdin\"")
        return InterplayError(f"harness 'command': cannot run program {argv0!r} ({reason}); "
                              f"fix harness_config.argv")

    async def close(self, ctx: SegmentContext) -> None:
        await super().close(ctx)
        links, self._links = self._links, None
        if links is not None:
            await asyncio.to_thread(shutil.rmtree, links, True)
