"""Serving an ASGI app on 127.0.0.1: in the current event loop, or in a background thread with
its own loop, on uvicorn with httptools, with the limits of :mod:`interplay._plumbing.connections`
on every connection, and HTTP only: a connection of any type but ``http`` (and ``lifespan``) is
refused without reaching the app.

This module owns a listener's life (start, stop, its thread) and how uvicorn is assembled; it
must not read or answer an app's requests (the app does, with :mod:`interplay._plumbing.asgi`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

from interplay._plumbing import fds as _fds
from interplay._plumbing.asgi import App, Receive, Refusal, Scope, Send, openai_refusal
from interplay._plumbing.connections import Acceptor, Held, protocol


def free_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    # IPPROTO_TCP named, not left 0: asyncio's own loop turns Nagle's algorithm off
    # (TCP_NODELAY) only on sockets whose protocol says TCP, and the connections accepted
    # here inherit it. With it left on, a response written as head then body waits for the
    # client's delayed ACK: 40 ms per request on a kept-alive connection (uvloop sets it
    # either way).
    # An IPv6 literal (``::1``) is bound as one; any other host as IPv4.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def only_http(app: App) -> App:
    """``app`` for the connections it serves (``http``; ``lifespan``, should the server send
    it); any other type of connection is refused without reaching it: a WebSocket closed
    before it is accepted (a 403 to the handshake), anything else left unanswered. A plain
    function, not a coroutine: it hands uvicorn the app's own coroutine, adding no frame to
    each request."""
    def guarded(scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        kind = scope["type"]
        if kind == "http" or kind == "lifespan":
            return app(scope, receive, send)
        return _refuse(kind, send)

    return guarded


async def _refuse(kind: str, send: Send) -> None:
    if kind == "websocket":
        await send({"type": "websocket.close", "code": 1008})


def _server(app: App, *, graceful_s: float | None, header_timeout_s: float,
            body_timeout_s: float, held: Held, refusal: Refusal,
            write_timeout_s: float | None = None) -> Any:
    import uvicorn

    http = protocol(header_timeout_s, body_timeout_s, held, refusal, write_timeout_s)

    class _Server(uvicorn.Server):
        acceptor: Acceptor | None = None

        # The host process owns its signals: a server living inside a run must not take
        # Ctrl-C away from it.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            # uvicorn is given no socket to accept on: the listener's is accepted on by an
            # Acceptor, with uvicorn's protocol (what uvicorn itself would make).
            await super().startup(sockets=[])
            if not self.started:
                return
            [sock] = sockets or []

            def factory() -> asyncio.Protocol:
                return http(config=config, server_state=self.server_state,  # type: ignore[call-arg]
                                app_state=self.lifespan.state)

            try:
                self.acceptor = Acceptor(sock, factory, held)
            except NotImplementedError:  # a loop that cannot watch a socket (Windows' proactor)
                self.servers = [await asyncio.get_running_loop().create_server(
                    factory, sock=sock, backlog=config.backlog)]

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.acceptor is not None:
                self.acceptor.close()
            await super().shutdown(sockets=[])

    config = uvicorn.Config(only_http(app), http=http, ws="none", lifespan="off",
                            log_config=None, interface="asgi3", proxy_headers=False,
                            server_header=False, access_log=False, log_level="warning",
                            timeout_graceful_shutdown=graceful_s, backlog=2048)
    return _Server(config)


class AsgiServer:
    """Serves an ASGI app on 127.0.0.1 in the current event loop (``await start()``) or in a
    background thread with its own loop (``start_in_thread()``), with the limits of
    :mod:`interplay._plumbing.connections`. ``max_connections`` defaults to the share of the
    descriptor limit when the server starts. ``refusal`` is the app's refusal shape, which the
    listener's own refusals take too (the OpenAI error shape unless told). ``write_timeout_s``
    closes a connection whose client has read nothing of its answer for that long."""

    def __init__(self, app: App, *, host: str = "127.0.0.1", port: int = 0,
                 graceful_s: float | None = 2.0, header_timeout_s: float = 10.0,
                 body_timeout_s: float = 30.0, max_connections: int | None = None,
                 refusal: Refusal = openai_refusal,
                 write_timeout_s: float | None = None) -> None:
        self.app = app
        self._write_timeout_s = write_timeout_s
        self.refusal = refusal
        self.max_connections = max_connections
        self._held: Held | None = None
        self.host = host
        self._port = port
        self._graceful_s = graceful_s
        self._header_timeout_s = header_timeout_s
        self._body_timeout_s = body_timeout_s
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self.port = 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def connections_shed(self) -> int:
        """Connections closed to stay within ``max_connections``."""
        return 0 if self._held is None else self._held.shed

    async def start(self) -> None:
        sock = free_socket(self.host, self._port)
        self.port = sock.getsockname()[1]
        self._held = Held(self.max_connections or _fds.listener_share())
        self._server = _server(self.app, graceful_s=self._graceful_s,
                               header_timeout_s=self._header_timeout_s,
                               body_timeout_s=self._body_timeout_s, held=self._held,
                               refusal=self.refusal, write_timeout_s=self._write_timeout_s)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("server stopped while starting")
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._server = self._task = None

    def start_in_thread(self) -> None:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            from interplay._plumbing import aio

            loop = aio.new_event_loop()
            self._thread_loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                return
            ready.set()
            try:
                loop.run_until_complete(self._task)  # type: ignore[arg-type]
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="interplay-asgi", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise errors[0]

    def stop_thread(self) -> None:
        if self._thread is None:
            return
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout=10)
        self._thread = None
        self._thread_loop = None
        self._server = self._task = None

    def run_in_thread(self, coro: Coroutine[Any, Any, Any],
                      timeout_s: float = 10.0) -> bool | None:
        """Run ``coro`` to its end in the server's loop (thread mode) and wait for it: True
        once done, False if it did not end within ``timeout_s``, None when no thread serves
        (the coroutine is then closed unrun)."""
        loop = self._thread_loop
        if loop is None or self._thread is None or loop.is_closed():
            coro.close()
            return None
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return False
        return True

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` in the server's loop (thread mode) or now (loop mode)."""
        if self._thread_loop is not None and self._thread is not None:
            self._thread_loop.call_soon_threadsafe(fn)
        else:
            fn()
