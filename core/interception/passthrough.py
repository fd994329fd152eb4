"""Responses requests forwarded as they are, to an endpoint that serves the Responses API itself
(``Endpoint.api = "responses"``, e.g. OpenAI).

The bytes the upstream answers go to the program unchanged (a stream as it arrives); the
final Response object is read from them for the record. Failures before the first byte are
retried with the same policy as :class:`~interplay.model.ModelClient`; an upstream error that
is final is returned to the program with the upstream's own status and body.

No translation, no user logic; logs carry no bodies or message text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx2
import structlog

from interplay import _asgi as asgi
from interplay._ids import new_id
from interplay.interception import responses as rs

# The same classification and retry policy as the Chat Completions client.
from interplay.model.client import (
    _error_message,
    _status_error_type,
    aiter_sse_data,
    parse_body,
    parse_retry_after,
    retry_delay,
)
from interplay.model.client import _Failure as _ModelFailure
from interplay.model.endpoint import Endpoint
from interplay.records import ModelCall, Usage

log = structlog.get_logger("interplay.interception")

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")

#: Called once with the status and headers of the answer the program gets.
OnStart = Callable[[int, list[tuple[bytes, bytes]]], None]
#: Called with each piece of the answer's body, as it arrives.
OnData = Callable[[bytes], None]


class _Failure(_ModelFailure):
    """A failed attempt, with the headers of the upstream's own error answer."""

    def __init__(self, error_type: str, message: str, status: int | None = None,
                 retry_after: float | None = None, body: bytes | None = None,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(error_type, message, status, retry_after, body)
        self.headers = headers or []


def usage_of(response: Mapping[str, Any] | None) -> Usage | None:
    u = response.get("usage") if isinstance(response, Mapping) else None
    if not isinstance(u, Mapping):
        return None
    try:
        p, c = int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
        return Usage(prompt_tokens=p, completion_tokens=c,
                     total_tokens=int(u.get("total_tokens") or p + c))
    except (TypeError, ValueError):
        return None


def finish_reason_of(response: Mapping[str, Any]) -> str | None:
    """The Chat Completions finish reason a Response amounts to (for records across APIs)."""
    status = response.get("status")
    if status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        return "length" if reason == "max_output_tokens" else str(reason or "length")
    if status != "completed":
        return None
    output = response.get("output") or ()
    if any(isinstance(i, Mapping) and i.get("type") == "function_call" for i in output):
        return "tool_calls"
    return "stop"


class Forward:
    """One program request forwarded to a Responses upstream (with retries)."""

    def __init__(self, http: httpx2.AsyncClient, endpoint: Endpoint,
                 body: dict[str, Any]) -> None:
        self.http = http
        self.endpoint = endpoint
        self.body = body
        self.stream = bool(body.get("stream"))
        self.started = False
        #: The upstream ended the stream itself (a terminal or error event).
        self.ended = False
        self.resp_id: str | None = None
        self.seq = -1
        # One request's URL, headers and timeout serve all its attempts.
        self.url = str(endpoint.base_url).rstrip("/") + "/responses"
        self.headers = {"Authorization": f"Bearer {endpoint.api_key()}",
                        "Content-Type": "application/json",
                        "Accept": "text/event-stream" if self.stream else "application/json"}
        self.timeout = httpx2.Timeout(endpoint.timeout_s, connect=min(10.0, endpoint.timeout_s))

    def failed_event(self, message: str, code: str = "server_error") -> bytes:
        """A ``response.failed`` event that ends a stream already begun."""
        self.seq += 1
        event = {"type": "response.failed", "sequence_number": self.seq, "response": {
            "id": self.resp_id or f"resp_{new_id(12)}", "object": "response",
            "created_at": int(time.time()), "status": "failed",
            "model": str(self.body.get("model") or ""), "output": [], "usage": None,
            "error": {"code": code, "message": message}, "incomplete_details": None}}
        return rs.sse(event)

    async def run(self, on_start: OnStart, on_data: OnData) -> ModelCall:
        """Forward the request; the program's answer goes through on_start/on_data."""
        ep = self.endpoint
        call = ModelCall(id=f"mc_{new_id(10)}", api="responses",
                         model=str(self.body.get("model") or ep.model), request=self.body,
                         started_at=time.time(), streamed=self.stream)
        t0 = time.monotonic()
        payload = json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode()
        attempt = 0
        while True:
            attempt += 1
            call.attempts = attempt
            try:
                await self._attempt(call, payload, t0, on_start, on_data)
                call.error = call.error_type = None
                break
            except _Failure as f:
                call.status, call.error, call.error_type = f.status, f.message, f.error_type
                delay = None if self.started else retry_delay(f, attempt, t0, ep)
                if delay is None:
                    self._deliver_failure(f, on_start, on_data)
                    break
                log.info("interception.passthrough_retry", attempt=attempt,
                         error_type=f.error_type, status=f.status, delay_s=round(delay, 3))
                await asyncio.sleep(delay)
        call.latency_s = time.monotonic() - t0
        return call

    def _deliver_failure(self, f: _Failure, on_start: OnStart, on_data: OnData) -> None:
        if self.started:  # the stream had begun: end it with a failure event, if it is open
            if not self.ended:
                on_data(self.failed_event(f.message, f.error_type))
        elif f.body is not None and f.status is not None:  # the upstream's own error, as is
            on_start(f.status, f.headers)
            on_data(f.body)
        else:
            status = {"timeout": 504}.get(f.error_type, 502)
            on_start(status, asgi.JSON_HEADERS)
            on_data(asgi.dumps(asgi.error_body(f.message, type_="server_error",
                                               code=f.error_type)))

    async def _attempt(self, call: ModelCall, payload: bytes, t0: float, on_start: OnStart,
                       on_data: OnData) -> None:
        try:
            resp = await self.http.send(self.http.build_request(
                "POST", self.url, content=payload, headers=self.headers, timeout=self.timeout),
                stream=True)
        except httpx2.TimeoutException:
            raise _Failure("timeout", "request timed out") from None
        except (httpx2.TransportError, OSError) as exc:
            raise _Failure("connection_error", f"connection error: {type(exc).__name__}") \
                from None
        try:
            call.status = resp.status_code
            ctype = resp.headers.get("content-type", "")
            if resp.status_code >= 400:
                content = await resp.aread()
                keep = [(b"content-type", (ctype or "application/json").encode("latin-1"))]
                if resp.headers.get("retry-after"):
                    keep.append((b"retry-after", resp.headers["retry-after"].encode("latin-1")))
                raise _Failure(_status_error_type(resp.status_code),
                               _error_message(content, resp.status_code), resp.status_code,
                               parse_retry_after(resp.headers.get("retry-after")), content,
                               keep)
            if self.stream and "text/event-stream" in ctype:
                await self._read_stream(call, resp, t0, on_start, on_data)
            else:
                data = await resp.aread()
                try:
                    parsed = parse_body(data, resp.status_code, "output", "a Response object")
                except _ModelFailure as f:
                    raise _Failure(f.error_type, f.message, f.status) from None
                self.started = True
                on_start(resp.status_code, asgi.JSON_HEADERS)
                on_data(data)
                self._finish(call, parsed)
        except httpx2.TimeoutException:
            raise _Failure("timeout", "timed out reading the response") from None
        except (httpx2.TransportError, httpx2.StreamError) as exc:
            raise _Failure("connection_error", f"connection error: {type(exc).__name__}") \
                from None
        finally:
            await resp.aclose()

    async def _read_stream(self, call: ModelCall, resp: httpx2.Response, t0: float,
                           on_start: OnStart, on_data: OnData) -> None:
        final: dict[str, Any] | None = None
        failure: str | None = None

        async def forwarded() -> AsyncIterator[bytes]:
            async for piece in resp.aiter_bytes():
                if not piece:
                    continue
                if not self.started:
                    self.started = True
                    on_start(resp.status_code, asgi.SSE_HEADERS)
                on_data(piece)  # the upstream's bytes, unchanged
                yield piece

        async with contextlib.aclosing(aiter_sse_data(forwarded())) as lines:
            async for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # not ours to judge: the program reads the same bytes
                if not isinstance(event, dict):
                    continue
                kind = event.get("type")
                if isinstance(event.get("sequence_number"), int):
                    self.seq = event["sequence_number"]
                if call.first_token_s is None and isinstance(kind, str) and (
                        kind.endswith(".delta") or kind == "response.output_item.added"):
                    call.first_token_s = time.monotonic() - t0
                if kind == "response.created" and isinstance(event.get("response"), dict):
                    self.resp_id = event["response"].get("id")
                elif kind in _TERMINAL and isinstance(event.get("response"), dict):
                    self.ended = True
                    final = event["response"]
                    if kind == "response.failed":
                        err = final.get("error") or {}
                        failure = str(err.get("message") or "the response failed")
                elif kind == "error":
                    self.ended = True
                    failure = str(event.get("message") or "error in stream")
        if final is None:
            raise _Failure("server_error" if failure else "connection_error",
                           failure or "stream ended before it finished", resp.status_code)
        self._finish(call, final)
        if failure is not None:
            raise _Failure("server_error", failure, resp.status_code)

    @staticmethod
    def _finish(call: ModelCall, response: dict[str, Any]) -> None:
        call.response = response
        call.usage = usage_of(response)
        call.finish_reason = finish_reason_of(response)
        if response.get("model"):
            call.model = str(response["model"])
