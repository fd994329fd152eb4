"""Network pieces the transport tests put between interplay and the scripted model, each a real
server on 127.0.0.1 in the test's own event loop: a forward proxy (absolute-form requests and
CONNECT tunnels, with what it saw), a redirector answering every request with a 307, and a TLS
front (TLS on the outside, the plain model behind) with certificates from a test CA."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trustme


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _splice(a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                  b: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))


class _Server:
    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self.port = 0
        self._handlers: set[asyncio.Task[Any]] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _track(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            self._handlers.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def __aenter__(self) -> Any:
        self._server = await asyncio.start_server(self._track, "127.0.0.1", 0,
                                                  **self._server_kwargs())
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def _server_kwargs(self) -> dict[str, Any]:
        return {}

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, list[tuple[str, str]]]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    fields = [tuple(x.strip() for x in line.split(":", 1)) for line in head[1:] if line]
    return head[0], fields  # type: ignore[return-value]


class ForwardProxy(_Server):
    """An HTTP forward proxy: ``seen`` holds each request line it was sent (``POST
    http://host:port/path HTTP/1.1`` or ``CONNECT host:port HTTP/1.1``) and ``auth`` each
    ``Proxy-Authorization`` value. A plain request is forwarded on a connection of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.auth: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line, fields = await _read_head(reader)
        self.seen.append(line)
        self.auth += [v for k, v in fields if k.lower() == "proxy-authorization"]
        method, target, version = line.split(" ")
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            upstream = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await _splice((reader, writer), upstream)
            return
        url = urlsplit(target)
        length = next((int(v) for k, v in fields if k.lower() == "content-length"), 0)
        body = await reader.readexactly(length)
        kept = [(k, v) for k, v in fields
                if k.lower() not in ("connection", "proxy-connection", "proxy-authorization")]
        path = url.path + (f"?{url.query}" if url.query else "")
        head = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in kept)
        r, w = await asyncio.open_connection(url.hostname, url.port or 80)
        w.write((head + "Connection: close\r\n\r\n").encode("latin-1") + body)
        await w.drain()
        await _pipe(r, writer)
        w.close()


class Redirector(_Server):
    """Answers every request with ``307`` to the same path under ``target`` (a base URL
    whose path replaces this server's ``/v1``); ``hits`` counts the requests."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target.rstrip("/")
        self.hits = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            line, fields = await _read_head(reader)
            length = next((int(v) for k, v in fields if k.lower() == "content-length"), 0)
            await reader.readexactly(length)
            self.hits += 1
            path = line.split(" ")[1].removeprefix("/v1")
            writer.write(f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {self.target}{path}\r\n"
                         f"Content-Length: 0\r\n\r\n".encode("latin-1"))
            await writer.drain()


class TestCA:
    """A certificate authority for one test: a server certificate for 127.0.0.1 and a client
    certificate, each written to PEM files under ``folder``."""

    __test__ = False  # not a test class, whatever pytest makes of its name

    def __init__(self, folder: Path) -> None:
        self.ca = trustme.CA()
        self.bundle = folder / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.bundle))
        self.server = self.ca.issue_cert("127.0.0.1", "localhost")
        client = self.ca.issue_cert("client@interplay.test")
        self.client_cert = folder / "client-cert.pem"
        self.client_key = folder / "client-key.pem"
        for blob in client.cert_chain_pems:
            blob.write_to_path(str(self.client_cert), append=True)
        client.private_key_pem.write_to_path(str(self.client_key))

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server.configure_cert(context)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            self.ca.configure_trust(context)
        return context


class TlsFront(_Server):
    """TLS on 127.0.0.1 in front of a plain HTTP server at ``upstream`` (a base URL): the
    scripted model served over https. ``base_url`` is the https form of ``upstream``."""

    def __init__(self, upstream: str, context: ssl.SSLContext) -> None:
        super().__init__()
        self.upstream = urlsplit(upstream)
        self.context = context

    def _server_kwargs(self) -> dict[str, Any]:
        return {"ssl": self.context}

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}{self.upstream.path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await asyncio.open_connection(self.upstream.hostname, self.upstream.port)
        await _splice((reader, writer), upstream)
