"""Finding and killing every process one codex run started (Linux ``/proc``; elsewhere only
codex's own process group is reached).

codex runs the model's commands in sessions of their own, so killing its process group is not
enough: :func:`kill_tree` freezes and kills codex's whole tree of descendants, and
:func:`kill_tagged` kills every process that carries the segment's tag in its environment, so
that one that left the tree (``setsid``, a double fork) goes too. Each process is frozen
(SIGSTOP) before the kill, so nothing forks between the scan and the kill.

This module owns finding and killing processes; it must not decide when (the harness does).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ")".
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux /proc; empty elsewhere)."""
    if not os.path.isdir("/proc"):
        return []
    kids = _children()
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in kids.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def freeze(scan: Callable[[], list[int]]) -> set[int]:
    """SIGSTOP what ``scan`` finds, scanning again until nothing new turns up (a process may
    fork between a scan and its stop); the stopped pids."""
    frozen: set[int] = set()
    for _ in range(20):
        found = [p for p in scan() if p not in frozen]
        if not found:
            break
        for p in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGSTOP)
            frozen.add(p)
    return frozen


def kill_tree(pid: int) -> None:
    """Kill ``pid``, its process group and every descendant, even ones that left the group
    (codex runs commands in sessions of their own). The tree is frozen first so nothing forks
    between the scan and the kill."""
    frozen = freeze(lambda: [pid, *descendants(pid)])
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for p in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


def tagged(var: str, tag: str) -> list[int]:
    """Live processes whose environment holds ``var=tag`` (Linux /proc; empty elsewhere)."""
    if not os.path.isdir("/proc"):
        return []
    entry_bytes = f"{var}={tag}".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if entry_bytes in environ.split(b"\0"):
            found.append(int(entry))
    return found


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    fields = stat[stat.rfind(b")") + 2:].split()
    return not fields or fields[0] in (b"Z", b"X")


def kill_tagged(var: str, tag: str, wait_s: float = 10.0, grace_s: float = 1.0) -> int:
    """Kill every process tagged ``var=tag`` and wait (up to ``wait_s``) until they are dead;
    the number killed. They get SIGTERM and ``grace_s`` first, so a process that holds a lock
    (a login shell's ``pyenv rehash``, say) can release it; what is left is frozen, so nothing
    forks between the scan and the kill, then killed."""
    signalled = tagged(var, tag)
    termed = list(signalled)
    for p in termed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while termed and time.monotonic() < deadline:
        termed = [p for p in termed if not _gone(p)]
        if termed:
            time.sleep(0.01)
    frozen = freeze(lambda: tagged(var, tag))
    for p in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    # SIGKILL is delivered asynchronously: wait, so the segment ends with the processes gone.
    deadline = time.monotonic() + wait_s
    alive = set(frozen)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if not _gone(p)}
        if alive:
            time.sleep(0.01)
    return len(frozen | set(signalled))
