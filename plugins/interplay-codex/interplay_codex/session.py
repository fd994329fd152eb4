"""What the codex harness keeps for one trace between segments: its codex session.

Each trace gets a root directory (a temp dir under ``state_dir``) holding its own CODEX_HOME,
where codex keeps the session's rollout file, and, unless ``workdir`` is configured, its own
working directory. The state lives in the trace's ``ctx.state`` under :data:`STATE_KEY`, with
the developer instructions of the session and the thread id codex gave it, so a later segment
resumes that very session. :func:`close_state` removes the root (a configured workdir is kept).

This module owns the per-trace directories and the session's state; it must not start codex
or read what it did.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs

from interplay import InterplayError, get_logger
from interplay_codex.command_line import CodexConfig

log = get_logger("interplay.codex")

#: Where the per-trace state lives in ``ctx.state``.
STATE_KEY = "codex"


@attrs.define
class TraceState:
    """What the harness keeps for one trace between segments."""

    root: Path
    home: Path
    workdir: Path
    instructions: str | None = None
    thread_id: str | None = None
    segments: int = 0


def trace_state(state: dict[str, Any], cfg: CodexConfig) -> TraceState:
    """The trace's state in ``state`` (its ``ctx.state``), made with its directories on the
    first segment; InterplayError naming the setting when a directory cannot be made."""
    found = state.get(STATE_KEY)
    if isinstance(found, TraceState):
        return found
    parent = None
    if cfg.state_dir is not None:
        parent = _make_dir(Path(cfg.state_dir).expanduser(), "state_dir", cfg.state_dir)
    try:
        root = Path(tempfile.mkdtemp(prefix="interplay-codex-", dir=parent))
    except OSError as e:
        raise _dir_error("state_dir", cfg.state_dir or tempfile.gettempdir(), e) from None
    # The root is not in the trace's state until the end, so closing could not remove it: any
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
    made = TraceState(root=root, home=home, workdir=workdir)
    state[STATE_KEY] = made
    return made


def session_of(state: dict[str, Any]) -> TraceState | None:
    """The trace's state if it has a codex session to resume, else None."""
    found = state.get(STATE_KEY)
    return found if isinstance(found, TraceState) and found.thread_id is not None else None


async def close_state(state: dict[str, Any]) -> TraceState | None:
    """Forget the trace's state and remove its root (CODEX_HOME and the trace's own workdir;
    a configured workdir is kept); the state it had, if any."""
    found = state.pop(STATE_KEY, None)
    if not isinstance(found, TraceState):
        return None
    await asyncio.to_thread(shutil.rmtree, found.root, True)
    if found.root.exists():  # the system refused (no descriptor to spare?): say where it is
        log.warning("codex.state_left", path=str(found.root))
    return found


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
