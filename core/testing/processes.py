"""Processes seen from outside, for tests that check what a run leaves behind (Linux
``/proc``): :func:`descendants` of a process, taken while it lives; :func:`survivors`, those of
a set of pids still alive after a while; and :func:`mentioning`, the live processes whose
command line or environment holds a test's own marker. Found by pid or by such a marker, never
by name."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ")".
    return stat[stat.rfind(b")") + 2:].split()


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is dead for this purpose)."""
    fields = _stat_fields(pid)
    return fields is not None and len(fields) > 0 and fields[0] not in (b"Z", b"X")


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid``: its children, theirs, and so on."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and len(fields) > 1 and fields[0] not in (b"Z", b"X"):
                children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def survivors(pids: Iterable[int], within_s: float = 15.0) -> set[int]:
    """Those of ``pids`` still alive after waiting up to ``within_s`` seconds for all of them
    to end (a bound for a failure, not a measure of speed)."""
    left = set(pids)
    deadline = time.monotonic() + within_s
    while True:
        left = {p for p in left if alive(p)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def mentioning(marker: str) -> list[int]:
    """Live processes (zombies are dead) other than this one whose command line or environment
    holds ``marker``: a unique string a test put in a command (``MARK=<marker> sleep 600``) to
    find what it left behind, wherever it went (its own session, a double fork)."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or not alive(int(entry)):
            continue
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{name}", "rb") as f:
                    if needle in f.read():
                        found.append(int(entry))
                        break
            except OSError:
                continue
    return found
