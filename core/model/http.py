"""A lean HTTP/1.1 client for one origin: the model client's hot path.

:class:`HttpPool` keeps keep-alive connections to one ``http``/``https`` origin (a base URL,
optionally with a path prefix such as ``/v1``) and sends requests whose body is already bytes;
:class:`HttpResponse` gives the status, the headers and the body, whole (:meth:`~HttpResponse.read`)
or as it arrives (:meth:`~HttpResponse.aiter_bytes`, for server-sent events). It is built on
asyncio protocols and httptools' C parser (llhttp) so that a request costs a small fraction of
the CPU of a general-purpose client: the model client only ever POSTs JSON to one origin.

This module owns the connections, the wire format (Content-Length, chunked and close-delimited
bodies, gzip/deflate), the timeouts and the one transparent retry of a request that met a
keep-alive connection the server had just closed. It must not: follow redirects, use proxies,
keep cookies (the model client needs none of them), retry anything once a response byte has
arrived (retry policy belongs to the model client), or log anything at all: headers and bodies
carry API keys and user data.

Errors: a connection that cannot be made or breaks raises :class:`HttpConnectionError` (an
``OSError``), a malformed response :class:`HttpProtocolError` (a subclass), and a wait that
exceeds the connect or read timeout ``TimeoutError``, which are the bases the model client
classifies as ``connection_error`` and ``timeout``.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import zlib
from collections import deque
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httptools

from interplay import _aio as aio
from interplay.errors import InterplayError

__all__ = ["Headers", "HttpConnectionError", "HttpPool", "HttpProtocolError", "HttpResponse"]

#: Unread streamed body above which the socket stops being read until the reader catches up.
BUFFER_LIMIT = 1 << 20

# A header name is an RFC 9110 token; a value must not break the head (CR, LF, NUL).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\r\n\0]")
_BAD_PATH = re.compile(r"[\s\0]")
# Set by the pool itself, never by a caller: two framings or two hosts are request smuggling.
_RESERVED = frozenset({"host", "content-length", "transfer-encoding", "connection"})


class HttpConnectionError(OSError):
    """The connection could not be made, or broke before the response ended."""


class HttpProtocolError(HttpConnectionError):
    """The server's response is not valid HTTP/1.1."""


class _StaleConnection(HttpConnectionError):
    """A reused keep-alive connection was closed before any response byte: safe to resend."""


class Headers(dict[str, str]):
    """Response headers: lower-cased names to the last value received; lookups by any case."""

    __slots__ = ()

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())


class _Connection(asyncio.Protocol):
    """One keep-alive connection and the state of the response being received on it.

    Only one request is in flight at a time (no pipelining). The parser's callbacks fill the
    response state; a reader waits on :meth:`wait` until the next event (headers, body bytes,
    the end, an error) or the read timeout."""

    __slots__ = (
        "_decoder", "_head_only", "_informational", "_loop", "_parser", "_parser_dirty",
        "_paused", "_pool", "_until_close", "_waiter", "buffered", "busy", "chunks",
        "closed", "complete", "error", "got_bytes", "headers", "headers_done", "keep_alive",
        "reused", "slot", "status", "transport",
    )

    def __init__(self, pool: HttpPool, loop: asyncio.AbstractEventLoop) -> None:
        self._pool = pool
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._parser_dirty = False
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self.slot = True  # holds one of the pool's max_connections places
        self.busy = True  # a caller owns it (not in the idle list)
        self.reused = False  # completed an exchange before: a stale close may be retried
        self.closed = False
        self._reset(False)

    def _reset(self, head_only: bool) -> None:
        self._head_only = head_only
        self._informational = False
        self._until_close = False
        self._decoder: Any = None
        self.status = 0
        self.headers = Headers()
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.got_bytes = False
        self.error: BaseException | None = None

    # -- the exchange (called by the pool and the response) ---------------------------------

    def send(self, data: bytes, head_only: bool) -> None:
        """Start one exchange: reset the response state and write the request."""
        self._reset(head_only)
        if self._parser_dirty:
            self._parser = httptools.HttpResponseParser(self)
            self._parser_dirty = False
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            self.error = self._closed_error()
            return
        transport.write(data)

    async def wait(self) -> None:
        """Until the next event on this connection, or the read timeout (which closes it)."""
        fut = self._loop.create_future()
        self._waiter = fut
        timer = aio.call_later(self._loop, self._pool.read_timeout_s, self._timed_out, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._waiter = None

    def take(self) -> bytes:
        """All body bytes received and not yet taken; resumes a paused socket."""
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.chunks = []
        self.buffered = 0
        if self._paused:
            self._paused = False
            if self.transport is not None and not self.closed:
                self.transport.resume_reading()
        return data

    def fail(self, exc: BaseException) -> None:
        """End the exchange with ``exc`` and drop the connection."""
        if self.error is None and not self.complete:
            self.error = exc
        self._wake()
        self.abort()

    def abort(self) -> None:
        self.keep_alive = False
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _timed_out(self, fut: asyncio.Future[None]) -> None:
        if not fut.done():
            self.fail(TimeoutError(f"no response from {self._pool.origin} within "
                                   f"{self._pool.read_timeout_s:g}s"))

    def _closed_error(self) -> HttpConnectionError:
        what = f"connection to {self._pool.origin} closed before a response"
        return _StaleConnection(what) if self.reused else HttpConnectionError(what)

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            # Bytes nobody asked for (a 408 before an idle close, say): the framing is lost.
            self.abort()
            return
        self.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.fail(HttpProtocolError(f"{self._pool.origin} switched protocols"))
        except httptools.HttpParserError as exc:
            cause = exc.__context__ if isinstance(exc.__context__, zlib.error) else exc
            self.fail(HttpProtocolError(f"malformed response from {self._pool.origin}: "
                                        f"{cause}"))

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost settles the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.busy:
            self._pool._lost_idle(self)
            return
        if not self.complete and self.error is None:
            if self.headers_done and self._until_close:
                self._end_body()
                self.complete = True
            elif not self.got_bytes:
                self.error = self._closed_error()
            else:
                self.error = HttpConnectionError(
                    f"connection to {self._pool.origin} closed before the response ended")
        self.keep_alive = False
        self._wake()

    def pause_writing(self) -> None:
        pass  # the request body is already in memory; the transport buffers it

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            # More bytes after a whole response: the connection can't be trusted again.
            self.keep_alive = False
            return
        self.headers = Headers()

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.complete:
            dict.__setitem__(self.headers, name.decode("latin-1").lower(),
                             value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        parser = self._parser
        status = parser.get_status_code()
        if status < 200:
            # 1xx interim answers (100 Continue, 103 Early Hints): the real one follows.
            self._informational = True
            return
        self.status = status
        self.headers_done = True
        headers = self.headers
        encoding = dict.get(headers, "content-encoding")
        if encoding is not None:
            self._decoder = _decoder(encoding)
        if self._head_only:
            # llhttp doesn't know this answered a HEAD and would wait for the body: a fresh
            # parser for the next request.
            self.keep_alive = parser.should_keep_alive()
            self.complete = True
            self._parser_dirty = True
        elif status != 204 and status != 304:
            te = dict.get(headers, "transfer-encoding")
            if te is None:
                self._until_close = dict.get(headers, "content-length") is None
            else:
                self._until_close = not te.rstrip().lower().endswith("chunked")
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.complete:
            return
        if self._decoder is not None:
            body = self._decoder.decompress(body)  # a zlib.error fails the parse
            if not body:
                return
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > BUFFER_LIMIT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.complete:
            return
        if self._informational:
            self._informational = False
            return
        self._end_body()
        self.keep_alive = self._parser.should_keep_alive()
        self.complete = True
        self._wake()

    def _end_body(self) -> None:
        decoder = self._decoder
        if decoder is not None:
            self._decoder = None
            tail = decoder.flush()
            if tail:
                self.chunks.append(tail)
                self.buffered += len(tail)


class _Decoder:
    """zlib for ``gzip`` and ``deflate``; ``deflate`` may be raw or zlib-wrapped in the wild."""

    __slots__ = ("_raw_tried", "_z")

    def __init__(self, wbits: int) -> None:
        self._z = zlib.decompressobj(wbits)
        self._raw_tried = wbits != zlib.MAX_WBITS

    def decompress(self, data: bytes) -> bytes:
        try:
            return self._z.decompress(data)
        except zlib.error:
            if self._raw_tried:
                raise
            self._raw_tried = True
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._z.decompress(data)

    def flush(self) -> bytes:
        return self._z.flush()


def _decoder(encoding: str) -> _Decoder | None:
    value = encoding.strip().lower()
    if value in ("gzip", "x-gzip"):
        return _Decoder(16 + zlib.MAX_WBITS)
    if value == "deflate":
        return _Decoder(zlib.MAX_WBITS)
    return None  # identity, or one we don't decode: the caller sees the header and the bytes


class HttpResponse:
    """A response whose head has arrived. Read the body once, with :meth:`read` or
    :meth:`aiter_bytes`; reading it to the end (or :meth:`release` / :meth:`aclose` /
    leaving ``async with``) hands the connection back to the pool, or closes it if the body
    was not received whole or the server won't keep it alive."""

    __slots__ = ("_body", "_conn", "_pool", "_streamed", "headers", "status")

    def __init__(self, pool: HttpPool, conn: _Connection) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self._body: bytes | None = None
        self._streamed = False
        self.status: int = conn.status
        self.headers: Headers = conn.headers

    async def read(self) -> bytes:
        """The whole body (decoded if gzip/deflate); the same bytes on a second call."""
        if self._body is not None:
            return self._body
        if self._streamed:
            raise RuntimeError("the body was already consumed by aiter_bytes()")
        conn = self._conn
        if conn is None:
            raise RuntimeError("the response was released before its body was read")
        try:
            if conn.complete:
                body = conn.take()
            else:
                parts: list[bytes] = []
                while True:
                    if conn.chunks:
                        parts.append(conn.take())
                    if conn.complete:
                        break
                    if conn.error is not None:
                        raise conn.error
                    await conn.wait()
                if conn.chunks:
                    parts.append(conn.take())
                body = b"".join(parts)
        except BaseException:
            self.release()
            raise
        self._body = body
        self.release()
        return body

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body in pieces as they arrive (all that is buffered at each step)."""
        if self._body is not None or self._streamed:
            raise RuntimeError("the body was already consumed")
        self._streamed = True
        conn = self._conn
        if conn is None:
            raise RuntimeError("the response was released before its body was read")
        try:
            while True:
                if conn.chunks:
                    yield conn.take()
                    continue
                if conn.complete:
                    break
                if conn.error is not None:
                    raise conn.error
                await conn.wait()
        finally:
            # Also on an early break or an error: release() closes a connection whose body
            # was not received whole.
            self.release()

    def release(self) -> None:
        """Give the connection back (body received whole, keep-alive) or close it.
        Idempotent; the response cannot be read afterwards."""
        conn = self._conn
        if conn is not None:
            self._conn = None
            self._pool._done(conn)

    async def aclose(self) -> None:
        self.release()

    async def __aenter__(self) -> HttpResponse:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def __del__(self) -> None:
        # A response dropped unreleased would hold its pool place for good.
        conn = self._conn
        if conn is not None and not conn._loop.is_closed():
            self._conn = None
            try:
                self._pool._done(conn)
            except Exception:  # a finalizer must not raise
                pass

    def __repr__(self) -> str:
        return f"<HttpResponse {self.status}>"


def _header_block(headers: Mapping[str, str]) -> bytes:
    lines = []
    for name, value in headers.items():
        if (_TOKEN.fullmatch(name) is None or _BAD_VALUE.search(value) is not None
                or name.lower() in _RESERVED):
            raise ValueError(f"header {name[:40]!r} is not allowed here (a bad name, a line "
                             "break in its value, or one the pool sets itself)")
        lines.append(f"{name}: {value}\r\n")
    try:
        return "".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        raise ValueError("request header values must be latin-1 text") from None


class HttpPool:
    """Keep-alive HTTP/1.1 connections to one origin, at most ``max_connections`` open.

    Idle connections are reused last-in first-out (the warmest first); callers beyond the
    limit wait first-in first-out. The pool belongs to the event loop that first uses it;
    once that loop is closed, the next use starts afresh on the new loop.

    ``read_timeout_s`` bounds each wait for the next bytes (the head, then each piece of the
    body), not the whole response: a long stream that keeps flowing never times out."""

    def __init__(self, base_url: str, *, max_connections: int = 64,
                 connect_timeout_s: float = 10.0, read_timeout_s: float = 600.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https"):
            raise ValueError("HttpPool needs an http:// or https:// base_url")
        if parts.username is not None or parts.password is not None:
            # Not echoed: it holds a credential.
            raise ValueError("HttpPool base_url must not hold credentials; "
                             "send an Authorization header instead")
        if parts.query or parts.fragment:
            raise ValueError("HttpPool base_url must not have a query or a fragment")
        host = parts.hostname
        if not host:
            raise ValueError("HttpPool base_url has no host")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        https = parts.scheme == "https"
        port = parts.port or (443 if https else 80)
        netloc_host = f"[{host}]" if ":" in host else host
        hostport = netloc_host if port == (443 if https else 80) else f"{netloc_host}:{port}"
        self.host = host
        self.port = port
        self.origin = f"{parts.scheme}://{hostport}"
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._ssl: ssl.SSLContext | None = (
            (ssl_context or ssl.create_default_context()) if https else None)
        self._prefix = parts.path.rstrip("/")
        self._host_line = f"Host: {hostport}\r\n"
        self._header_cache: tuple[dict[str, str], bytes] | None = None
        self._starts: dict[tuple[str, str], bytes] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._start_over()

    def _start_over(self) -> None:
        self._idle: list[_Connection] = []
        self._waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self._conns: set[_Connection] = set()
        self._open = 0  # places taken: connections open or being opened

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is not None and not self._loop.is_closed():
            raise InterplayError("this HttpPool is in use from another event loop; "
                                 "make one pool per event loop")
        # The old loop is closed and its connections with it: nothing left to close.
        self._start_over()
        self._loop = loop

    # -- requests ----------------------------------------------------------------------------

    async def request(self, method: str, path: str, *,
                      headers: Mapping[str, str] | None = None,
                      body: bytes = b"") -> HttpResponse:
        """Send ``method`` to the base URL's path + ``path`` (which starts with ``/`` and may
        hold a query) and return once the response head has arrived.

        A reused connection the server closed before answering is retried once on a fresh
        one; nothing else is retried. Raises :class:`HttpConnectionError`,
        :class:`HttpProtocolError` or ``TimeoutError``."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind(loop)
        if self._closed:
            raise HttpConnectionError(f"the pool for {self.origin} is closed")
        data = self._encode(method, path, headers, body)
        head_only = method == "HEAD"
        idle = self._idle
        # The common case, without a coroutine: an idle connection still open.
        conn = idle.pop() if idle and not idle[-1].closed else await self._acquire(loop)
        conn.busy = True
        try:
            conn.send(data, head_only)
            while not conn.headers_done:
                if conn.error is not None:
                    raise conn.error
                await conn.wait()
        except _StaleConnection:
            # The keep-alive race: the server closed this idle connection as we sent. Its
            # place goes to one fresh connection, and that one is never retried.
            conn.abort()
            conn.slot = False
            self._conns.discard(conn)
            conn = await self._connect(loop)
            try:
                conn.send(data, head_only)
                while not conn.headers_done:
                    if conn.error is not None:
                        raise conn.error from None
                    await conn.wait()
            except BaseException:
                self._done(conn)
                raise
        except BaseException:
            self._done(conn)
            raise
        return HttpResponse(self, conn)

    def _encode(self, method: str, path: str, headers: Mapping[str, str] | None,
                body: bytes) -> bytes:
        key = (method, path)
        start = self._starts.get(key)
        if start is None:
            start = self._starts[key] = self._start(method, path)
        if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
            start += b"Content-Length: %d\r\n" % len(body)
        block = b""
        if headers:
            # A caller sends the same few headers every time (the model client's are fixed
            # per endpoint): they are checked and encoded once, while they stay equal.
            cached = self._header_cache
            if cached is not None and cached[0] == headers:
                block = cached[1]
            else:
                block = _header_block(headers)
                self._header_cache = (dict(headers), block)
        return b"".join((start, block, b"\r\n", body))

    def _start(self, method: str, path: str) -> bytes:
        """The request line and Host header for ``method`` and ``path``, checked and encoded
        (once per pair: a client sends the same one every time)."""
        if not path.startswith("/") or _BAD_PATH.search(path) is not None:
            raise ValueError("the request path must start with '/' and hold no whitespace")
        if _TOKEN.fullmatch(method) is None:
            raise ValueError("the request method must be a token such as POST")
        if len(self._starts) >= 64:  # paths with ids in them: keep the cache small
            self._starts.clear()
        try:
            return f"{method} {self._prefix}{path} HTTP/1.1\r\n{self._host_line}".encode(
                "latin-1")
        except UnicodeEncodeError:
            raise ValueError("the request path must be latin-1 text") from None

    # -- the pool ----------------------------------------------------------------------------

    async def _acquire(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        idle = self._idle
        while idle:
            conn = idle.pop()
            conn.busy = True
            if not conn.closed:
                return conn
            self._free(conn)
        if self._open < self.max_connections:
            self._open += 1
            return await self._connect(loop)
        fut: asyncio.Future[_Connection | None] = loop.create_future()
        self._waiters.append(fut)
        try:
            got = await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                # Handed a connection (or a place) just as we were cancelled: pass it on.
                handed = fut.result()
                if handed is None:
                    self._give_place()
                else:
                    self._done(handed)
            raise
        if got is None:  # a place freed up: the count already holds it for us
            return await self._connect(loop)
        return got

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        """A new connection in a place already counted in ``_open`` (given back on failure)."""
        conn = _Connection(self, loop)
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await loop.create_connection(
                    lambda: conn, self.host, self.port, ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None)
        except BaseException as exc:
            conn.closed = True
            self._free(conn)
            if isinstance(exc, TimeoutError):
                raise TimeoutError(f"connecting to {self.origin} timed out after "
                                   f"{self.connect_timeout_s:g}s") from None
            if isinstance(exc, ssl.SSLError | ssl.CertificateError):
                raise HttpConnectionError(
                    f"TLS with {self.origin} failed: {exc}") from None
            if isinstance(exc, OSError):
                raise HttpConnectionError(
                    f"cannot connect to {self.origin}: {exc.strerror or exc}") from None
            raise
        if self._closed:
            conn.abort()
            self._free(conn)
            raise HttpConnectionError(f"the pool for {self.origin} is closed")
        self._conns.add(conn)
        return conn

    def _done(self, conn: _Connection) -> None:
        """A caller is finished with ``conn``: keep it for the next request, or close it."""
        if (conn.complete and conn.keep_alive and not conn.closed and conn.error is None
                and not self._closed and conn._loop is self._loop):
            conn.reused = True
            waiters = self._waiters
            while waiters:
                fut = waiters.popleft()
                if not fut.done():
                    fut.set_result(conn)
                    return
            conn.busy = False
            self._idle.append(conn)
            return
        conn.abort()
        self._conns.discard(conn)
        self._free(conn)

    def _lost_idle(self, conn: _Connection) -> None:
        """An idle connection closed by the server (or by us)."""
        self._conns.discard(conn)
        try:
            self._idle.remove(conn)
        except ValueError:
            pass
        self._free(conn)

    def _free(self, conn: _Connection) -> None:
        """Give back ``conn``'s place (once)."""
        if conn.slot:
            conn.slot = False
            if conn._loop is self._loop and not self._closed:
                self._give_place()

    def _give_place(self) -> None:
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the place passes to the waiter, still counted
                return
        self._open -= 1

    async def aclose(self) -> None:
        """Close every connection. Waiting and in-flight requests fail with
        :class:`HttpConnectionError`; later requests too."""
        self._closed = True
        if self._loop is None or self._loop.is_closed():
            self._start_over()
            return
        error = HttpConnectionError(f"the pool for {self.origin} was closed")
        waiters, self._waiters = self._waiters, deque()
        for fut in waiters:
            if not fut.done():
                fut.set_exception(error)
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.slot = False
            conn.closed = True
            if conn.transport is not None:
                conn.transport.close()
        for conn in list(self._conns):
            conn.slot = False
            if conn.busy:
                conn.fail(error)
        self._conns.clear()
        self._open = 0
        await asyncio.sleep(0)  # let the transports deliver connection_lost

    @property
    def closed(self) -> bool:
        return self._closed

    async def __aenter__(self) -> HttpPool:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (f"<HttpPool {self.origin}{self._prefix} open={self._open}/"
                f"{self.max_connections} idle={len(self._idle)}>")
