"""interplay.model.http against real servers on 127.0.0.1: raw asyncio servers for the wire's edge
cases (framings, encodings, the keep-alive race, timeouts, garbage, the connection bound,
flow control, closing), a TLS server with a self-signed certificate, and the scripted model kit
for a real chat completion."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import shutil
import socket
import ssl
import subprocess
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from interplay import _aio as aio
from interplay.errors import InterplayError
from interplay.model.http import (
    BUFFER_LIMIT,
    HttpConnectionError,
    HttpPool,
    HttpProtocolError,
    HttpResponse,
)
from interplay.testing import ScriptedModel, ScriptedReply

# Failure bounds only: every wait here ends much sooner when the code works.
BOUND_S = 10.0


@attrs.define
class Request:
    line: str
    headers: dict[str, str]
    head: bytes
    body: bytes


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """One request off the wire, or None at a clean EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if line)
    lowered = {k.lower(): v for k, v in headers.items()}
    body = await reader.readexactly(int(lowered.get("content-length", "0")))
    return Request(lines[0], headers, head, body)


def response(body: bytes = b'{"ok": true}', status: int = 200, headers: str = "") -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n").encode() + body


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class RawServer:
    """``asyncio.start_server`` on 127.0.0.1; ``handler(reader, writer, n)`` per connection
    (``n`` counts accepted connections from 1)."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.accepted = 0
        self.requests: list[Request] = []
        self.tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0,
                                                 ssl=self.ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def url(self, path: str = "/v1") -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await self.handler(reader, writer, self.accepted)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a client gone, or the server stopping under a handler still waiting
        finally:
            writer.close()

    async def serve_forever(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            reply: Callable[[Request], bytes]) -> None:
        """Answer every request on this connection with ``reply(request)``."""
        while (req := await read_request(reader)) is not None:
            self.requests.append(req)
            writer.write(reply(req))
            await writer.drain()


def json_server() -> RawServer:
    server: RawServer

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await server.serve_forever(r, w, lambda req: response(
            json.dumps({"path": req.line.split()[1], "conn": n}).encode()))

    server = RawServer(handler)
    return server


async def post(pool: HttpPool, body: bytes = b"{}") -> HttpResponse:
    return await pool.request("POST", "/chat/completions",
                              headers={"Content-Type": "application/json"}, body=body)


# -- the request and plain bodies --------------------------------------------------------------

async def test_post_sends_a_minimal_head_and_reuses_the_connection() -> None:
    async with json_server() as server, HttpPool(server.url("/v1/")) as pool:
        headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-test"}
        first = await pool.request("POST", "/chat/completions?x=1", headers=headers,
                                   body=b'{"a": 1}')
        assert first.status == 200
        assert first.headers.get("CONTENT-TYPE") == "application/json"
        assert first.headers["content-length"] == str(len(await first.read()))
        second = await pool.request("POST", "/models", headers=headers, body=b"{}")
        assert json.loads(await second.read()) == {"path": "/v1/models", "conn": 1}
        assert server.accepted == 1  # kept alive, reused

        req = server.requests[0]
        assert req.line == "POST /v1/chat/completions?x=1 HTTP/1.1"
        assert req.headers == {"Host": f"127.0.0.1:{server.port}", "Content-Length": "8",
                               "Content-Type": "application/json",
                               "Authorization": "Bearer sk-test"}
        assert req.body == b'{"a": 1}'


async def test_bad_requests_are_refused_before_sending() -> None:
    async with json_server() as server, HttpPool(server.url()) as pool:
        with pytest.raises(ValueError, match="not allowed"):
            await pool.request("POST", "/x", headers={"X-Evil": "a\r\nHost: other"})
        with pytest.raises(ValueError, match="not allowed"):
            await pool.request("POST", "/x", headers={"content-length": "3"})
        with pytest.raises(ValueError, match="path"):
            await pool.request("GET", "no-slash")
    assert server.accepted == 0
    with pytest.raises(ValueError, match="credentials") as info:
        HttpPool("http://user:hunter2@127.0.0.1:1/v1")
    assert "hunter2" not in str(info.value)
    with pytest.raises(ValueError, match="http"):
        HttpPool("ftp://127.0.0.1/")


async def test_chunked_body() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        while await read_request(r) is not None:
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n")
            await w.drain()

    async with RawServer(handler) as server, HttpPool(server.url()) as pool:
        for _ in range(2):
            resp = await post(pool)
            assert await resp.read() == b"hello world"
        assert server.accepted == 1  # a chunked body ends the message: kept alive


async def test_close_delimited_body() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ")
        await w.drain()
        await asyncio.sleep(0.01)
        w.write(b"the end")
        await w.drain()

    async with RawServer(handler) as server, HttpPool(server.url()) as pool:
        for _ in range(2):
            assert await (await post(pool)).read() == b"until the end"
        assert server.accepted == 2  # the body ends with its connection


@pytest.mark.parametrize("encoding,encode", [
    ("gzip", gzip.compress),
    ("deflate", zlib.compress),
    ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some servers send it
])
async def test_compressed_body_is_decoded(encoding: str, encode: Callable[[bytes], bytes]) -> None:
    payload = json.dumps({"text": "ab" * 5000}).encode()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await server.serve_forever(r, w, lambda _: response(
            encode(payload), headers=f"Content-Encoding: {encoding}\r\n"))

    server = RawServer(handler)
    async with server, HttpPool(server.url()) as pool:
        resp = await post(pool)
        assert resp.headers.get("content-encoding") == encoding
        assert await resp.read() == payload
        streamed = await post(pool)
        assert b"".join([p async for p in streamed.aiter_bytes()]) == payload
        assert server.accepted == 1


async def test_corrupt_gzip_is_a_protocol_error() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await server.serve_forever(r, w, lambda _: response(
            b"this is not gzip at all", headers="Content-Encoding: gzip\r\n"))

    server = RawServer(handler)
    async with server, HttpPool(server.url()) as pool:
        with pytest.raises(HttpProtocolError, match="malformed"):
            await (await post(pool)).read()


async def test_head_204_304_have_no_body_and_keep_the_connection() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        while (req := await read_request(r)) is not None:
            server.requests.append(req)
            if req.line.startswith("HEAD"):
                # The length of the body a GET would have had, and no body.
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            elif "/204" in req.line:
                w.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            elif "/304" in req.line:
                w.write(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n")
            else:
                w.write(b"HTTP/1.1 100 Continue\r\n\r\n" + response(b"after"))
            await w.drain()

    server = RawServer(handler)
    async with server, HttpPool(server.url()) as pool:
        for method, path, status in (("HEAD", "/x", 200), ("GET", "/204", 204),
                                     ("GET", "/304", 304), ("HEAD", "/y", 200)):
            resp = await pool.request(method, path)
            assert resp.status == status
            assert await resp.read() == b""
        resp = await pool.request("GET", "/z")
        assert (resp.status, await resp.read()) == (200, b"after")  # the 100 was skipped
        assert server.accepted == 1
        assert server.requests[0].line == "HEAD /v1/x HTTP/1.1"
        assert "Content-Length" not in server.requests[0].headers


# -- the keep-alive race and failures ----------------------------------------------------------

async def test_keep_alive_race_is_retried_once_on_a_fresh_connection() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        req = await read_request(r)
        assert req is not None
        server.requests.append(req)
        w.write(response(json.dumps({"conn": n}).encode()))
        await w.drain()
        if n == 1:
            # The idle timeout fires as the next request arrives: read it, answer nothing.
            assert await read_request(r) is not None
            return
        await server.serve_forever(r, w, lambda _: response(json.dumps({"conn": n}).encode()))

    server = RawServer(handler)
    async with server, HttpPool(server.url()) as pool:
        assert json.loads(await (await post(pool)).read()) == {"conn": 1}
        assert json.loads(await (await post(pool, b"[2]")).read()) == {"conn": 2}
        assert server.accepted == 2
        assert server.requests[-1].body == b"[2]"  # the same request, resent


async def test_idle_connection_closed_by_the_server_is_dropped() -> None:
    closed = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(response(json.dumps({"conn": n}).encode()))
        await w.drain()
        if n == 1:
            w.close()
            await w.wait_closed()
            closed.set()
            return
        await server.serve_forever(r, w, lambda _: response(json.dumps({"conn": n}).encode()))

    server = RawServer(handler)
    async with server, HttpPool(server.url()) as pool:
        assert json.loads(await (await post(pool)).read()) == {"conn": 1}
        await asyncio.wait_for(closed.wait(), BOUND_S)
        assert json.loads(await (await post(pool)).read()) == {"conn": 2}


async def test_a_fresh_connection_closed_without_an_answer_is_not_retried() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)

    async with RawServer(handler) as server, HttpPool(server.url()) as pool:
        with pytest.raises(HttpConnectionError, match="closed before a response"):
            await post(pool)
        assert server.accepted == 1


async def test_the_retry_happens_once_only() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        if n == 1:
            w.write(response())
            await w.drain()
            await read_request(r)  # then it closes without answering; so does every other

    async with RawServer(handler) as server, HttpPool(server.url()) as pool:
        await (await post(pool)).read()
        with pytest.raises(HttpConnectionError, match="closed before a response"):
            await post(pool)
        assert server.accepted == 2


async def test_a_body_cut_short_is_a_connection_error() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
        await w.drain()

    async with RawServer(handler) as server, HttpPool(server.url()) as pool:
        resp = await post(pool)
        with pytest.raises(HttpConnectionError, match="before the response ended"):
            await resp.read()
        # Nothing was retried: the response had begun.
        assert server.accepted == 1


@pytest.fixture(params=["timer", "shared tick"])
def read_deadline(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A read timeout on a timer of its own, or (lowered thresholds) on the loop's shared tick
    that long ones use."""
    if request.param == "shared tick":
        monkeypatch.setattr(aio, "SWEEP_MIN_S", 0.1)
        monkeypatch.setattr(aio, "SWEEP_TICK_S", 0.02)
    return str(request.param)


async def test_a_server_that_never_answers_times_out(read_deadline: str) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        await r.read()  # until the client gives up and closes

    async with RawServer(handler) as server, \
            HttpPool(server.url(), read_timeout_s=0.2) as pool:
        with pytest.raises(TimeoutError, match="no response"):
            await post(pool)


async def test_a_body_that_stalls_times_out(read_deadline: str) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nsome")
        await w.drain()
        await r.read()

    async with RawServer(handler) as server, \
            HttpPool(server.url(), read_timeout_s=0.2) as pool:
        resp = await post(pool)
        with pytest.raises(TimeoutError):
            await resp.read()


async def test_garbage_is_a_protocol_error() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await w.drain()
        await r.read()

    async with RawServer(handler) as server, HttpPool(server.url()) as pool:
        with pytest.raises(HttpProtocolError, match="malformed response"):
            await post(pool)


async def test_connection_refused_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with HttpPool(f"http://127.0.0.1:{port}/v1") as pool:
        with pytest.raises(HttpConnectionError, match=re.escape(f"cannot connect to http://127.0.0.1:{port}")):
            await post(pool)
        # Its place in the pool was given back: the pool still counts nothing open.
        assert "open=0/" in repr(pool)


# -- streaming, the connection bound, release, cancel, close ------------------------------------

async def test_sse_arrives_piece_by_piece() -> None:
    go_on = asyncio.Event()
    events = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        for event in events:
            w.write(b"%x\r\n%s\r\n" % (len(event), event))
            await w.drain()
            go_on.clear()
            await go_on.wait()  # the next event only once the client has this one
        w.write(b"0\r\n\r\n")
        await w.drain()
        await server.serve_forever(r, w, lambda _: response())

    server = RawServer(handler)
    async with server, HttpPool(server.url()) as pool:
        resp = await pool.request("POST", "/chat/completions", body=b'{"stream": true}')
        assert resp.headers.get("Content-Type") == "text/event-stream"
        got = []
        async for piece in resp.aiter_bytes():
            got.append(piece)
            go_on.set()
        assert got == events
        assert (await (await post(pool)).read()) == b'{"ok": true}'
        assert server.accepted == 1  # streamed to the end: reused


async def test_max_connections_bounds_concurrent_requests() -> None:
    four_open = asyncio.Event()
    in_flight = peak = 0

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal in_flight, peak
        if n == 4:
            four_open.set()
        while (req := await read_request(r)) is not None:
            in_flight += 1
            peak = max(peak, in_flight)
            # Held until the pool has opened all it may, so its bound is what stops it.
            await asyncio.wait_for(four_open.wait(), BOUND_S)
            await asyncio.sleep(0.001)
            in_flight -= 1
            w.write(response(req.body))
            await w.drain()

    async with RawServer(handler) as server, \
            HttpPool(server.url(), max_connections=4) as pool:
        async def one(i: int) -> bytes:
            return await (await post(pool, json.dumps(i).encode())).read()

        got = await asyncio.gather(*(one(i) for i in range(50)))
        assert got == [json.dumps(i).encode() for i in range(50)]
        assert server.accepted == 4
        assert peak == 4


async def test_releasing_a_half_read_response_closes_its_connection() -> None:
    first_closed = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        if n == 1:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
            await w.drain()
            assert await r.read() == b""  # the client closed it rather than keep it
            first_closed.set()
            return
        w.write(response())
        await w.drain()
        await server.serve_forever(r, w, lambda _: response())

    server = RawServer(handler)
    async with server, HttpPool(server.url()) as pool:
        resp = await post(pool)
        async for piece in resp.aiter_bytes():
            assert piece.startswith(b"x")
            break
        resp.release()
        await asyncio.wait_for(first_closed.wait(), BOUND_S)
        assert await (await post(pool)).read() == b'{"ok": true}'
        assert server.accepted == 2


async def test_async_with_releases_an_unread_response() -> None:
    async with json_server() as server, HttpPool(server.url(), max_connections=1) as pool:
        async with await post(pool) as resp:
            assert resp.status == 200  # body arrived whole but never read: still reusable
        for _ in range(3):
            async with await post(pool) as resp:
                await resp.read()
        assert server.accepted == 1


async def test_a_cancelled_request_gives_its_place_back() -> None:
    got_first = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            await read_request(r)
            got_first.set()
            await r.read()
            return
        await server.serve_forever(r, w, lambda _: response())

    server = RawServer(handler)
    async with server, HttpPool(server.url(), max_connections=1) as pool:
        stuck = asyncio.create_task(post(pool))
        await asyncio.wait_for(got_first.wait(), BOUND_S)
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert await (await post(pool)).read() == b'{"ok": true}'
        assert server.accepted == 2


async def test_large_unread_stream_pauses_reading() -> None:
    total = 24 * BUFFER_LIMIT

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        block = b"y" * 65536
        for _ in range(total // len(block)):
            w.write(block)
            await w.drain()
        await server.serve_forever(r, w, lambda _: response())

    server = RawServer(handler)
    async with server, HttpPool(server.url(), read_timeout_s=BOUND_S) as pool:
        resp = await post(pool)
        conn: Any = resp._conn  # white-box: the buffer and the transport's reading state
        while conn.buffered <= BUFFER_LIMIT:
            await conn.wait()  # the next body bytes (bounded by the read timeout)
        assert not conn.transport.is_reading()
        assert conn.buffered < 2 * BUFFER_LIMIT
        size = 0
        async for piece in resp.aiter_bytes():
            size += len(piece)
        assert size == total
        assert conn.transport.is_reading()
        assert await (await post(pool)).read() == b'{"ok": true}'
        assert server.accepted == 1


async def test_aclose_fails_in_flight_and_waiting_requests() -> None:
    got_first = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r)
        got_first.set()
        await r.read()

    async with RawServer(handler) as server:
        pool = HttpPool(server.url(), max_connections=1)
        in_flight = asyncio.create_task(post(pool))
        await asyncio.wait_for(got_first.wait(), BOUND_S)
        waiting = asyncio.create_task(post(pool))
        await asyncio.sleep(0.01)
        await pool.aclose()
        for task in (in_flight, waiting):
            with pytest.raises(HttpConnectionError, match="closed"):
                await asyncio.wait_for(task, BOUND_S)
        with pytest.raises(HttpConnectionError, match="closed"):
            await post(pool)
        assert server.accepted == 1


# -- TLS -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl CLI is not installed, so no self-signed certificate")
    out = tmp_path_factory.mktemp("tls")
    cert, key = out / "cert.pem", out / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


async def test_https_with_a_trusted_self_signed_certificate(self_signed: tuple[Path, Path]) -> None:
    cert, key = self_signed
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await server.serve_forever(r, w, lambda req: response(req.body))

    server = RawServer(handler, ssl_context=server_ctx)
    async with server:
        trusting = ssl.create_default_context(cafile=str(cert))
        async with HttpPool(server.url(), ssl_context=trusting) as pool:
            for i in range(3):
                assert await (await post(pool, b"[%d]" % i)).read() == b"[%d]" % i
            assert server.accepted == 1
        # The system's trust store does not know this certificate.
        async with HttpPool(server.url()) as pool:
            with pytest.raises(HttpConnectionError, match=re.escape("TLS with https://127.0.0.1")):
                await post(pool)


# -- the scripted model, and the event loop the pool belongs to ----------------------------------

def test_chat_completion_against_the_scripted_model_on_uvloop() -> None:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-scripted"}

    async def main(m: ScriptedModel) -> tuple[dict[str, Any], bytes]:
        async with HttpPool(m.base_url) as pool:
            resp = await pool.request("POST", "/chat/completions", headers=headers,
                                      body=json.dumps(body).encode())
            assert resp.status == 200
            whole = json.loads(await resp.read())
            resp = await pool.request("POST", "/chat/completions", headers=headers,
                                      body=json.dumps(dict(body, stream=True)).encode())
            assert resp.headers.get("content-type", "").startswith("text/event-stream")
            streamed = b"".join([piece async for piece in resp.aiter_bytes()])
            return whole, streamed

    with ScriptedModel([ScriptedReply.text("four score"),
                        ScriptedReply.text("and seven years")]) as m:
        whole, streamed = aio.run(main(m))
        assert len(m.requests) == 2
    assert whole["choices"][0]["message"]["content"] == "four score"
    datas = [line[len(b"data: "):] for line in streamed.split(b"\n")
             if line.startswith(b"data: ")]
    assert datas[-1] == b"[DONE]"
    text = "".join(json.loads(d)["choices"][0]["delta"].get("content") or ""
                   for d in datas[:-1] if json.loads(d)["choices"])
    assert text == "and seven years"


def test_the_pool_belongs_to_one_live_event_loop() -> None:
    with ScriptedModel() as m:
        pool = HttpPool(m.base_url)

        async def call() -> int:
            resp = await pool.request("POST", "/chat/completions", body=json.dumps(
                {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}).encode())
            await resp.read()
            return resp.status

        first = asyncio.new_event_loop()
        try:
            assert first.run_until_complete(call()) == 200
            with pytest.raises(InterplayError, match="another event loop"):
                asyncio.run(call())
        finally:
            first.close()
        # Its loop is gone: the pool starts over on the next one.
        assert asyncio.run(call()) == 200
        assert asyncio.run(call()) == 200
