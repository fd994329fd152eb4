"""What the codex harness keeps for one trace between segments: its codex session.

Each trace gets its directories (``interplay.ProgramDirs``: a root under ``state_dir`` holding
its own CODEX_HOME, where codex keeps the session's rollout file, and, unless ``workdir`` is
configured, its own working directory). The state lives in the trace's ``ctx.state`` under
:data:`STATE_KEY`, with the developer instructions of the session and the thread id codex gave
it, so a later segment resumes that very session. :func:`close_state` removes the root (a
configured workdir is kept).

This module owns the session's state; it must not start codex or read what it did.
"""

from __future__ import annotations

from typing import Any

import attrs

from interplay import ProgramDirs
from interplay_codex.command_line import CodexConfig

#: Where the per-trace state lives in ``ctx.state``.
STATE_KEY = "codex"


@attrs.define
class TraceState:
    """What the harness keeps for one trace between segments."""

    dirs: ProgramDirs
    instructions: str | None = None
    thread_id: str | None = None
    segments: int = 0


def trace_state(state: dict[str, Any], cfg: CodexConfig) -> TraceState:
    """The trace's state in ``state`` (its ``ctx.state``), made with its directories on the
    first segment; InterplayError naming the setting when a directory cannot be made."""
    found = state.get(STATE_KEY)
    if isinstance(found, TraceState):
        return found
    made = TraceState(dirs=ProgramDirs.make("codex", state_dir=cfg.state_dir,
                                            workdir=cfg.workdir))
    state[STATE_KEY] = made
    return made


def session_of(state: dict[str, Any]) -> TraceState | None:
    """The trace's state if it has a codex session to resume, else None."""
    found = state.get(STATE_KEY)
    return found if isinstance(found, TraceState) and found.thread_id is not None else None


async def close_state(state: dict[str, Any]) -> TraceState | None:
    """Forget the trace's state and remove its directories (a configured workdir is kept);
    the state it had, if any."""
    found = state.pop(STATE_KEY, None)
    if not isinstance(found, TraceState):
        return None
    await found.dirs.remove()
    return found
