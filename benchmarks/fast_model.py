"""A model server for benchmarks that costs as little CPU per request as it can.

Benchmarks that run interplay against a model on the same machine want the framework's CPU,
not the model's: the scripted model kit (``interplay.testing.ScriptedModel``) is a general
test double on an ASGI stack and spends a few tenths of a millisecond of CPU on each call, most
of a core at a few thousand calls per second. This server answers every Chat Completions
request with the same short reply, on raw asyncio protocols (uvloop where installed, through
:func:`interplay._plumbing.aio.run`) with ``httptools`` parsing the requests, and keeps to one timer
per request for its latency.

It serves, under any path prefix:

* ``POST .../chat/completions``: after ``--latency-ms``, a ``chat.completion`` whose message is
  ``--reply`` and whose ``model`` echoes the request's (``"fast"`` when it has none); with
  ``"stream": true``, the same as server-sent events (a role chunk, a content chunk, a finish
  chunk carrying usage, ``data: [DONE]``) in chunked framing (close-delimited for HTTP/1.0);
* ``GET .../models``: a model list; ``GET /stats``: ``{"chat": n, "cpu_s": process CPU}`` (and
  counts of all requests and of connections accepted);
* anything else: a 404 JSON error. Request bodies may be sized or chunked; connections are
  kept alive, and pipelined requests are answered in order.

The body is not parsed as JSON when it need not be: ``"model"`` and ``"stream"`` are found by
a byte search when each key occurs once with a plain value, and the body is parsed only
otherwise. So a malformed body is answered like a good one unless it is parsed; this is a
benchmark's model, not a validator (the scripted kit is the one for tests that check requests).

It must not import interplay beyond :mod:`interplay._plumbing.aio`, log request contents, or answer
anything but a fixed reply.

    python benchmarks/fast_model.py --port 8123 --latency-ms 200   # prints "ready", SIGTERM ends it
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import signal
import sys
import time
from typing import Any

import httptools

from interplay._plumbing import aio

# A key followed by a value we can read without parsing: a string with no escapes, or a literal.
_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]*)"')
_STREAM = re.compile(rb'"stream"\s*:\s*(true|false|null)')
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

_JSON_HEAD = b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
_SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n")
_SSE_HEAD_CLOSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n")
_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}


def sniff(body: bytes) -> tuple[str, bool]:
    """The request's model (``"fast"`` when it names none) and whether it asks for a stream.

    A byte search when ``"model"`` / ``"stream"`` each occur at most once with a plain value:
    inside a JSON string a quote is always escaped, so an unescaped ``"model"`` followed by a
    colon is a key. Anything else (a repeated key, an escaped name, a nested object) parses
    the body, and a body that is not a JSON object counts as naming nothing."""
    model: str | None = None
    stream: bool | None = None
    i = body.find(b'"model"')
    if i < 0:
        model = "fast"
    elif body.find(b'"model"', i + 7) < 0:
        m = _MODEL.match(body, i)
        if m is not None:
            model = m.group(1).decode("utf-8", "replace") or "fast"
    i = body.find(b'"stream"')
    if i < 0:
        stream = False
    elif body.find(b'"stream"', i + 8) < 0:
        s = _STREAM.match(body, i)
        if s is not None:
            stream = s.group(1) == b"true"
    if model is not None and stream is not None:
        return model, stream
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return "fast", False
    name = data.get("model")
    return (name if isinstance(name, str) and name else "fast"), data.get("stream") is True


class Replies:
    """The response bytes, built from templates made once; and the counters."""

    def __init__(self, reply: str) -> None:
        self.chat = 0
        self.requests = 0
        self.accepted = 0
        self._models: dict[str, bytes] = {}
        content = _encode(reply).encode()
        self.completion_tokens = max(1, -(-len(reply.encode()) // 4))
        usage = (b'"usage":{"prompt_tokens":%d,"completion_tokens":'
                 + str(self.completion_tokens).encode() + b',"total_tokens":%d}')
        # %d id, %d created, %s model, %d prompt tokens, %d total tokens
        self._chat = (b'{"id":"chatcmpl-fast-%d","object":"chat.completion","created":%d,'
                      b'"model":%s,"choices":[{"index":0,"message":{"role":"assistant",'
                      b'"content":' + content + b'},"finish_reason":"stop","logprobs":null}],'
                      + usage + b'}')
        head = b'{"id":"chatcmpl-fast-%d","object":"chat.completion.chunk","created":%d,"model":%s,'
        self._chunks = (
            head + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                   b'"finish_reason":null,"logprobs":null}]}',
            head + b'"choices":[{"index":0,"delta":{"content":' + content
                 + b'},"finish_reason":null,"logprobs":null}]}',
            head + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop","logprobs":null}],'
                 + usage + b'}')

    def _model(self, name: str) -> bytes:
        found = self._models.get(name)
        if found is None:
            found = _encode(name).encode()
            if len(self._models) < 1024:
                self._models[name] = found
        return found

    def chat_completion(self, body: bytes) -> tuple[bytes, bool]:
        """(whole response, whether it is an event stream) for a chat completions request."""
        self.chat += 1
        model, stream = sniff(body)
        prompt = len(body) // 4
        fields = (self.chat, int(time.time()), self._model(model))
        usage = (*fields, prompt, prompt + self.completion_tokens)
        if not stream:
            payload = self._chat % usage
            return _JSON_HEAD % (200, b"OK", len(payload)) + b"\r\n" + payload, False
        first, content, last = self._chunks
        events = [b"data: " + first % fields + b"\n\n", b"data: " + content % fields + b"\n\n",
                  b"data: " + last % usage + b"\n\n", b"data: [DONE]\n\n"]
        return b"".join(events), True

    def models(self) -> bytes:
        return json_response(200, {"object": "list", "data": [
            {"id": "fast", "object": "model", "created": 0, "owned_by": "interplay-bench"}]})

    def stats(self) -> bytes:
        return json_response(200, {"chat": self.chat, "requests": self.requests,
                                   "connections": self.accepted,
                                   "cpu_s": round(time.process_time(), 4)})


def json_response(status: int, data: Any, close: bool = False) -> bytes:
    payload = _encode(data).encode()
    return (_JSON_HEAD % (status, _REASONS[status], len(payload))
            + (b"Connection: close\r\n\r\n" if close else b"\r\n") + payload)


def error_response(status: int, message: str, close: bool = False) -> bytes:
    kind = "not_found" if status == 404 else "invalid_request_error"
    return json_response(status, {"error": {"message": message, "type": kind, "code": status}},
                         close)


def chunked(events: bytes) -> bytes:
    """An event stream as one HTTP chunk and the last chunk."""
    return b"%x\r\n" % len(events) + events + b"\r\n0\r\n\r\n"


class Connection(asyncio.Protocol):
    """One client connection. Responses wait in ``pending`` (in request order) until their
    latency is up and every response before them has gone."""

    def __init__(self, server: FastModel) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        # [response bytes or None while its latency runs, close the connection after it]
        self.pending: collections.deque[list[Any]] = collections.deque()
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)
        self.server.replies.accepted += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None
        self.closing = True
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._queue(error_response(400, "upgrades are not supported", True), True, 0.0)
        except httptools.HttpParserError:
            self._queue(error_response(400, "malformed HTTP request", True), True, 0.0)

    # httptools callbacks (no on_header: the parser itself reads Content-Length, chunked
    # framing and Connection, and a callback per header would cost more than the rest)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.closing:
            return
        parser = self.parser
        close = not parser.should_keep_alive()
        method = parser.get_method()
        path = self.url.partition(b"?")[0]
        body = b"".join(self.body) if len(self.body) != 1 else self.body[0]
        self.url, self.body = b"", []
        replies = self.server.replies
        replies.requests += 1
        if method == b"POST" and path.endswith(b"/chat/completions"):
            response, stream = replies.chat_completion(body)
            if stream:
                if parser.get_http_version() == "1.0":
                    response, close = _SSE_HEAD_CLOSE + response, True
                else:
                    response = _SSE_HEAD + chunked(response)
            elif close:
                response = response.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
            self._queue(response, close, self.server.latency_s)
        elif method == b"GET" and path.endswith(b"/models"):
            self._queue(replies.models(), close, 0.0)
        elif method == b"GET" and path == b"/stats":
            self._queue(replies.stats(), close, 0.0)
        else:
            shown = path[:200].decode("latin-1")
            self._queue(error_response(404, f"no route for {method.decode('latin-1')} {shown}",
                                       close), close, 0.0)

    def _queue(self, response: bytes, close: bool, delay: float) -> None:
        if close:
            self.closing = True  # nothing after this request is read or answered
        if delay <= 0 and not self.pending:
            self._write(response, close)
            return
        slot: list[Any] = [None, close]
        self.pending.append(slot)
        if delay <= 0:
            self._ready(slot, response)
        else:
            self.server.loop.call_later(delay, self._ready, slot, response)

    def _ready(self, slot: list[Any], response: bytes) -> None:
        slot[0] = response
        pending = self.pending
        while pending and pending[0][0] is not None:
            response, close = pending.popleft()
            self._write(response, close)

    def _write(self, response: bytes, close: bool) -> None:
        transport = self.transport
        if transport is None:
            return
        transport.write(response)
        if close:
            transport.close()


class FastModel:
    """The listening server."""

    def __init__(self, latency_s: float, reply: str) -> None:
        self.latency_s = latency_s
        self.replies = Replies(reply)
        self.connections: set[Connection] = set()
        self.loop = asyncio.get_running_loop()

    async def serve(self, host: str, port: int) -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, stop.set)
        server = await self.loop.create_server(lambda: Connection(self), host, port,
                                               backlog=4096, reuse_address=True)
        print("ready", flush=True)
        await stop.wait()
        server.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        await server.wait_closed()


async def main_async(args: argparse.Namespace) -> None:
    await FastModel(args.latency_ms / 1000, args.reply).serve(args.host, args.port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="how long each chat completion waits before it is answered")
    parser.add_argument("--reply", default="ok, noted", help="the assistant's text")
    args = parser.parse_args(argv)
    if args.latency_ms < 0:
        parser.error("--latency-ms must be >= 0")
    aio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
