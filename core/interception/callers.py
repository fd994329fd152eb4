"""Who sent a request to the interception server: the program a harness started for the
segment, or another process holding its trace's secret (a command the program ran, which
could read the secret where the program keeps it).

A request's connection is followed back to the process that holds it: its peer address is
looked up in the kernel's table of TCP sockets (``/proc/<pid>/net/tcp``, of the network
namespace the connection came from) for the socket's inode, and the process whose descriptors
hold that inode is the caller. A connection that came through a sandbox's ``model`` network
(:mod:`interplay.builtin_sandboxes.netns`) arrives from this process's own pipe: the pipe says,
when it opens, which process inside the container it carries (:func:`carried`). Whether that
process is the program itself is :func:`interplay.processes.caller`'s: the process its run
started, found by the run's tag.

Linux only (``/proc``); elsewhere, and when a process is gone before it is found, nothing is
said (None). This module owns the lookup; it must not decide what a caller may do (the
interception server records it on the call; export leaves ``other`` calls out of training
data).
"""

from __future__ import annotations

import os
import socket
import threading

from interplay.processes import caller

#: The connections a sandbox's network pipes to this machine's servers, by the local port of
#: the pipe's own connection: the process inside that holds the other end.
_carried: dict[int, int] = {}
_lock = threading.Lock()
#: The process holding each socket found so far, by inode (an inode names one socket while it
#: lives, and a connection's is looked up once per request).
_holders: dict[int, int] = {}


def carried(local_port: int, pid: int | None) -> None:
    """The pipe whose connection to a server here has ``local_port`` carries a connection of
    process ``pid`` (None: forget it, the pipe is closed)."""
    with _lock:
        if pid is None:
            _carried.pop(local_port, None)
        else:
            _carried[local_port] = pid


def who(peer: tuple[str, int] | None, server_port: int) -> str | None:
    """``program``, ``other`` or None (not known) for the request whose connection's peer is
    ``peer`` on the server's ``server_port``. It reads /proc: call it in a thread."""
    if peer is None or not os.path.isdir("/proc"):
        return None
    host, port = peer[0], int(peer[1])
    with _lock:
        pid = _carried.get(port)
    if pid is None:
        pid = holder(host, port, server_port)
    return None if pid is None else caller(pid)


def holder(host: str, port: int, server_port: int, netns_pid: int | str = "self") -> int | None:
    """The process holding the client end (``host:port``) of a TCP connection to
    ``server_port``, in the network namespace of process ``netns_pid``; None when it is not
    found."""
    inode = _inode(host, port, server_port, netns_pid)
    if inode is None:
        return None
    with _lock:
        found = _holders.get(inode)
    if found is not None and _holds(found, inode):
        return found
    found = _scan(inode)
    if found is not None:
        with _lock:
            if len(_holders) > 4096:
                _holders.clear()
            _holders[inode] = found
    return found


def _hex_address(host: str, port: int) -> tuple[str, str]:
    """``host:port`` as /proc/net/tcp (IPv4) and tcp6 write them."""
    try:
        packed = socket.inet_pton(socket.AF_INET, host)
        v4 = f"{int.from_bytes(packed, 'little'):08X}:{port:04X}"
        v6 = (f"{0:08X}{0:08X}{0xFFFF0000:08X}{int.from_bytes(packed, 'little'):08X}"
              f":{port:04X}")
    except OSError:
        packed = socket.inet_pton(socket.AF_INET6, host)
        words = [int.from_bytes(packed[i:i + 4], "little") for i in range(0, 16, 4)]
        v6 = "".join(f"{w:08X}" for w in words) + f":{port:04X}"
        v4 = ""
    return v4, v6


def _inode(host: str, port: int, server_port: int, netns_pid: int | str) -> int | None:
    v4, v6 = _hex_address(host, port)
    for name, local in (("tcp", v4), ("tcp6", v6)):
        if not local:
            continue
        try:
            with open(f"/proc/{netns_pid}/net/{name}", "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[1] == local and \
                    fields[2].endswith(f":{server_port:04X}"):
                inode = int(fields[9])
                return inode or None
    return None


def _holds(pid: int, inode: int) -> bool:
    target = f"socket:[{inode}]"
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == target
                   for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def _scan(inode: int) -> int | None:
    target = f"socket:[{inode}]"
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") == target:
                    return int(entry)
            except OSError:
                continue
    return None
