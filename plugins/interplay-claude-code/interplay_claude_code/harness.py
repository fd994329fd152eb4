"""The ``claude-code`` harness: Anthropic's Claude Code CLI as an agent, with native resume.

The first segment starts Claude Code with a session id interplay chose (``--session-id``);
every continuation resumes that session (``--resume``), so Claude Code keeps its own history,
tool calls and results across turns and sends them to the model itself. Claude Code talks to
the interception server's Messages route with the trace's secret, so every model request it
makes is a recorded call on the trace. The tools the env gives the seat reach it as an MCP
server, the run's tool gateway, named ``interplay`` (the model sees them as
``mcp__interplay__<tool>``); each call of one runs in-process and is recorded as the ``chat``
harness records it, under the model's own call id.

Where it runs, how long, what it leaves and how a segment ends are the kernel's program
harness base (``interplay.ProgramHarness``): on this machine in a config home and
workdir of the trace's own (its own tools off unless named), or inside the episode's sandbox (this
machine's ``claude`` binary brought in read-only; its Bash, Read, Edit, Write, Glob and Grep
on, working on the task's workspace). This module holds what is Claude Code's own: its command
line and files, what its ``stream-json`` events say (:mod:`~interplay_claude_code.events`) and
its session.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Sequence
from typing import ClassVar

from interplay import ErrorType, Heard, Launch, Message, ProgramHarness, Ran, ToolRun, Turn
from interplay_claude_code import command_line as cl
from interplay_claude_code.command_line import ClaudeCodeConfig
from interplay_claude_code.events import ClaudeRun, duration_s, last_line, read_events


class ClaudeCodeHarness(ProgramHarness):
    """The Claude Code CLI against the interception server; continues with ``--resume``."""

    name = "claude-code"
    Config: ClassVar[type] = ClaudeCodeConfig
    program = "claude"
    pinned = cl.CLAUDE_CODE_VERSION
    package = cl.NPM_PACKAGE
    install_hint = cl.INSTALL_HINT
    title = "Claude Code"
    info_key = "claude_code"
    session_key = "session_id"
    own_session = True

    def command(self, turn: Turn) -> Launch:
        cfg: ClaudeCodeConfig = self.config
        state, routes, place, ctx = turn.state, turn.routes, turn.place, turn.ctx
        if not turn.resume or state.session is None:
            state.session = str(uuid.uuid4())
        files = {}
        system_file = mcp_file = None
        if state.system:
            system_file = posixpath.join(place.root, "system-prompt.md")
            files[system_file] = state.system
        if routes.tools_url is not None and routes.tools_token is not None:
            mcp_file = posixpath.join(place.root, "mcp.json")
            files[mcp_file] = cl.dump_json(cl.mcp_config(routes.tools_url, routes.tools_token,
                                                         routes.tool_timeout_s))
        key_file = posixpath.join(place.root, "key")
        files[key_file] = routes.secret
        settings_file = posixpath.join(place.root, "settings.json")
        files[settings_file] = cl.dump_json(cl.settings(key_file))
        argv = cl.argv(place.binary, cfg, model=ctx.client.endpoint.model,
                       session_id=state.session, resume=turn.resume,
                       system_prompt_file=system_file, mcp_config_file=mcp_file,
                       settings_file=settings_file, inside=place.inside)
        env = cl.environment(turn.base_env(), home=place.home, base_url=routes.base_url,
                             model=ctx.client.endpoint.model,
                             wait_s=max(ctx.timeout_s, cfg.timeout_s),
                             tool_timeout_s=routes.tool_timeout_s, max_retries=cfg.max_retries,
                             # Claude Code always sends a limit, which the endpoint's sampling
                             # would sit under: the seat's or the endpoint's, told to it, else
                             # the harness's.
                             max_output_tokens=cl.seat_max_tokens(ctx.sampling)
                             or cl.seat_max_tokens(ctx.client.endpoint.sampling)
                             or cfg.max_output_tokens)
        return Launch(argv=argv, env=env, stdin=turn.prompt.encode(), files=files)

    def read(self, ran: Ran, turn: Turn, messages: Sequence[Message]) -> Heard:
        run = ClaudeRun(session_id=turn.state.session)
        read_events(ran.stdout, run)
        heard = Heard(session=run.session_id, failed=bool(run.result.get("is_error")),
                      reason=last_line(ran.stderr, run),
                      detail={"mcp_servers": run.mcp_servers, "result": run.result,
                              "text": run.text})
        status = run.mcp_servers.get(cl.MCP_SERVER)
        if turn.routes.tools_url is not None and not ran.cancelled and status != "connected":
            heard.tools_reached = False
            heard.tools_problem = (f"its MCP server {cl.MCP_SERVER!r} is {status or 'missing'} "
                                   f"(the tool gateway); see the trace's info.claude_code for "
                                   f"its stderr")
        if run.result.get("subtype") == "error_max_turns":
            heard.stop_condition = "max_turns"
        # Claude Code ran its own tools; the gateway recorded the env's it answered. A call
        # of an env tool it never answered (the gateway went away) is a run of its own.
        recorded = {r.call_id for r in turn.ctx.trace.tool_runs}
        prefix = f"mcp__{cl.MCP_SERVER}__"
        for use in run.tool_uses:
            if use.id in recorded:
                continue
            if use.name.startswith(prefix):
                heard.tool_runs.append(ToolRun(call_id=use.id,
                                               name=use.name.removeprefix(prefix),
                                               error_type=ErrorType.MCP_CALL_FAILED))
            else:
                heard.tool_runs.append(ToolRun(
                    call_id=use.id, name=use.name, duration_s=round(duration_s(use), 4),
                    error_type=None if use.is_error is False else
                    ErrorType.TOOL_ERROR if use.is_error else ErrorType.INTERRUPTED))
        return heard
