"""The ``model`` network of a container: interplay's own servers, and nothing else, reachable
from inside a container that has no network (``--network none``: only its loopback).

For each server (the interception server, the tool gateway: ``127.0.0.1:PORT`` on this
machine) a listening socket is made *inside the container's network namespace*, on its own
``127.0.0.1:PORT``, by a short-lived thread that enters the namespace (``setns``) to make it;
the socket stays in that namespace, while this process accepts on it from its own and pipes
each connection to the server. So a program inside is given the very URL it would be given
on this machine, and every other address (another port of this machine, the internet) stays
unreachable: the namespace has no route out, only these listeners. Entering a namespace needs
root (or CAP_SYS_ADMIN) and a daemon on this machine.

This module owns those listeners and their pipes; it must not decide which ports a sandbox
opens (the docker backend does, on ``reach``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import threading
from typing import Any

from interplay.contracts.sandbox import SandboxError
from interplay.interception import callers
from interplay.log import get_logger

log = get_logger("interplay.contracts.sandbox.docker")

_CLONE_NEWNET = 0x40000000


def _listener_in(pid: int, host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` in the network namespace of process ``pid``."""
    made: dict[str, Any] = {}

    def enter_and_bind() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        except OSError as exc:
            made["error"] = exc
            return
        try:
            if libc.setns(fd, _CLONE_NEWNET) != 0:
                made["error"] = OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
                return
        finally:
            os.close(fd)
        # This thread is in the container's namespace from here until it ends: it makes the
        # socket and nothing else.
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(256)
            sock.setblocking(False)
            made["socket"] = sock
        except OSError as exc:
            made["error"] = exc

    thread = threading.Thread(target=enter_and_bind, name="sandbox-netns", daemon=True)
    thread.start()
    thread.join()
    if "error" in made:
        exc = made["error"]
        raise SandboxError(
            f"network 'model' needs to enter the container's network namespace, which this "
            f"process may not ({exc.strerror or exc}): run interplay as root on the daemon's "
            f"machine, or set sandbox.network = \"host\" (every port of this machine "
            f"reachable)") from None
    return made["socket"]  # type: ignore[no-any-return]


class Forwarder:
    """The listeners of one container's ``model`` network and the connections they carry."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._servers: dict[int, asyncio.AbstractServer] = {}
        self._pipes: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self.connections = 0

    async def open(self, host: str, port: int) -> None:
        """Make ``host:port`` inside lead to ``host:port`` here (once per port)."""
        async with self._lock:
            if port in self._servers:
                return
            sock = await asyncio.to_thread(_listener_in, self.pid, host, port)

            async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                task = asyncio.current_task()
                if task is not None:
                    self._pipes.add(task)
                self.connections += 1
                try:
                    await _pipe(reader, writer, host, port, self.pid)
                finally:
                    if task is not None:
                        self._pipes.discard(task)

            self._servers[port] = await asyncio.start_server(serve, sock=sock)
            log.debug("sandbox.forward_opened", port=port, pid=self.pid)

    async def close(self) -> None:
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()
        for task in list(self._pipes):
            task.cancel()
        for server in servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()


async def _pipe(inside_r: asyncio.StreamReader, inside_w: asyncio.StreamWriter, host: str,
                port: int, netns_pid: int) -> None:
    peer = inside_w.get_extra_info("peername")
    # Which process inside holds the connection, so the server can tell the program's own
    # requests from a command's that uses its secret (interplay.interception.callers).
    holder = None if not peer else await asyncio.to_thread(
        callers.holder, peer[0], int(peer[1]), port, netns_pid)
    try:
        here_r, here_w = await asyncio.open_connection(host, port)
    except OSError:
        inside_w.close()
        return
    local = here_w.get_extra_info("sockname")
    local_port = int(local[1]) if local else None
    if local_port is not None and holder is not None:
        callers.carried(local_port, holder)

    async def copy(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(1 << 16):
                w.write(data)
                await w.drain()
            if w.can_write_eof():
                w.write_eof()
        except (ConnectionError, OSError):
            pass

    try:
        await asyncio.gather(copy(inside_r, here_w), copy(here_r, inside_w))
    finally:
        for w in (inside_w, here_w):
            w.close()
        if local_port is not None and holder is not None:
            callers.carried(local_port, None)
