"""Responses requests forwarded as they are, to an endpoint that serves the Responses API itself
(``Endpoint.api = "responses"``, e.g. OpenAI).

The request goes through the trace's model client: its transport and its retry policy, as any
model call. The bytes the upstream answers go to the program unchanged (a stream as it
arrives) and are what the record keeps (for a stream, the final Response object read from its
events; with token capture, the token lists and logprobs it asked for are kept on the call's
``tokens`` and left out of the recorded response). Failures before the first byte are
retried; an upstream error that is final is returned to the program with the upstream's own
status and body.

No translation, no user logic; logs carry no bodies or message text.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from interplay._plumbing import asgi
from interplay._plumbing import codec as _codec
from interplay._plumbing.ids import new_id
from interplay.errors import ErrorType
from interplay.log import get_logger
from interplay.model import responses as rs
from interplay.model import tokens
from interplay.model.client import ModelClient
from interplay.model.retries import Failure
from interplay.model.transport import UpstreamResponse
from interplay.model.wire import aiter_sse_data, parse_body
from interplay.values.records import ModelCall, Usage

log = get_logger("interplay.interception")

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")

#: Called once with the status and headers of the answer the program gets.
OnStart = Callable[[int, list[tuple[bytes, bytes]]], None]
#: Called with each piece of the answer's body, as it arrives.
OnData = Callable[[bytes], None]


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

    def __init__(self, client: ModelClient, body: dict[str, Any], *,
                 capture: bool = False) -> None:
        self.client = client
        #: What of the answer the record leaves out (capture's additions), when capturing.
        self.strip: frozenset[str] | None = None
        if capture:
            body, self.strip = tokens.ask_responses(body)
        self.body = body
        self.stream = bool(body.get("stream"))
        self.started = False
        #: The upstream ended the stream itself (a terminal or error event).
        self.ended = False
        self.resp_id: str | None = None
        self.seq = -1

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
        call = ModelCall(id=f"mc_{new_id(10)}", api="responses",
                         model=str(self.body.get("model") or self.client.endpoint.model),
                         request=self.body, started_at=time.time(), streamed=self.stream,
                         attempts=0)
        t0 = time.monotonic()
        transport = await self.client.transport()
        payload = _codec.dumps(self.body)

        share = self.client.share()

        async def attempt() -> None:
            call.attempts += 1
            async with share.slot():
                await send()

        async def send() -> None:
            answer = await transport.post("/responses", self.body, payload, stream=self.stream)
            try:
                call.status = answer.status
                if self.stream and "text/event-stream" in answer.headers.get("content-type",
                                                                             ""):
                    await self._read_stream(call, answer, t0, on_start, on_data)
                else:
                    data = await answer.read()
                    parsed = parse_body(data, answer.status, "output", "a Response object")
                    self.started = True
                    on_start(answer.status, asgi.JSON_HEADERS)
                    on_data(data)
                    _finish(call, data, parsed, self.strip)
            finally:
                await answer.close()

        try:
            await self.client.policy.run(attempt, event="interception.passthrough_retry")
        except Failure as f:
            call.status, call.error, call.error_type = f.status, f.message, f.error_type
            hint = tokens.refusal_hint(f.body) if self.strip is not None and f.status == 400 \
                else None
            if hint is not None:
                call.error = f"{f.message}; {hint}"
            self._deliver_failure(f, on_start, on_data)
        call.latency_s = time.monotonic() - t0
        return call

    def _deliver_failure(self, f: Failure, on_start: OnStart, on_data: OnData) -> None:
        if self.started:  # the stream had begun: end it with a failure event, if it is open
            if not self.ended:
                on_data(self.failed_event(f.message, f.error_type))
        elif f.body is not None and f.status is not None:  # the upstream's own error, as is
            on_start(f.status, f.headers)
            on_data(f.body)
        else:
            status = 504 if f.error_type == ErrorType.TIMEOUT else 502
            on_start(status, asgi.JSON_HEADERS)
            on_data(_codec.dumps(asgi.error_body(f.message, type_="server_error",
                                                 code=f.error_type)))

    async def _read_stream(self, call: ModelCall, answer: UpstreamResponse, t0: float,
                           on_start: OnStart, on_data: OnData) -> None:
        final: dict[str, Any] | None = None
        failure: str | None = None

        async def forwarded() -> AsyncGenerator[bytes, None]:
            async for piece in answer.chunks():
                if not piece:
                    continue
                if not self.started:
                    self.started = True
                    on_start(answer.status, asgi.SSE_HEADERS)
                on_data(piece)  # the upstream's bytes, unchanged
                yield piece

        try:
            async with contextlib.aclosing(aiter_sse_data(forwarded())) as lines:
                async for line in lines:
                    try:
                        event = _codec.loads(line)
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
                raise Failure(ErrorType.SERVER_ERROR if failure else ErrorType.CONNECTION_ERROR,
                              failure or "stream ended before it finished", answer.status)
            _finish(call, _codec.dumps_kept(final), final, self.strip)
            if failure is not None:
                raise Failure(ErrorType.SERVER_ERROR, failure, answer.status)
        except Failure as f:
            f.final = self.started  # the program has part of this answer
            raise


def _finish(call: ModelCall, raw: bytes, response: dict[str, Any],
            strip: frozenset[str] | None) -> None:
    call.usage = usage_of(response)
    if strip is not None:
        call.tokens = tokens.from_response(response, call.usage)
        if strip:
            # Recorded once, on ``tokens``; the program had the answer as it came.
            raw = _codec.dumps_kept(tokens.strip_response(response, strip))
    call.response = raw
    call.finish_reason = finish_reason_of(response)
    if response.get("model"):
        call.model = str(response["model"])
