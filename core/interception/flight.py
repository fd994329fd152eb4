"""One upstream call in flight at the interception server, and the bytes it has answered so
far, replayed to every program request that waits for it.

A :class:`Flight` is what coalescing hands to an identical request that arrives while the
first is still being answered: the status, headers and body chunks the upstream call produced
are kept and replayed from the start to each waiting request, a stream as it grows. A flight
that ends without an answer still ends every request waiting on it (a 502), and an error after
a stream has begun is written in that stream's own form (:attr:`Flight.abort`). An error
answered whole is in the shape the program's API reads (:func:`error_json`), wherever the
server answers one.

This module owns holding and replaying one answer; it must not call the upstream, record a
turn or decide when a flight is cancelled (the server does all three).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from interplay._plumbing import asgi
from interplay._plumbing import codec as _codec
from interplay.model import messages


def error_json(status: int, message: str, *, anthropic: bool, code: str | None = None,
               param: str | None = None) -> bytes:
    """An error answer's body in the shape the request's API reads: Anthropic's
    (``{"type": "error", "error": {"type", "message"}}``, the type by status) for a Messages
    client, else OpenAI's (``invalid_request_error`` below 500, ``server_error`` from it, with
    ``param`` and ``code``)."""
    if anthropic:
        return _codec.dumps(messages.error_body(status, message))
    kind = "invalid_request_error" if status < 500 else "server_error"
    return _codec.dumps(asgi.error_body(message, type_=kind, param=param, code=code))


class Flight:
    """One upstream call and the bytes it answered, replayable to every coalesced request."""

    __slots__ = ("abort", "anthropic", "cancel_reason", "chunks", "done", "headers", "key",
                 "status", "task", "waiters", "wake")

    def __init__(self, key: tuple[str, str, bytes], *, anthropic: bool = False) -> None:
        self.key = key
        #: The program speaks Messages: an error answered before the stream began is in
        #: Anthropic's shape.
        self.anthropic = anthropic
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.done = False
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        #: Program requests waiting for this answer.
        self.waiters = 0
        #: Why the upstream call was cancelled: "client_disconnected" or "trace_closed".
        self.cancel_reason: str | None = None
        #: Once a stream has begun: the bytes that end it with an error (its API's form).
        self.abort: Callable[[str, str], bytes] | None = None

    def _notify(self) -> None:
        ev, self.wake = self.wake, asyncio.Event()
        ev.set()

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        if not self.status:
            self.status, self.headers = status, headers
            self._notify()

    def push(self, data: bytes) -> None:
        self.chunks.append(data)
        self._notify()

    def answer(self, status: int, body: bytes) -> None:
        """A whole JSON answer: its status, then its body."""
        self.start(status, asgi.JSON_HEADERS)
        self.push(body)

    def fail(self, status: int, message: str, code: str) -> None:
        """End the answer with an error, in whatever form it has taken so far: a JSON error
        with ``status`` if nothing was answered yet, the stream's own error event if a stream
        has begun (a whole answer already given stays as it is)."""
        if not self.status:
            self.answer(status, error_json(status, message, anthropic=self.anthropic,
                                           code=code))
        elif self.abort is not None:
            self.push(self.abort(message, code))

    def finish(self) -> None:
        self.done = True
        self._notify()

    async def replay(self, send: asgi.Send) -> None:
        """Send this answer to one program request: from its first byte, then each chunk as
        it comes, until the flight is done."""
        while not self.status:
            if self.done:  # ended without an answer: never leave the program waiting
                await asgi.send_bytes(send, 502, error_json(
                    502, "the upstream call ended without an answer",
                    anthropic=self.anthropic, code="bad_response"))
                return
            await self.wake.wait()
        await send({"type": "http.response.start", "status": self.status,
                    "headers": self.headers})
        i = 0
        while True:
            wake = self.wake
            if i < len(self.chunks):
                body = b"".join(self.chunks[i:])
                i = len(self.chunks)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                continue
            if self.done:
                break
            await wake.wait()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
