"""What one connection to a listener may hold, and how many a listener holds: the limits every
app served by :mod:`interplay._plumbing.listener` gets, so a new listener cannot forget one:

- each request has a deadline for its request line and headers, a bound on their size, and a
  deadline for its body (uvicorn has none of these: a client that sends its headers a byte at a
  time, or less body than its Content-Length says, would hold its connection for ever);
- a listener holds at most a share of the process's descriptors
  (:func:`interplay._plumbing.fds.listener_share`); past it, a new connection closes the oldest one
  that is idle or still sending its request, so a client that opens connections and never
  finishes them cannot starve the process of descriptors (and the requests being answered are
  never cut);
- a WebSocket handshake is refused with a 403 before the app sees it, and another Upgrade (h2c)
  is ignored and its request answered as plain HTTP, body and all (llhttp stops reading at
  the Upgrade; a second parser frames the body that follows). None of it is logged as an
  error;
- what the listener answers itself (a 400 for a request it cannot parse, 408, 431, the 403)
  comes in the listener's own JSON refusal shape (:data:`interplay._plumbing.asgi.Refusal`);
- a connection closed while its client is still sending (a body refused before it was read,
  headers past their bound) is not reset: the answer is sent, then the end of the stream, and
  what still comes is read and dropped until the client closes its side or
  :data:`LINGER_S` passes (a close with unread bytes in the socket is a reset, which would
  take the answer with it); one kept alive after a body answered early is idle again once
  the body has come, its keep-alive deadline running, and may be shed.

This module owns accepting connections (:class:`Acceptor`), the connections held
(:class:`Held`) and uvicorn's protocol with the deadlines (:func:`protocol`); it must not
start a server or reach an app's requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import struct
from collections.abc import Callable
from typing import Any

from interplay._plumbing import codec as _codec
from interplay._plumbing.asgi import ByPath, Refusal, openai_refusal
from interplay.log import get_logger

log = get_logger("interplay.listener")

#: Headers are cut off past this many bytes (request line included), with a 431.
MAX_HEAD_BYTES = 64 << 10


#: How long a connection closed while its client still sends goes on reading (and dropping)
#: what comes, for the client to finish sending and read the answer.
LINGER_S = 2.0

_CODES = {400: "invalid_http", 408: "request_timeout", 403: "websocket_not_served",
          431: "headers_too_large"}


#: Connections accepted per turn of the event loop, at most (a quarter of the limit, for a
#: small one): between turns the loop reads what the accepted ones sent, so a connection is
#: never shed to make room for others before its request has had a chance to be read.
ACCEPT_BATCH = 64
#: After the system refused a descriptor to accept with (EMFILE, ENFILE, ENOBUFS), accepting
#: pauses this long; the connections wait in the kernel's queue meanwhile.
ACCEPT_RETRY_S = 0.1


class Held:
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


class Acceptor:
    """Accepts connections on a listening socket for one listener, within its limit: at most
    :data:`ACCEPT_BATCH` per turn of the loop, shedding the oldest idle or half-sent connection
    for each past the limit, and not at all while every connection held is being answered (new
    ones wait in the kernel's queue, in the order they came, holding none of this process's
    descriptors). uvicorn's own accepting (asyncio's or uvloop's) takes every connection
    waiting at once, descriptors or not, and would leave none to shed for."""

    def __init__(self, sock: socket.socket, factory: Callable[[], asyncio.Protocol],
                 held: Held) -> None:
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


class _Closer:
    """The transport a request's cycle (uvicorn's) answers through: the connection's own, but
    closing it while the request is still arriving lingers (``_Protocol._linger``) rather
    than resets. The cycle writes, asks whether the connection is closing, and closes it."""

    __slots__ = ("proto", "transport")

    def __init__(self, proto: Any) -> None:
        self.proto = proto
        self.transport: asyncio.Transport = proto.transport

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def is_closing(self) -> bool:
        return self.proto._lingering or self.transport.is_closing()

    def close(self) -> None:
        if self.proto._receiving:
            self.proto._linger()
        else:
            self.transport.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


class _UpgradeBody:
    """The body of a request that asked to upgrade to a protocol not served (h2c): llhttp
    takes such a request as ended with its head, so a parser of its own is handed the
    request's framing headers (Content-Length or Transfer-Encoding) and then what follows the
    head, and passes the body on to the connection's protocol as the first parser would."""

    __slots__ = ("done", "parser", "proto")

    def __init__(self, proto: Any, framing: list[tuple[bytes, bytes]]) -> None:
        import httptools

        self.proto = proto
        self.done = False
        self.parser = httptools.HttpRequestParser(self)
        self.parser.feed_data(b"POST / HTTP/1.1\r\n" + b"".join(
            name + b": " + value + b"\r\n" for name, value in framing) + b"\r\n")

    def feed(self, data: bytes) -> None:
        import httptools

        if self.done or not data:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if not self.done:  # a body its own framing cannot read: nothing to answer
                self.proto.transport.close()

    def on_body(self, body: bytes) -> None:
        if not self.done:
            self.proto.on_body(body)

    def on_message_complete(self) -> None:
        if not self.done:
            self.done = True
            self.proto.on_message_complete()


def protocol(header_timeout_s: float, body_timeout_s: float, held: Held,
             refusal: Refusal = openai_refusal,
             write_timeout_s: float | None = None) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with deadlines on each request's head and body, a size
    bound on its head, its place among the connections held (see :class:`Held`), WebSocket
    handshakes refused, an h2c request served as HTTP/1.1 with its body, and what it answers
    itself in the listener's refusal shape (``refusal``). One timer per request serves both
    deadlines (what it costs is per request, on every request). With ``write_timeout_s``, a
    connection whose client reads nothing of its answer for that long (its send buffer full
    all the while) is closed: an unread stream holds no connection, and no answer, for ever."""
    import httptools
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

    def _answer(status: int, message: str, url: bytes = b"") -> bytes:
        if isinstance(refusal, ByPath):
            path = url.split(b"?", 1)[0].decode("latin-1")
            body = _codec.dumps(refusal.shape(path, status, message, _CODES.get(status)))
        else:
            body = _codec.dumps(refusal(message, _CODES.get(status)))
        return (STATUS_LINE[status] + b"content-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))

    class _Protocol(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None
        _head_bytes = 0
        #: When the body must have arrived by (once the head has); None while reading the head.
        _body_deadline: float | None = None
        #: The body of an h2c request, read past the Upgrade (see :class:`_UpgradeBody`).
        _upgrade_body: _UpgradeBody | None = None
        #: The request's target as far as it arrived (uvicorn's, set once a request begins).
        url = b""
        #: A request has begun and its body has not all arrived.
        _receiving = False
        #: Closing once the client has sent what it was sending (see ``_linger``).
        _lingering = False
        #: Set while the client reads none of what is sent (see write_timeout_s).
        _stall: asyncio.TimerHandle | None = None

        def pause_writing(self) -> None:
            super().pause_writing()
            if write_timeout_s is not None and self._stall is None:
                self._stall = self.loop.call_later(write_timeout_s, self._stalled)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None

        def _stalled(self) -> None:
            # Closing or not (a half-closed client's transport closes only once what it
            # holds is sent, which is never): aborted, and the app's sends then return.
            self._stall = None
            log.info("listener.unread_answer_closed", reason_code="client_not_reading",
                     write_timeout_s=write_timeout_s)
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                # A reset, not a FIN queued behind what the client never reads: the kernel
                # would hold the orphaned connection and its buffer for minutes.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
            self.transport.abort()

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
                        408, f"the request body did not arrive within {body_timeout_s:g} s",
                        self.url))
                    self._linger()
                    return
            self.transport.close()  # (a head that never ended has no request to answer)

        def _linger(self) -> None:
            """Close without resetting: our side ends (after the answer written), what the
            client still sends is read and dropped, and the connection closes when the client
            closes its side (``eof_received``) or after LINGER_S."""
            transport = self.transport
            if self._lingering or transport.is_closing():
                return
            self._lingering = True
            self._disarm()
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                # The app is done with this request as with a client gone: what it reads ends,
                # and what it still sends goes nowhere.
                cycle.disconnected = True
                cycle.message_event.set()
            if not transport.can_write_eof():
                transport.close()
                return
            transport.write_eof()
            transport.resume_reading()  # the cycle's flow control may have paused it
            self._timer = self.loop.call_later(LINGER_S, transport.close)

        def _count(self, n: int) -> None:
            self._head_bytes += n
            if self._head_bytes > MAX_HEAD_BYTES:
                raise ValueError("request head too large")  # ends parsing: a 400, below

        def send_400_response(self, msg: str) -> None:
            self._disarm()
            if self._head_bytes <= MAX_HEAD_BYTES:
                self.transport.write(_answer(400, "the request is not valid HTTP/1.1",
                                             self.url))
            else:
                self.transport.write(_answer(
                    431, f"request headers exceed {MAX_HEAD_BYTES} bytes", self.url))
            self._linger()  # the client may still be sending what could not be parsed

        def data_received(self, data: bytes) -> None:
            # uvicorn's, but for an Upgrade: where the head ended is where an h2c request's
            # body begins, which uvicorn's drops; and a lingering connection drops it all.
            if self._lingering:
                return
            if self._upgrade_body is not None:
                self._upgrade_body.feed(data)
                return
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            except httptools.HttpParserUpgrade as exc:
                if self._upgrade_body is not None:
                    self._upgrade_body.feed(data[exc.args[0]:])

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._closer = _Closer(self)
            self._arm()  # a connection that sends nothing at all
            held.all.add(self)
            held.sheddable[self] = None
            if held.paused:  # accepting waited for a connection it may now shed
                held.room()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None
            self._drop()
            super().connection_lost(exc)
            if held.paused:
                held.room()

        def on_message_begin(self) -> None:
            self._receiving = True
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
            timer = self._timer
            if timer is not None and timer.when() > self._body_deadline:
                # The head's deadline is later than the body's (a body_timeout_s shorter than
                # header_timeout_s): the one timer fires at the body's.
                timer.cancel()
                self._timer = self.loop.call_at(self._body_deadline, self._timed_out)
            if self.parser.should_upgrade():
                if self._get_upgrade() == b"websocket":
                    self._disarm()
                    self.transport.write(_answer(
                        403, "this server does not serve WebSocket connections", self.url))
                    self.transport.close()
                    # Answered: what the parser still reads of it goes nowhere (uvicorn's
                    # own callbacks skip a request whose response is complete).
                    self.cycle = _Answered()  # type: ignore[assignment]
                    return
                super().on_headers_complete()
                self.cycle.transport = self._closer  # type: ignore[assignment]
                # Another protocol (h2c) is ignored, as a server may: the request is answered
                # as plain HTTP, its body read by a parser of its own, and the connection,
                # whose parser stopped at the Upgrade, ends.
                self.cycle.keep_alive = False
                framing = [(name, value) for name, value in self.headers
                           if name in (b"content-length", b"transfer-encoding")]
                if framing and framing != [(b"content-length", b"0")]:
                    self._upgrade_body = _UpgradeBody(self, framing)
                return
            super().on_headers_complete()
            self.cycle.transport = self._closer  # type: ignore[assignment]

        def on_message_complete(self) -> None:
            if self._upgrade_body is not None and not self._upgrade_body.done:
                return  # llhttp ends an h2c request at its head: its body is still to come
            self._receiving = False
            self._disarm()
            if self.cycle is not None and self.cycle.response_complete:
                # Answered before its body had all come (a 413 from its Content-Length): the
                # connection is idle from now on, as after any answer (the data that came
                # meanwhile stopped uvicorn's keep-alive deadline: it runs again).
                self._unset_keepalive_if_required()
                if not self.transport.is_closing():
                    self.timeout_keep_alive_task = self.loop.call_later(
                        self.timeout_keep_alive, self.timeout_keep_alive_handler)
                return
            held.sheddable.pop(self, None)  # being answered: never shed
            super().on_message_complete()

        def on_response_complete(self) -> None:
            if self._lingering:  # closing: no keep-alive, no next request
                return
            super().on_response_complete()
            if self in held.all:
                held.sheddable[self] = None  # idle, kept alive: the newest to go
                if held.paused:
                    held.room()

    return _Protocol
