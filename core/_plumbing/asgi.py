"""What interplay's ASGI apps (interception, local model, scripted model, the tool gateway and
any other listener interplay opens) use to read a request and answer it: reading a bounded body,
a header, and sending JSON, SSE and OpenAI-style errors.

Kept minimal on purpose: no routing framework, so per-request CPU stays low. No user logic.
Serving an app is :mod:`interplay._plumbing.listener`'s; this module must not open a socket or know
how a connection is held.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from interplay._plumbing import codec as _codec

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class ByPath:
    """A listener's refusals in the shape of the API the request's path speaks, for a listener
    that speaks more than one (the interception server: Anthropic's error shape on the Messages
    paths, OpenAI's elsewhere). ``shape(path, status, message, code)`` makes the body; the
    path is the request's as far as it arrived (without its query)."""

    __slots__ = ("shape",)

    def __init__(self, shape: Callable[[str, int, str, str | None], Any]) -> None:
        self.shape = shape


#: A listener's refusal body from its one-line reason and a short code (``request_timeout``):
#: each listener answers every refusal in one JSON shape, its own (the OpenAI error shape for
#: the model servers, JSON-RPC for the tool gateway), the listener's own refusals included;
#: or, a :class:`ByPath`, in the shape of the API the request's path speaks.
Refusal = Callable[[str, "str | None"], Any] | ByPath

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


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


def openai_refusal(message: str, code: str | None) -> dict[str, Any]:
    """A refusal in the OpenAI error shape (the model servers')."""
    return error_body(message, code=code)


async def send_error(send: Send, status: int, message: str, *,
                     type_: str = "invalid_request_error", param: str | None = None,
                     code: str | None = None,
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send_json(send, status, error_body(message, type_=type_, param=param, code=code),
                    extra)


async def start_sse(send: Send, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status, "headers": SSE_HEADERS})
