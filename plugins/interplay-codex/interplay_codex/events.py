"""What one codex process did, read from its ``--json`` events.

codex prints one JSON event per line on stdout: ``thread.started`` gives the session's id,
``turn.completed`` its usage, ``error``/``turn.failed`` what stopped it, and ``item.*`` events
the commands and patches it ran itself and the calls of env tools that failed before the tool
gateway answered them. (The messages a segment added are read from the model calls the trace
recorded: the kernel's program harness base.)

This module owns reading codex's output into a :class:`CodexRun`; it must not start or stop
codex or write to the trace.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import attrs

from interplay import ErrorType, Message, ToolRun

#: Tool items codex runs itself, by the name the model calls them.
_TOOL_ITEMS = {"command_execution": "exec_command", "file_change": "apply_patch"}


@attrs.define
class CodexRun:
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
    #: Fatal errors codex reported (``error``/``turn.failed`` events), or why it could not
    #: start.
    errors: list[str] = attrs.Factory(list)
    #: Non-fatal error items (an unknown model's metadata, a skipped feature).
    warnings: list[str] = attrs.Factory(list)
    #: Processes codex started that were still alive after it exited, killed then.
    strays: int = 0
    stderr: bytes = b""

    def interrupted(self, killed: bool) -> None:
        """The tools still running when codex ended: each a tool item of its own, failed
        (``timeout`` when codex was killed, else ``interrupted``)."""
        now = time.monotonic()
        for item_id, (name, t) in self.running.items():
            self.tool_items.append((item_id, name, name, now - t,
                                    ErrorType.TIMEOUT if killed else ErrorType.INTERRUPTED))
        self.running.clear()


def read_event(line: bytes, run: CodexRun) -> None:
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
                                   tool_name, 0.0, ErrorType.MCP_CALL_FAILED))
        elif item.get("type") in _TOOL_ITEMS:
            began = run.running.pop(str(item.get("id")), None)
            code = item.get("exit_code")
            if isinstance(code, int) and code != 0:
                error_type: str | None = ErrorType.EXIT_CODE
            elif item.get("status") in ("failed", "declined"):
                error_type = ErrorType(item["status"])  # codex's status, ours by name
            else:
                error_type = None
            name = _TOOL_ITEMS[item["type"]]
            run.tool_items.append((str(item.get("id")), name, name,
                                   0.0 if began is None else time.monotonic() - began[1],
                                   error_type))
        elif item.get("type") == "error":
            run.warnings.append(str(item.get("message")))


def tool_runs(run: CodexRun, messages: Sequence[Message],
              recorded: Sequence[ToolRun]) -> list[ToolRun]:
    """The tools codex ran itself, each paired with the model's call of it (by name, in
    order, past those the gateway recorded already: the env's tools it answered)."""
    known = {r.call_id for r in recorded}
    ids = {name: [c.id for m in messages for c in m.tool_calls
                  if c.name == name and c.id not in known]
           for name in {item[1] for item in run.tool_items}}
    out = []
    for item_id, called, name, duration, error_type in run.tool_items:
        pool = ids.get(called) or []
        call_id = pool.pop(0) if pool else item_id
        out.append(ToolRun(call_id=call_id, name=name, duration_s=round(duration, 4),
                           error_type=error_type))
    return out


def last_line(stderr: bytes, errors: Sequence[str]) -> str:
    """What to say of a codex that failed: the last error it reported, else the last line of
    its stderr."""
    if errors:
        return errors[-1]
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"


def mcp_line(stderr: bytes) -> str:
    """Why codex went on without the tool gateway: the last line of its stderr about its MCP
    client, else its last line."""
    lines = [ln.strip() for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    about = [ln for ln in lines if "mcp" in ln.lower()]
    return (about or lines or ["no output"])[-1]
