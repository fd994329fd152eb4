"""Small pieces shared by interplay's ASGI servers (interception, local model, scripted model,
and any other listener interplay opens): serving an app on a free 127.0.0.1 port, reading a
bounded body, and sending JSON, SSE and OpenAI-style errors.

Every listener served here gets the same limits, so a new one cannot forget one:

- each request has a deadline for its request line and headers, a bound on their size, and a
  deadline for its body (uvicorn has none of these: a client that sends its headers a byte at a
  time, or less body than its Content-Length says, would hold its connection for ever);
- a listener holds at most a share of the process's descriptors
  (:func:`interplay._fds.listener_share`); past it, a new connection closes the oldest one
  that is idle or still sending its request, so a client that opens connections and never
  finishes them cannot starve the process of descriptors (and the requests being answered are
  never cut);
- HTTP only: WebSockets are not negotiated; a WebSocket handshake is refused with a 403 before
  the app sees it, another Upgrade (h2c) is ignored and its request answered as plain HTTP,
  and a connection of any type but ``http`` (and ``lifespan``) is refused without reaching
  the app. None of it is logged as an error.

Kept minimal on purpose: no routing framework, so per-request CPU stays low. No user logic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

from interplay import _codec, _fds
from interplay.log import get_logger

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

log = get_logger("interplay.listener")

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


_CODES = {408: "request_timeout", 403: "websocket_not_served"}


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


#: Connections accepted per turn of the event loop, at most (a quarter of the limit, for a
#: small one): between turns the loop reads what the accepted ones sent, so a connection is
#: never shed to make room for others before its request has had a chance to be read.
ACCEPT_BATCH = 64
#: After the system refused a descriptor to accept with (EMFILE, ENFILE, ENOBUFS), accepting
#: pauses this long; the connections wait in the kernel's queue meanwhile.
ACCEPT_RETRY_S = 0.1


class _Held:
    """The connections one listener holds (accepted, and being set up), and which of them may
    be shed: those idle between requests or still sending one, oldest first (a dict keeps
    insertion order). ``room`` is called when one may be taken in again."""

    __slots__ = ("all", "limit", "paused", "pending", "room", "shed", "sheddable")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.all: set[Any] = set()
        self.sheddable: dict[Any, None] = {}
        #: Accepted, their protocol not yet made.
        self.pending = 0
        self.shed = 0
        #: Whether accepting waits for ``room()`` (checked on every request: a flag, no call).
        self.paused = False
        self.room: Callable[[], None] = lambda: None

    @property
    def full(self) -> bool:
        return len(self.all) + self.pending >= self.limit

    def shed_oldest(self) -> bool:
        """Close the oldest connection that is idle or still sending its request; False when
        every one is being answered."""
        if not self.sheddable:
            return False
        oldest = next(iter(self.sheddable))
        oldest._drop()
        oldest.transport.close()
        self.shed += 1
        if self.shed == 1:
            log.warning("listener.shedding", max_connections=self.limit,
                        reason_code="connection_limit")
        return True


class _Acceptor:
    """Accepts connections on a listening socket for one listener, within its limit: at most
    :data:`ACCEPT_BATCH` per turn of the loop, shedding the oldest idle or half-sent connection
    for each past the limit, and not at all while every connection held is being answered (new
    ones wait in the kernel's queue, in the order they came, holding none of this process's
    descriptors). uvicorn's own accepting (asyncio's or uvloop's) takes every connection
    waiting at once, descriptors or not, and would leave none to shed for."""

    def __init__(self, sock: socket.socket, factory: Callable[[], asyncio.Protocol],
                 held: _Held) -> None:
        self.loop = asyncio.get_running_loop()
        self.sock = sock
        self.factory = factory
        self.held = held
        self.batch = max(1, min(ACCEPT_BATCH, held.limit // 4))
        self.reading = False
        self.closed = False
        self._failing = False
        self._connecting: set[asyncio.Task[None]] = set()
        held.room = self.resume
        self.resume()

    def resume(self) -> None:
        if not self.reading and not self.closed:
            self.reading = True
            self.held.paused = False
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def _pause(self) -> None:
        if self.reading:
            self.reading = False
            self.held.paused = True
            self.loop.remove_reader(self.sock.fileno())

    def _accept(self) -> None:
        held = self.held
        for _ in range(self.batch):
            if held.full and not held.shed_oldest():
                self._pause()  # resumed when a connection ends or falls idle
                return
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                # Out of descriptors or buffers: wait a little, connections stay queued.
                if not self._failing:
                    log.warning("listener.accept_failed", reason_code=_errno_name(exc),
                                max_connections=held.limit)
                self._failing = True
                self._pause()
                self.loop.call_later(ACCEPT_RETRY_S, self.resume)
                return
            self._failing = False
            conn.setblocking(False)
            held.pending += 1
            task = self.loop.create_task(self._connect(conn))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn)
        except BaseException:
            conn.close()
            raise
        finally:
            self.held.pending -= 1

    def close(self) -> None:
        self.closed = True
        self._pause()
        for task in self._connecting:
            task.cancel()
        self.sock.close()


class _Answered:
    """The request/response cycle of a request answered before it reached the app."""

    response_complete = True

    def __init__(self) -> None:
        self.message_event = asyncio.Event()


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


def _protocol(header_timeout_s: float, body_timeout_s: float,
              held: _Held) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with deadlines on each request's head and body, a size
    bound on its head, its place among the connections held (see :class:`_Held`), and
    WebSocket handshakes refused. One timer per request serves both deadlines (what it costs
    is per request, on every request)."""
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

    def _answer(status: int, message: str) -> bytes:
        body = _codec.dumps(error_body(message, code=_CODES.get(status)))
        return (STATUS_LINE[status] + b"content-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))

    class _Protocol(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None
        _head_bytes = 0
        #: When the body must have arrived by (once the head has); None while reading the head.
        _body_deadline: float | None = None

        def _drop(self) -> None:
            held.all.discard(self)
            held.sheddable.pop(self, None)

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
            held.all.add(self)
            held.sheddable[self] = None
            if held.paused:  # accepting waited for a connection it may now shed
                held.room()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._drop()
            super().connection_lost(exc)
            if held.paused:
                held.room()

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
            if self.parser.should_upgrade():
                if self._get_upgrade() == b"websocket":
                    self._disarm()
                    self.transport.write(_answer(
                        403, "this server does not serve WebSocket connections"))
                    self.transport.close()
                    # Answered: what the parser still reads of it goes nowhere (uvicorn's
                    # own callbacks skip a request whose response is complete).
                    self.cycle = _Answered()  # type: ignore[assignment]
                    return
                super().on_headers_complete()
                # Another protocol (h2c) is ignored, as a server may: the request is answered
                # as plain HTTP, and the connection, whose parser stopped at the Upgrade, ends.
                self.cycle.keep_alive = False
                return
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            held.sheddable.pop(self, None)  # being answered: never shed
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self in held.all:
                held.sheddable[self] = None  # idle, kept alive: the newest to go
                if held.paused:
                    held.room()

        def _unsupported_upgrade_warning(self) -> None:
            pass  # answered above: refused (a WebSocket), or served as plain HTTP

    return _Protocol


def _server(app: App, *, graceful_s: float | None, header_timeout_s: float,
            body_timeout_s: float, held: _Held) -> Any:
    import uvicorn

    protocol = _protocol(header_timeout_s, body_timeout_s, held)

    class _Server(uvicorn.Server):
        acceptor: _Acceptor | None = None

        # The host process owns its signals: a server living inside a run must not take
        # Ctrl-C away from it.
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            # uvicorn is given no socket to accept on: the listener's is accepted on by an
            # _Acceptor, with uvicorn's protocol (what uvicorn itself would make).
            await super().startup(sockets=[])
            if not self.started:
                return
            [sock] = sockets or []

            def factory() -> asyncio.Protocol:
                return protocol(config=config, server_state=self.server_state,  # type: ignore[call-arg]
                                app_state=self.lifespan.state)

            try:
                self.acceptor = _Acceptor(sock, factory, held)
            except NotImplementedError:  # a loop that cannot watch a socket (Windows' proactor)
                self.servers = [await asyncio.get_running_loop().create_server(
                    factory, sock=sock, backlog=config.backlog)]

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.acceptor is not None:
                self.acceptor.close()
            await super().shutdown(sockets=[])

    config = uvicorn.Config(only_http(app), http=protocol, ws="none", lifespan="off",
                            log_config=None, interface="asgi3", proxy_headers=False,
                            server_header=False, access_log=False, log_level="warning",
                            timeout_graceful_shutdown=graceful_s, backlog=2048)
    return _Server(config)


class AsgiServer:
    """Serves an ASGI app on 127.0.0.1 in the current event loop (``await start()``) or in a
    background thread with its own loop (``start_in_thread()``), with the limits of the
    module's docstring. ``max_connections`` defaults to the share of the descriptor limit
    when the server starts."""

    def __init__(self, app: App, *, host: str = "127.0.0.1", port: int = 0,
                 graceful_s: float | None = 2.0, header_timeout_s: float = 10.0,
                 body_timeout_s: float = 30.0, max_connections: int | None = None) -> None:
        self.app = app
        self.max_connections = max_connections
        self._held: _Held | None = None
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

    @property
    def connections_shed(self) -> int:
        """Connections closed to stay within ``max_connections``."""
        return 0 if self._held is None else self._held.shed

    async def start(self) -> None:
        sock = free_socket(self.host, self._port)
        self.port = sock.getsockname()[1]
        self._held = _Held(self.max_connections or _fds.listener_share())
        self._server = _server(self.app, graceful_s=self._graceful_s,
                               header_timeout_s=self._header_timeout_s,
                               body_timeout_s=self._body_timeout_s, held=self._held)
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
