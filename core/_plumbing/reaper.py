"""The reaper: a small process that ends what an interplay process started, once it is gone.

:mod:`interplay.processes` starts it (``python -I _reaper.py VAR TAG``) with the read end of a
pipe as its stdin; the interplay process keeps the only write end. The reaper reads process
group ids from it, one per line (groups of children started in sessions of their own), and
waits. The pipe reaches end-of-file when the interplay process is gone, however it went (a
normal exit, an exception, SIGTERM, ``kill -9``): then the reaper ends every process in those
groups and, where ``/proc`` exists (Linux), every process whose environment holds ``VAR=TAG``
(what children and their descendants inherit, so it finds those that left their group too).
They get SIGTERM and a short grace, so the embedded model's server and worker processes stop as
they would when asked, then whatever is left is stopped (SIGSTOP, scanning again until nothing
new forks) and killed. A group is forgotten once it has no process left, so a group id reused
later by someone else's process is not touched.

A line may also be ``exec`` and a JSON list, a command to run once the processes are ended:
what a sandbox backend started outside this machine's process tree (containers) is removed by
a command of its own, given the run's tag to find them. Each command runs once, in the order
given, for up to :data:`COMMAND_S`; what it prints is not read.

It runs as a script of the standard library alone (``-I``: no site or user paths of the
caller, nothing of interplay imported), so it starts in a few tens of milliseconds and holds
a few megabytes. It must not import interplay or anything outside the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

#: How long processes asked to stop (SIGTERM) get before they are killed.
GRACE_S = 2.0
#: How often, while the interplay process lives, groups with no process left are forgotten.
PRUNE_S = 5.0
#: How long each cleanup command (an ``exec`` line) may take once the process is gone.
COMMAND_S = 60.0


def _command(line: bytes) -> list[str] | None:
    """The argv of an ``exec`` line, or None."""
    if not line.startswith(b"exec "):
        return None
    try:
        argv = json.loads(line[5:])
    except ValueError:
        return None
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        return argv
    return None


def _run_commands(commands: list[list[str]]) -> None:
    for argv in commands:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=COMMAND_S, check=False,
                           start_new_session=True)


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's now: signals would fail the same way
    return True


def scan(var: str, tag: str, groups: set[int]) -> set[int]:
    """Live processes (Linux ``/proc``) in one of ``groups`` or tagged ``var=tag``."""
    entry = f"{var}={tag}".encode()
    me = os.getpid()
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ")".
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) < 3 or fields[0] in (b"Z", b"X"):
            continue
        if int(fields[2]) in groups:
            found.add(pid)
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if entry in environ.split(b"\0"):
            found.add(pid)
    return found


def _signal(groups: Iterable[int], pids: Iterable[int], sig: int) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def sweep(groups: set[int], find: Callable[[set[int]], set[int]] | None,
          grace_s: float = GRACE_S) -> set[int]:
    """End every process of ``groups`` and every one ``find`` finds (None: groups only): the
    pids found (those of ``groups`` only where ``find`` finds them), signalled to the last.
    With a grace, SIGTERM first and that long to exit; with none, no SIGTERM at all: it would
    only let a process act on it (a shell run the rest of its script) before it is stopped."""
    def alive() -> bool:
        if find is not None:
            return bool(find(groups))
        return any(_group_exists(g) for g in groups)

    asked = find(groups) if find is not None else set()
    if grace_s > 0:
        _signal(groups, asked, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while alive() and time.monotonic() < deadline:
            time.sleep(0.02)
    # Stopped before killed, scanning again until nothing new shows up: a process may fork
    # between a scan and its signal.
    frozen: set[int] = set()
    for _ in range(20):
        _signal(groups, (), signal.SIGSTOP)
        found = find(groups) - frozen if find is not None else set()
        if not found:
            break
        _signal((), found, signal.SIGSTOP)
        frozen |= found
    _signal(groups, frozen, signal.SIGKILL)
    return asked | frozen


def main(argv: list[str]) -> int:
    var, tag = argv
    # Not ours to stop: Ctrl-C at a terminal is for the interplay process, which has its say
    # first; the reaper ends when it does.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    commands: list[list[str]] = []
    pending = b""
    pruned = time.monotonic()
    while True:
        ready, _, _ = select.select([0], [], [], PRUNE_S)
        if ready:
            try:
                data = os.read(0, 1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                if line.strip().isdigit():
                    groups.add(int(line))
                elif (argv := _command(line)) is not None and argv not in commands:
                    commands.append(argv)
        if time.monotonic() - pruned >= PRUNE_S:
            groups = {g for g in groups if _group_exists(g)}
            pruned = time.monotonic()
    has_proc = os.path.isdir("/proc")
    sweep(groups, (lambda gs: scan(var, tag, gs)) if has_proc else None)
    _run_commands(commands)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
