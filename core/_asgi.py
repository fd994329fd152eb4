"""Small pieces shared by interplay's hand-written ASGI servers (interception, local model,
scripted model): serving an app on a free 127.0.0.1 port, reading a bounded body, and sending
JSON, SSE and OpenAI-style errors.

Every request gets a deadline for its request line and headers, a bound on their size, and a
deadline for its body (uvicorn has none of these: a client that sends its headers a byte at a
time, or less body than its Content-Length says, would hold its connection for ever).

Kept minimal on purpose: no routing framework, so per-request CPU stays low. No user logic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

from interplay import _codec

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


#: Headers are cut off past this many bytes (request line included), with a 431.
MAX_HEAD_BYTES = 64 << 10


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    """The client went away (or was cut off) before its body had all arrived."""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The request body; raises BodyTooLarge past ``limit`` bytes, ClientGone when the
    connection ends before the body does (a part of a body is never taken for all of it)."""
    parts: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ClientGone
        chunk = msg.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            parts.append(chunk)
        if not msg.get("more_body"):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def header(scope: Scope, name: bytes) -> bytes | None:
    for k, v in scope.get("headers") or ():
        if k == name:
            return v
    return None


async def send_bytes(send: Send, status: int, body: bytes,
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": (headers or JSON_HEADERS) +
                [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, obj: Any,
                    extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send_bytes(send, status, _codec.dumps(obj), JSON_HEADERS + (extra or []))


def error_body(message: str, *, type_: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


async def send_error(send: Send, status: int, message: str, *,
                     type_: str = "invalid_request_error", param: str | None = None,
                     code: str | None = None,
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send_json(send, status, error_body(message, type_=type_, param=param, code=code),
                    extra)


async def start_sse(send: Send, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status, "headers": SSE_HEADERS})


def free_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    # IPPROTO_TCP named, not left 0: asyncio's own loop turns Nagle's algorithm off
    # (TCP_NODELAY) only on sockets whose protocol says TCP, and the connections accepted
    # here inherit it. With it left on, a response written as head then body waits for the
    # client's delayed ACK: 40 ms per request on a kept-alive connection (uvloop sets it
    # either way).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _protocol(header_timeout_s: float, body_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with deadlines on each request's head and body and a size
    bound on its head. One timer per request serves both deadlines (what it costs is per
    request, on every request)."""
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

    def _answer(status: int, message: str) -> bytes:
        body = _codec.dumps(error_body(message, code={408: "request_timeout"}.get(status)))
        return (STATUS_LINE[status] + b"content-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))

    class _Protocol(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None
        _head_bytes = 0
        #: When the body must have arrived by (once the head has); None while reading the head.
        _body_deadline: float | None = None

        def _arm(self) -> None:
            self._disarm()
            self._head_bytes = 0
            self._body_deadline = None
            self._timer = self.loop.call_later(header_timeout_s, self._timed_out)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _timed_out(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            if self._body_deadline is not None:
                left = self._body_deadline - self.loop.time()
                if left > 0:  # the head came in time: the body has until its own deadline
                    self._timer = self.loop.call_later(left, self._timed_out)
                    return
                if self.cycle is None or not self.cycle.response_started:
                    # The app waits for the rest of the body: it sees the client gone, and
                    # its answer, should it send one, is dropped; this one is the client's.
                    # (An app that answered already, say a 413, has had its say.)
                    self.transport.write(_answer(
                        408, f"the request body did not arrive within {body_timeout_s:g} s"))
            self.transport.close()  # (a head that never ended has no request to answer)

        def _count(self, n: int) -> None:
            self._head_bytes += n
            if self._head_bytes > MAX_HEAD_BYTES:
                raise ValueError("request head too large")  # ends parsing: a 400, below

        def send_400_response(self, msg: str) -> None:
            if self._head_bytes <= MAX_HEAD_BYTES:
                super().send_400_response(msg)
                return
            self._disarm()
            self.transport.write(_answer(431, f"request headers exceed {MAX_HEAD_BYTES} bytes"))
            self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()  # a connection that sends nothing at all

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._timer is None or self._body_deadline is not None:
                self._arm()  # a request on a kept-alive connection

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value))
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._body_deadline = self.loop.time() + body_timeout_s
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

    return _Protocol


def _server(app: App, *, graceful_s: float | None, header_timeout_s: float,
            body_timeout_s: float) -> Any:
    import uvicorn

    class _Server(uvicorn.Server):
        # The host process owns its signals: a server living inside a run must not take
        # Ctrl-C away from it.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(app, http=_protocol(header_timeout_s, body_timeout_s),
                            lifespan="off", log_config=None, interface="asgi3",
                            proxy_headers=False, server_header=False, access_log=False,
                            log_level="warning",
                            timeout_graceful_shutdown=graceful_s, backlog=2048)
    return _Server(config)


class AsgiServer:
    """Serves an ASGI app on 127.0.0.1 in the current event loop (``await start()``) or in a
    background thread with its own loop (``start_in_thread()``)."""

    def __init__(self, app: App, *, host: str = "127.0.0.1", port: int = 0,
                 graceful_s: float | None = 2.0, header_timeout_s: float = 10.0,
                 body_timeout_s: float = 30.0) -> None:
        self.app = app
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
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        sock = free_socket(self.host, self._port)
        self.port = sock.getsockname()[1]
        self._server = _server(self.app, graceful_s=self._graceful_s,
                               header_timeout_s=self._header_timeout_s,
                               body_timeout_s=self._body_timeout_s)
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
            from interplay import _aio as aio

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
