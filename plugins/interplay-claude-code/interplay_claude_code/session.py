"""What the Claude Code harness keeps for one trace between segments: its Claude Code session.

Each trace gets a root directory (a temp dir under ``state_dir``) holding its own config home
(``HOME`` and ``CLAUDE_CONFIG_DIR``, where Claude Code keeps the session's transcript), the
files a segment is started with (the system prompt, the MCP config), and, unless ``workdir``
is configured, its own working directory. The state lives in the trace's ``ctx.state`` under
:data:`STATE_KEY`, with the session id interplay chose, so every later segment resumes that
very session. :func:`close_state` removes the root (a configured workdir is kept).

This module owns the per-trace directories and the session's state; it must not start Claude
Code or read what it did.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import attrs

from interplay import InterplayError, get_logger
from interplay_claude_code.command_line import ClaudeCodeConfig

log = get_logger("interplay.claude_code")

#: Where the per-trace state lives in ``ctx.state``.
STATE_KEY = "claude_code"


@attrs.define
class TraceState:
    """What the harness keeps for one trace between segments."""

    root: Path
    home: Path
    workdir: Path
    #: The session's id: chosen before its first segment, resumed by every later one.
    session_id: str = attrs.Factory(lambda: str(uuid.uuid4()))
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
    parent = None
    if cfg.state_dir is not None:
        parent = _make_dir(Path(cfg.state_dir).expanduser(), "state_dir", cfg.state_dir)
    try:
        root = Path(tempfile.mkdtemp(prefix="interplay-claude-", dir=parent))
    except OSError as e:
        raise _dir_error("state_dir", cfg.state_dir or tempfile.gettempdir(), e) from None
    # The root is not in the trace's state until the end, so closing could not remove it: any
    # failure before that removes it here.
    try:
        home = _make_dir(root / "home", "state_dir", str(root))
        if cfg.workdir is None:
            workdir = _make_dir(root / "work", "state_dir", str(root))
        else:
            workdir = _make_dir(Path(cfg.workdir).expanduser().resolve(), "workdir",
                                cfg.workdir)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    made = TraceState(root=root, home=home, workdir=workdir)
    state[STATE_KEY] = made
    return made


def session_of(state: dict[str, Any]) -> TraceState | None:
    """The trace's state if a segment has started its session, else None."""
    found = state.get(STATE_KEY)
    return found if isinstance(found, TraceState) and found.started else None


async def close_state(state: dict[str, Any]) -> TraceState | None:
    """Forget the trace's state and remove its root (the config home, the segment's files and
    the trace's own workdir; a configured workdir is kept); the state it had, if any."""
    found = state.pop(STATE_KEY, None)
    if not isinstance(found, TraceState):
        return None
    await asyncio.to_thread(shutil.rmtree, found.root, True)
    if found.root.exists():  # the system refused (no descriptor to spare?): say where it is
        log.warning("claude_code.state_left", path=str(found.root))
    return found


def _dir_error(setting: str, value: str, error: OSError) -> InterplayError:
    return InterplayError(f"harness 'claude-code': cannot use {setting} {value!r} "
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
