"""How the interception server forwards one program request to the real endpoint, in one of
three forms, and writes the answer into its :class:`~interplay.interception.flight.Flight`.

- Chat Completions, passed on (streamed or not) with the sampling applied
  (:func:`upstream_body`); the upstream's bytes reach the program as they came, except the
  usage chunk the server asked for and the program did not.
- Responses, to an endpoint that serves Responses itself: forwarded as it is
  (:mod:`~interplay.interception.passthrough`).
- Responses, to a Chat Completions endpoint: translated there and back
  (:mod:`~interplay.model.responses`), and recorded as the Responses object the
  program got.

Each form returns the :class:`~interplay.values.records.ModelCall` of its upstream call, its
``response`` being the answer as the program got it. An upstream error is given to the program
as an OpenAI-style error (its status kept when it had one), or, once a stream has begun, as
that stream's own error event.

This module owns the request sent upstream and the bytes sent back; it must not route,
coalesce, cancel or record (the server does), and it holds no user logic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from interplay._plumbing import asgi
from interplay._plumbing import codec as _codec
from interplay.config.endpoint import Endpoint
from interplay.errors import ErrorType
from interplay.interception import passthrough
from interplay.interception.flight import Flight, error_json
from interplay.model import messages as ms
from interplay.model import responses as rs
from interplay.model.client import ModelClient
from interplay.values.records import ModelCall

ERROR_STATUS = {ErrorType.TIMEOUT: 504, ErrorType.CONNECTION_ERROR: 502,
                ErrorType.BAD_RESPONSE: 502}

# Keys that shape a request rather than how the model samples: never taken from sampling.
_NOT_SAMPLING = frozenset({"model", "messages", "input", "instructions", "tools", "stream",
                           "stream_options", "previous_response_id"})
_CHAT_TOKEN_LIMITS = ("max_tokens", "max_completion_tokens")


def sampled(body: Mapping[str, Any], under: Mapping[str, Any], over: Mapping[str, Any],
            limits: tuple[str, ...] = _CHAT_TOKEN_LIMITS) -> dict[str, Any]:
    """``body`` with ``under`` (the endpoint's sampling) as defaults and ``over`` (the
    seat's) taking precedence."""
    if not under and not over:
        return dict(body)
    program_limit = any(k in body for k in limits)
    out = {k: v for k, v in under.items()
           if k not in _NOT_SAMPLING and not (program_limit and k in limits)}
    out.update(body)
    forced = {k: v for k, v in over.items() if k not in _NOT_SAMPLING}
    if any(k in forced for k in limits):
        for k in limits:  # one limit, under whichever name the seat gave it
            out.pop(k, None)
    out.update(forced)
    return out


def upstream_body(api: str, body: dict[str, Any], endpoint: Endpoint, *, model: str | None,
                  sampling: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The body sent upstream for a program's ``body`` (of ``api``), with the endpoint's
    sampling under it and the seat's ``sampling`` over it, as ``model`` (or the endpoint's);
    and what could not be forwarded: the sampling keys of a Responses request passed on as it
    is (the Responses API has no seed, stop or penalties), or the fields and tools of a
    Messages request that Chat Completions has no form for (:mod:`interplay.model.messages`
    lists the rules)."""
    if api == "responses" and endpoint.api == "responses":
        under, dropped = rs.sampling_for_responses(endpoint.sampling)
        under = {**under, **endpoint.extra_body}
        over, dropped_seat = rs.sampling_for_responses(sampling)
        upstream = sampled(body, under, over, limits=("max_output_tokens",))
        upstream["model"] = model or endpoint.model
        return upstream, dropped + dropped_seat
    dropped: list[str] = []
    if api == "responses":
        upstream = rs.responses_to_chat(body)
    elif api == "messages":
        upstream, dropped = ms.messages_to_chat(body)
    else:
        upstream = dict(body)
        if upstream.get("stream"):
            upstream["stream_options"] = dict(upstream.get("stream_options") or {},
                                              include_usage=True)
    upstream = sampled(upstream, endpoint.body_fields, sampling)
    upstream["model"] = model or endpoint.model
    return upstream, dropped


async def forward(client: ModelClient, api: str, body: dict[str, Any],
                  upstream: dict[str, Any], flight: Flight, *, capture: bool,
                  prefix: list[int] | None = None) -> ModelCall:
    """Send ``upstream`` (made by :func:`upstream_body` from the program's ``body``) through
    ``client`` in the form ``api`` and the endpoint call for, answering into ``flight``."""
    stream = bool(upstream.get("stream"))
    if api == "chat.completions":
        return await _chat(client, body, upstream, flight, stream, capture, prefix)
    if api == "messages":
        return await _messages(client, body, upstream, flight, stream, capture, prefix)
    if client.endpoint.api == "responses":
        return await _responses(client, upstream, flight, stream, capture)
    return await _translated(client, body, upstream, flight, stream, capture, prefix)


def _chat_stream_error(message: str, code: str) -> bytes:
    return b"data: " + _codec.dumps(asgi.error_body(message, type_="server_error",
                                                    code=code)) + b"\n\n"


def _as_chunks(response: Mapping[str, Any], with_usage: bool) -> list[dict[str, Any]]:
    """A whole chat.completion as the chunks of a stream: every choice's message as one
    delta, then the usage chunk if the program asked for it."""
    base = {"id": response.get("id"), "object": "chat.completion.chunk",
            "created": response.get("created"), "model": response.get("model")}
    choices = []
    for i, ch in enumerate(response.get("choices") or ()):
        if not isinstance(ch, Mapping):
            continue
        delta = dict(ch.get("message") or {})
        if delta.get("tool_calls"):  # a stream's tool calls carry their index
            delta["tool_calls"] = [dict(tc, index=j) for j, tc in enumerate(delta["tool_calls"])]
        choices.append({"index": ch.get("index", i), "delta": delta,
                        "finish_reason": ch.get("finish_reason"), "logprobs": ch.get("logprobs")})
    chunks = [dict(base, choices=choices)]
    if with_usage and response.get("usage"):
        chunks.append(dict(base, choices=[], usage=response["usage"]))
    return chunks


def _error_json(call: ModelCall, *, anthropic: bool = False) -> tuple[int, bytes]:
    status = call.status if call.status and call.status >= 400 else \
        ERROR_STATUS.get(call.error_type or "", 502)
    return status, error_json(status, call.error or "upstream model call failed",
                              anthropic=anthropic, code=call.error_type)


async def _chat(client: ModelClient, body: dict[str, Any], upstream: dict[str, Any],
                flight: Flight, stream: bool, capture: bool,
                prefix: list[int] | None) -> ModelCall:
    opts = body.get("stream_options")
    want_usage = bool(opts.get("include_usage")) if isinstance(opts, dict) else False

    def on_start() -> None:
        flight.start(200, asgi.SSE_HEADERS)
        flight.abort = _chat_stream_error

    def on_chunk(data: bytes, chunk: dict[str, Any]) -> None:
        if not want_usage and not chunk.get("choices") and chunk.get("usage"):
            return  # asked for by us, for the record; the program did not ask
        flight.push(b"data: " + data + b"\n\n")

    call = await client.chat_raw(upstream, on_chunk=on_chunk if stream else None,
                                 on_start=on_start, capture=capture, prefix=prefix)
    if call.error_type is None and call.response is not None:
        if not stream:
            flight.answer(200, call.response)  # the upstream's bytes, as they came
        else:
            if not flight.status:  # the upstream answered JSON to a streamed request
                on_start()
                for chunk in _as_chunks(call.parsed_response(), want_usage):
                    flight.push(b"data: " + _codec.dumps(chunk) + b"\n\n")
            flight.push(b"data: [DONE]\n\n")
    elif flight.status:  # the stream had begun: end it with an error chunk
        flight.push(_chat_stream_error(call.error or "upstream model call failed",
                                       call.error_type or ErrorType.SERVER_ERROR))
    else:
        flight.answer(*_error_json(call))
    return call


async def _responses(client: ModelClient, upstream: dict[str, Any], flight: Flight,
                     stream: bool, capture: bool) -> ModelCall:
    """A Responses request forwarded as it is to an upstream that serves Responses."""
    passing = passthrough.Forward(client, upstream, capture=capture)

    def on_start(status: int, headers: list[tuple[bytes, bytes]]) -> None:
        flight.start(status, headers)
        if stream and status < 400:
            flight.abort = passing.failed_event

    return await passing.run(on_start, flight.push)


async def _translated(client: ModelClient, body: dict[str, Any], upstream: dict[str, Any],
                      flight: Flight, stream: bool, capture: bool,
                      prefix: list[int] | None) -> ModelCall:
    """A Responses request sent upstream as Chat Completions, answered as Responses (and
    recorded as the Responses object the program got)."""
    return await _answered_as(client, upstream, flight, stream, capture, prefix,
                              rs.ChatToResponsesStream(body, upstream["model"]),
                              lambda completion: rs.chat_to_response(completion, body))


async def _messages(client: ModelClient, body: dict[str, Any], upstream: dict[str, Any],
                    flight: Flight, stream: bool, capture: bool,
                    prefix: list[int] | None) -> ModelCall:
    """A Messages request sent upstream as Chat Completions, answered as Messages (and
    recorded as the ``message`` the program got)."""
    return await _answered_as(client, upstream, flight, stream, capture, prefix,
                              ms.ChatToMessagesStream(body, upstream["model"]),
                              lambda completion: ms.chat_to_message(completion, body),
                              anthropic=True)


class _Streamer(Protocol):
    """A chat.completion's chunks as another API's SSE events (``rs.ChatToResponsesStream``,
    ``ms.ChatToMessagesStream``)."""

    def start(self) -> list[bytes]: ...

    def chunk(self, chunk: Mapping[str, Any]) -> list[bytes]: ...

    def finish(self, completion: Mapping[str, Any]) -> tuple[list[bytes], dict[str, Any]]: ...

    def failed(self, message: str, code: str = "server_error") -> bytes: ...


async def _answered_as(client: ModelClient, upstream: dict[str, Any], flight: Flight,
                       stream: bool, capture: bool, prefix: list[int] | None,
                       streamer: _Streamer, whole: Callable[[dict[str, Any]], dict[str, Any]],
                       *, anthropic: bool = False) -> ModelCall:
    """``upstream`` sent as Chat Completions and answered in the program's API: streamed
    through ``streamer`` (its ``start``, ``chunk``, ``finish`` and ``failed`` events), or as
    the object ``whole`` makes of the completion; the call's response is what the program
    got."""

    def on_start() -> None:
        flight.start(200, asgi.SSE_HEADERS)
        flight.abort = streamer.failed
        for ev in streamer.start():
            flight.push(ev)

    def on_chunk(data: bytes, chunk: dict[str, Any]) -> None:
        for ev in streamer.chunk(chunk):
            flight.push(ev)

    call = await client.chat_raw(upstream, on_chunk=on_chunk if stream else None,
                                 on_start=on_start, capture=capture, prefix=prefix)
    if call.error_type is None and call.response is not None:
        completion = call.parsed_response()
        if stream:
            if not flight.status:
                on_start()
            events, answer = streamer.finish(completion)
            for ev in events:
                flight.push(ev)
            call.response = _codec.dumps_kept(answer)
        else:
            call.response = _codec.dumps_kept(whole(completion))
            flight.answer(200, call.response)
    elif flight.status:
        flight.push(streamer.failed(call.error or "upstream failed",
                                    call.error_type or ErrorType.SERVER_ERROR))
    else:
        flight.answer(*_error_json(call, anthropic=anthropic))
    return call
