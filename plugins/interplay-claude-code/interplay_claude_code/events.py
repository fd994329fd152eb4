"""What one Claude Code process did, read from its ``stream-json`` events.

Claude Code prints one JSON event per line on stdout: ``system``/``init`` says which MCP servers
it reached, ``assistant`` and ``user`` events carry the model's tool calls and their results,
and ``result`` ends the segment (its final text, turns, usage, and whether it failed). (The
messages a segment added are read from the model calls the trace recorded: the kernel's
program harness base.)

This module owns reading Claude Code's output into a :class:`ClaudeRun`; it must not start or
stop Claude Code or write to the trace.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import attrs

#: The fields of the ``result`` event kept on the trace.
RESULT_FIELDS = ("subtype", "is_error", "num_turns", "stop_reason", "terminal_reason",
                 "api_error_status", "duration_ms", "duration_api_ms", "usage",
                 "permission_denials")


@attrs.define
class ToolUse:
    """One tool call the model made in a segment, as Claude Code reported it."""

    id: str
    name: str
    #: When Claude Code printed the call and its result (ISO times, when it gave them).
    called_at: str | None = None
    answered_at: str | None = None
    #: None until its result came; then whether the result was an error.
    is_error: bool | None = None


@attrs.define
class ClaudeRun:
    """What one Claude Code process did."""

    exit_code: int | None = None
    timed_out: bool = False
    #: The segment was cancelled from outside (the seat's timeout) and Claude Code killed.
    cancelled: bool = False
    session_id: str | None = None
    #: The MCP servers Claude Code reported at start, by name: ``connected``, ``failed``, ...
    mcp_servers: dict[str, str] = attrs.Factory(dict)
    #: The ``result`` event's fields (:data:`RESULT_FIELDS`), and its final text.
    result: dict[str, Any] = attrs.Factory(dict)
    text: str | None = None
    tool_uses: list[ToolUse] = attrs.Factory(list)
    #: Processes Claude Code started that were still alive after it exited, killed then.
    strays: int = 0
    stderr: bytes = b""

    @property
    def failed(self) -> bool:
        return self.exit_code != 0 or bool(self.result.get("is_error"))


def read_events(stdout: bytes, run: ClaudeRun) -> None:
    """Take what matters from every ``stream-json`` line of ``stdout`` into ``run``."""
    uses: dict[str, ToolUse] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:  # plain text Claude Code printed
            continue
        if isinstance(event, dict):
            _read(event, run, uses)


def _read(event: dict[str, Any], run: ClaudeRun, uses: dict[str, ToolUse]) -> None:
    kind = event.get("type")
    if isinstance(event.get("session_id"), str):
        run.session_id = event["session_id"]
    if kind == "system" and event.get("subtype") == "init":
        for server in event.get("mcp_servers") or ():
            if isinstance(server, dict) and isinstance(server.get("name"), str):
                run.mcp_servers[server["name"]] = str(server.get("status"))
    elif kind == "assistant" and event.get("parent_tool_use_id") is None:
        for block in _blocks(event):
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                use = ToolUse(id=block["id"], name=str(block.get("name") or ""),
                              called_at=_time(event))
                uses[use.id] = use
                run.tool_uses.append(use)
    elif kind == "user":
        for block in _blocks(event):
            use = uses.get(str(block.get("tool_use_id")))
            if block.get("type") == "tool_result" and use is not None:
                use.is_error = block.get("is_error") is True
                use.answered_at = _time(event)
    elif kind == "result":
        run.result = {k: event[k] for k in RESULT_FIELDS if k in event}
        if isinstance(event.get("result"), str):
            run.text = event["result"]


def _blocks(event: dict[str, Any]) -> list[dict[str, Any]]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content or () if isinstance(b, dict)] if isinstance(content, list) \
        else []


def _time(event: dict[str, Any]) -> str | None:
    value = event.get("timestamp")
    return value if isinstance(value, str) else None


def duration_s(use: ToolUse) -> float:
    """Seconds from a tool call to its result, by Claude Code's own times (0 without them)."""
    if use.called_at is None or use.answered_at is None:
        return 0.0
    try:
        began = datetime.fromisoformat(use.called_at)
        ended = datetime.fromisoformat(use.answered_at)
    except ValueError:
        return 0.0
    return max(0.0, (ended - began).total_seconds())


def last_line(stderr: bytes, run: ClaudeRun) -> str:
    """What to say of a Claude Code that failed: its result's text when it failed with one,
    else the last line of its stderr."""
    if run.result.get("is_error") and run.text:
        return run.text.strip().splitlines()[-1] if run.text.strip() else run.text
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"
