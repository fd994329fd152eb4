"""The model client: every Chat Completions call interplay makes crosses this module.

A :class:`ModelClient` sends one endpoint's calls through its transport
(:mod:`interplay.model.transport`: a pooled session) under its retry policy
(:mod:`interplay.model.retries`), reads each answer, whole or streamed
(:mod:`interplay.model.wire`), and records it as a :class:`~interplay.values.records.ModelCall`
whose ``response`` is the body the endpoint sent. Model and transport failures never raise:
they end up on ``ModelCall.error`` / ``error_type``. :class:`Models` is a run's pool of clients.

It must not hold user logic or log message text, tool arguments or bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

from interplay._plumbing import codec as _codec
from interplay._plumbing.ids import new_id
from interplay.config.endpoint import Endpoint
from interplay.errors import ErrorType, InterplayError
from interplay.log import get_logger
from interplay.model import tokens, wire
from interplay.model.retries import Failure, RetryPolicy
from interplay.model.share import FairShare
from interplay.model.transport import Transport, UpstreamResponse, open_transport
from interplay.values.records import Message, ModelCall

log = get_logger("interplay.model.client")

#: Called with (raw SSE data line, parsed chunk) for every chunk of a streamed call, as it arrives.
ChunkSink = Callable[[bytes, dict[str, Any]], Awaitable[None] | None]


def encode_body(body: Mapping[str, Any],
                messages: Sequence[Message | Mapping[str, Any]]) -> bytes:
    """``body`` (as :meth:`ModelClient.build_body` made it from ``messages``) as JSON, with
    each Message's JSON encoded once per message rather than once per call: a chat resends
    its whole conversation on every call."""
    rest = _codec.dumps({k: v for k, v in body.items() if k != "messages"})
    parts = b",".join([(m._wire_json or m.wire_json()) if isinstance(m, Message)
                       else _codec.dumps(m) for m in messages])
    return b'{"messages":[' + parts + (b"]," + rest[1:] if len(rest) > 2 else b"]}")


class ModelClient:
    """Chat Completions against one endpoint, with its retry policy and pooled transport.

    An endpoint with ``base_url`` None is the embedded local model: it is started on the first
    call (once per process) by the :class:`Models` pool or, used alone, by the process-wide
    shared :class:`~interplay.model.local.LocalModel`.
    """

    def __init__(self, endpoint: Endpoint, *, max_connections: int = 64,
                 _resolve: Callable[[], Awaitable[Endpoint]] | None = None) -> None:
        self.endpoint = endpoint
        #: The retry policy of every call to this endpoint (the passthrough's too).
        self.policy = RetryPolicy(endpoint)
        self._max_connections = max(1, int(max_connections))
        self._resolve = _resolve
        self._transport: Transport | None = None
        self._init_lock: asyncio.Lock | None = None
        self._share: FairShare | None = None
        self._share_loop: asyncio.AbstractEventLoop | None = None
        if endpoint.base_url is not None:
            self._transport = open_transport(endpoint, self._max_connections)

    async def transport(self) -> Transport:
        """The endpoint's transport; the embedded model is started first if it is the one."""
        if self._transport is not None:
            return self._transport
        if self.endpoint.base_url is not None:
            # A remote client after aclose(): it reopens, with a fresh pool, on its next call.
            self._transport = open_transport(self.endpoint, self._max_connections)
            return self._transport
        if self._init_lock is None:
            self._init_lock = asyncio.Lock()
        async with self._init_lock:
            if self._transport is None:
                if self._resolve is None:
                    from interplay.model.local import shared_local_endpoint

                    resolved = await shared_local_endpoint()
                else:
                    resolved = await self._resolve()
                if self.endpoint.model == "default":
                    # Requests and records name the model that answers; base_url stays None,
                    # so the client still reads as the embedded model and re-resolves after
                    # aclose().
                    self.endpoint = attrs.evolve(self.endpoint, model=resolved.model)
                self._transport = open_transport(
                    attrs.evolve(self.endpoint, base_url=resolved.base_url),
                    self._max_connections)
            return self._transport

    def share(self) -> FairShare:
        """The fair queue of this endpoint's connections (:mod:`interplay.model.share`) in
        the running loop: every attempt of every call holds one of its slots."""
        loop = asyncio.get_running_loop()
        if self._share is None or self._share_loop is not loop:
            self._share, self._share_loop = FairShare(self._max_connections), loop
        return self._share

    async def aclose(self) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.aclose()

    # -- calls ---------------------------------------------------------------------------------

    def build_body(self, messages: Sequence[Message | Mapping[str, Any]], *,
                   tools: list[dict[str, Any]] | None = None, stream: bool = False,
                   **params: Any) -> dict[str, Any]:
        """The JSON body :meth:`chat` sends. Message dicts are shared, not copied: a harness
        that resends a growing conversation would otherwise hold every message once per call
        (the recorded request of each call keeps its own list, never a dict that changes)."""
        messages_out = [(m._wire or m.wire()) if isinstance(m, Message)
                        else m if isinstance(m, dict) else dict(m) for m in messages]
        body: dict[str, Any] = {"model": self.endpoint.model, "messages": messages_out}
        body.update(self.endpoint.body_fields)
        body.update(params)
        if tools:
            body["tools"] = tools
        if stream:
            body["stream"] = True
            body.setdefault("stream_options", {"include_usage": True})
        else:
            body.pop("stream", None)
        return body

    async def chat(self, messages: Sequence[Message | Mapping[str, Any]], *,
                   tools: list[dict[str, Any]] | None = None, stream: bool = False,
                   capture: bool = False, prefix: Sequence[int] | None = None,
                   **params: Any) -> ModelCall:
        """One Chat Completions call with retries; failures are recorded, never raised.
        ``capture`` asks for the call's token ids and logprobs, ``prefix`` gives the ids it
        continues from (see :meth:`chat_raw`)."""
        body = self.build_body(messages, tools=tools, stream=stream, **params)
        strip: frozenset[str] | None = None
        if capture:
            body, strip = tokens.ask_chat(body, self._sent_prefix(prefix))
        call = await self._send(body, encode_body(body, messages), strip, None, None)
        _diverged(call, prefix if capture else None)
        return call

    async def chat_raw(self, body: dict[str, Any], *, on_chunk: ChunkSink | None = None,
                       on_start: Callable[[], None] | None = None,
                       payload: bytes | None = None, capture: bool = False,
                       prefix: Sequence[int] | None = None) -> ModelCall:
        """Send ``body`` as it is (a Chat Completions request) with retries; return the call.

        With ``"stream": true`` each SSE chunk is handed to ``on_chunk`` (raw data line, parsed
        chunk) as it arrives; ``on_start`` fires once, just before the first chunk. A failure
        before the first chunk is retried; once a chunk has been handed on, it is final. The
        interception server forwards programs' requests through here. ``payload`` is
        ``body`` already encoded (:func:`encode_body`), when the caller has it.

        ``capture`` asks the endpoint for the call's token ids and logprobs
        (:func:`interplay.model.tokens.ask_chat`) and records what it returns on the call's
        ``tokens``; what ``body`` did not ask for itself is taken out of the recorded response
        and of the chunks ``on_chunk`` gets.

        ``prefix`` (with ``capture``) is what the trace's previous call read and sampled
        (:func:`interplay.model.tokens.continuation`): sent for the endpoint to continue from
        when ``continue_tokens`` is on, and in any case checked against the prompt ids the
        endpoint returns (a call that left it records where, ``tokens.diverged_at``).
        """
        strip: frozenset[str] | None = None
        if capture:
            body, strip = tokens.ask_chat(body, self._sent_prefix(prefix))
            payload = None
        call = await self._send(body, payload, strip, on_chunk, on_start)
        _diverged(call, prefix if capture else None)
        return call

    async def count_tokens(self, body: Mapping[str, Any]) -> int:
        """The prompt tokens of a Chat Completions ``body`` (its messages and tools) as the
        endpoint's tokenizer counts them, chat template included: ``POST /tokenize`` at the
        endpoint's root, as vLLM and the embedded model serve it. A Failure (``not_supported``
        for an endpoint without that route) when it cannot be counted; never recorded as a
        model call."""
        transport = self._transport or await self.transport()
        request = {"model": body.get("model") or self.endpoint.model,
                   "messages": body.get("messages") or [], "add_generation_prompt": True}
        if body.get("tools"):
            request["tools"] = body["tools"]
        data = _codec.dumps(request)
        url = transport.root_url("/tokenize")

        async def attempt() -> int:
            async with self.share().slot():
                try:
                    answer = await transport.post(url, request, data, stream=False)
                except Failure as f:
                    if f.status in (404, 405):
                        f.error_type, f.final = ErrorType.NOT_SUPPORTED, True
                        f.message = ("the endpoint has no /tokenize route to count tokens "
                                     "with (vLLM and the embedded model serve one)")
                    raise
                try:
                    raw = await answer.read()
                finally:
                    await answer.close()
            try:
                parsed = _codec.loads(raw)
            except ValueError:
                raise Failure(ErrorType.BAD_RESPONSE, "the /tokenize answer is not JSON",
                              answer.status) from None
            count = parsed.get("count") if isinstance(parsed, dict) else None
            if not isinstance(count, int) or isinstance(count, bool):
                raise Failure(ErrorType.BAD_RESPONSE, "the /tokenize answer has no count",
                              answer.status)
            return count

        return await self.policy.run(attempt, event="model.count_tokens_retry")

    def _sent_prefix(self, prefix: Sequence[int] | None) -> Sequence[int] | None:
        return prefix if self.endpoint.continue_tokens else None

    async def _send(self, body: dict[str, Any], payload: bytes | None,
                    strip: frozenset[str] | None, on_chunk: ChunkSink | None,
                    on_start: Callable[[], None] | None) -> ModelCall:
        call = ModelCall(id=f"mc_{new_id(10)}",
                         model=str(body.get("model") or self.endpoint.model), request=body,
                         started_at=time.time(), streamed=bool(body.get("stream")), attempts=0)
        t0 = time.monotonic()
        try:
            transport = self._transport or await self.transport()
        except InterplayError:
            raise
        except Exception as exc:  # the local model failed to start: record it as a call failure
            call.error, call.error_type = f"{type(exc).__name__}: {exc}", ErrorType.CONNECTION_ERROR
            call.attempts = 1
            call.latency_s = time.monotonic() - t0
            return call
        if body.get("model") == "default" and self.endpoint.model != "default":
            # Built before the embedded model was resolved: send the name it resolved to.
            body = {**body, "model": self.endpoint.model}
            call.model, call.request = self.endpoint.model, body
            payload = None
        data = _codec.dumps(body) if payload is None else payload

        share = self.share()

        async def attempt() -> None:
            call.attempts += 1
            async with share.slot():  # held from the request to the answer's end
                await send()

        async def send() -> None:
            try:
                answer = await transport.post("/chat/completions", body, data,
                                              stream=call.streamed)
                try:
                    call.status = answer.status
                    if call.streamed and "text/event-stream" in answer.headers.get(
                            "content-type", ""):
                        await _read_stream(call, answer, t0, on_chunk, on_start, strip)
                    else:
                        raw = await answer.read()
                        response = wire.parse_body(raw, answer.status, "choices",
                                                   "a chat.completion")
                        if strip is not None:
                            call.tokens = tokens.from_chat(
                                response, wire.chat_usage(response.get("usage")))
                            if strip:
                                response = tokens.strip_chat(response, strip)
                                raw = _codec.dumps_kept(response)
                        _finish(call, raw, response)
                finally:
                    await answer.close()
            except Failure as f:
                if f.error_type == ErrorType.CONNECTION_ERROR and self.endpoint.is_local:
                    _local_gone(f)
                raise

        try:
            await self.policy.run(attempt)
        except Failure as f:
            call.status, call.error, call.error_type = f.status, f.message, f.error_type
            call.response = wire.json_object(f.body)
            hint = tokens.refusal_hint(f.body) if strip is not None and f.status == 400 \
                else None
            if hint is not None:
                call.error = f"{f.message}; {hint}"
            log.warning("model.call_failed", call_id=call.id, error_type=f.error_type,
                        status=f.status, attempts=call.attempts)
        call.latency_s = time.monotonic() - t0
        return call


def _diverged(call: ModelCall, prefix: Sequence[int] | None) -> None:
    """Note on ``call`` where its prompt ids leave ``prefix``, if they do."""
    if not prefix or call.tokens is None or call.tokens.prompt_ids is None:
        return
    at = tokens.diverged_at(prefix, call.tokens.prompt_ids)
    if at is not None:
        call.tokens.diverged_at = at
        log.info("model.tokens_diverged", call_id=call.id, at=at, prefix=len(prefix))


def _local_gone(failure: Failure) -> None:
    """A failed call to the embedded model whose server has ended says why, and is final:
    nothing will answer the next try."""
    from interplay.model.local import shared_exit_reason

    reason = shared_exit_reason()
    if reason is not None:
        failure.message, failure.final = reason, True


async def _read_stream(call: ModelCall, answer: UpstreamResponse, t0: float,
                       on_chunk: ChunkSink | None, on_start: Callable[[], None] | None,
                       strip: frozenset[str] | None) -> None:
    asm = wire.StreamAssembler()
    captured = tokens.StreamTokens() if strip is not None else None
    done = delivered = False
    try:
        async with contextlib.aclosing(wire.aiter_sse_data(answer.chunks())) as lines:
            async for data in lines:
                if data == b"[DONE]":
                    done = True
                    break
                try:
                    chunk = _codec.loads(data)
                except ValueError:
                    raise Failure(ErrorType.BAD_RESPONSE, "stream chunk is not JSON",
                                  answer.status) from None
                if not isinstance(chunk, dict):
                    raise Failure(ErrorType.BAD_RESPONSE, "stream chunk is not an object",
                                  answer.status)
                if "error" in chunk and not chunk.get("choices"):
                    err = chunk["error"]
                    msg = err.get("message") if isinstance(err, dict) else str(err)
                    raise Failure(ErrorType.SERVER_ERROR, f"error in stream: {msg}", answer.status)
                wire.check_chunk(chunk, answer.status)
                if call.first_token_s is None:
                    call.first_token_s = time.monotonic() - t0
                asm.add(chunk)
                if captured is not None:
                    captured.add(chunk)
                    if strip:
                        # The chunk as the caller would have had it without capture.
                        chunk = tokens.strip_chat(chunk, strip)
                        data = _codec.dumps(chunk)
                if on_chunk is not None:
                    if not delivered:
                        delivered = True
                        if on_start is not None:
                            on_start()
                    out = on_chunk(data, chunk)
                    if inspect.isawaitable(out):
                        await out
        if not done and not asm.finished:
            raise Failure(ErrorType.CONNECTION_ERROR, "stream ended before it finished",
                          answer.status)
    except Failure as f:
        f.final = delivered  # the program has part of this answer: it cannot be asked again
        raise
    result = asm.result()
    if captured is not None:
        call.tokens = captured.result(wire.chat_usage(result.get("usage")))
    _finish(call, _codec.dumps_kept(result), result)


def _finish(call: ModelCall, raw: bytes, response: dict[str, Any]) -> None:
    call.response = raw
    # Made now, from the dict at hand, rather than by parsing the bytes again.
    call._message = (raw, wire.chat_message(response))
    call.usage = wire.chat_usage(response.get("usage"))
    choices = response.get("choices") or ()
    if choices and isinstance(choices[0], Mapping):
        call.finish_reason = choices[0].get("finish_reason")
    if response.get("model"):
        call.model = str(response["model"])


def _key(endpoint: Endpoint) -> tuple[Any, ...]:
    return tuple(_codec.dumps(v) if isinstance(v, dict) else v
                 for v in attrs.astuple(endpoint, recurse=False))


class Models:
    """A run's pool: one ModelClient per distinct endpoint, sized to the run's concurrency.

    The embedded local model (``base_url`` None) is started lazily on first use and stopped by
    :meth:`aclose` if this pool started it.
    """

    def __init__(self, *, max_connections: int = 64) -> None:
        self.max_connections = max_connections
        self._clients: dict[tuple[Any, ...], ModelClient] = {}
        # The same Endpoint object asks again for every agent of every episode: found by
        # identity before its settings are spelled into a key (the endpoint is held, so its id
        # is not reused).
        self._by_identity: dict[int, tuple[Endpoint, ModelClient]] = {}
        self._local: Any = None
        self._local_lock: asyncio.Lock | None = None

    def client(self, endpoint: Endpoint) -> ModelClient:
        known = self._by_identity.get(id(endpoint))
        if known is not None and known[0] is endpoint:
            return known[1]
        key = _key(endpoint)
        found = self._clients.get(key)
        if found is None:
            resolve = self._local_endpoint if endpoint.base_url is None else None
            found = ModelClient(endpoint, max_connections=self.max_connections,
                                _resolve=resolve)
            self._clients[key] = found
        self._by_identity[id(endpoint)] = (endpoint, found)
        return found

    async def _local_endpoint(self) -> Endpoint:
        from interplay.model.local import acquire_shared

        if self._local_lock is None:
            self._local_lock = asyncio.Lock()
        async with self._local_lock:
            if self._local is None:
                self._local = await acquire_shared()
        return self._local.endpoint

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        self._by_identity = {}
        for c in clients:
            await c.aclose()
        local, self._local = self._local, None
        if local is not None:
            from interplay.model.local import release_shared

            await release_shared()
