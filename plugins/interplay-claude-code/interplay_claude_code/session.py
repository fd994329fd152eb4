"""What the Claude Code harness keeps for one trace between segments: its Claude Code session.

Each trace gets its directories (``interplay.ProgramDirs``: a root under ``state_dir`` holding
its own config home, ``HOME`` and ``CLAUDE_CONFIG_DIR``, where Claude Code keeps the session's
transcript; the files a segment is started with, the system prompt and the MCP config; and,
unless ``workdir`` is configured, its own working directory). The state lives in the trace's
``ctx.state`` under :data:`STATE_KEY`, with the session id interplay chose, so every later
segment resumes that very session. :func:`close_state` removes the root (a configured workdir
is kept).

This module owns the session's state; it must not start Claude Code or read what it did.
"""

from __future__ import annotations

import uuid
from typing import Any

import attrs

from interplay import ProgramDirs
from interplay_claude_code.command_line import ClaudeCodeConfig

#: Where the per-trace state lives in ``ctx.state``.
STATE_KEY = "claude_code"


def new_session_id() -> str:
    return str(uuid.uuid4())


@attrs.define
class TraceState:
    """What the harness keeps for one trace between segments."""

    dirs: ProgramDirs
    #: The session's id: chosen before its first segment, resumed by every later one.
    session_id: str = attrs.Factory(new_session_id)
    #: Whether a segment has started the session (a later one resumes it).
    started: bool = False
    system_prompt: str | None = None
    segments: int = 0


def trace_state(state: dict[str, Any], cfg: ClaudeCodeConfig) -> TraceState:
    """The trace's state in ``state`` (its ``ctx.state``), made with its directories on the
    first segment; InterplayError naming the setting when a directory cannot be made."""
    found = state.get(STATE_KEY)
    if isinstance(found, TraceState):
        return found
    made = TraceState(dirs=ProgramDirs.make("claude-code", state_dir=cfg.state_dir,
                                            workdir=cfg.workdir))
    state[STATE_KEY] = made
    return made


def session_of(state: dict[str, Any]) -> TraceState | None:
    """The trace's state if a segment has started its session, else None."""
    found = state.get(STATE_KEY)
    return found if isinstance(found, TraceState) and found.started else None


async def close_state(state: dict[str, Any]) -> TraceState | None:
    """Forget the trace's state and remove its directories (a configured workdir is kept);
    the state it had, if any."""
    found = state.pop(STATE_KEY, None)
    if not isinstance(found, TraceState):
        return None
    await found.dirs.remove()
    return found
