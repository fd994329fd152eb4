"""The model client: every Chat Completions call interplay makes crosses this module.

It owns one pooled HTTP client per endpoint (:class:`interplay.model.http.HttpPool`, a lean
HTTP/1.1 client; ``transport="httpx"`` sends through the openai SDK's httpx2 client instead, for
comparison), our retry policy (exponential backoff with full jitter, Retry-After
honoured within the budget), reassembly of streamed completions into the non-streamed shape, and
the :class:`~interplay.records.ModelCall` that records each call. Model and transport failures
never raise: they end up on ``ModelCall.error`` / ``error_type``.

It must not hold user logic or log message text, tool arguments or bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import inspect
import json
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import attrs
import structlog

from interplay._ids import new_id
from interplay.errors import InterplayError
from interplay.model.endpoint import Endpoint
from interplay.model.http import HttpPool, HttpResponse
from interplay.records import Message, ModelCall, ToolCall, Usage, dumps, dumps_kept, loads

if TYPE_CHECKING:
    import httpx2

log = structlog.get_logger("interplay.model.client")

#: Called with (raw SSE data line, parsed chunk) for every chunk of a streamed call, as it arrives.
ChunkSink = Callable[[bytes, dict[str, Any]], Awaitable[None] | None]

_BACKOFF_BASE_S = 0.25
_BACKOFF_CAP_S = 8.0
_RETRYABLE = frozenset({"rate_limited", "server_error", "timeout", "connection_error"})


class _Failure(Exception):
    """One failed attempt, classified."""

    def __init__(self, error_type: str, message: str, status: int | None = None,
                 retry_after: float | None = None, body: bytes | None = None) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.body = body


def retry_delay(failure: _Failure, attempt: int, t0: float, endpoint: Endpoint) -> float | None:
    """Seconds to wait before retrying after ``failure`` on attempt number ``attempt`` (the
    call began at monotonic ``t0``), or None when the call must stop here: a failure that is
    not transient, the endpoint's retries spent, or a wait that would end past its
    ``retry_max_s`` budget. Exponential backoff with full jitter; Retry-After wins."""
    if failure.error_type not in _RETRYABLE or attempt > endpoint.max_retries:
        return None
    remaining = endpoint.retry_max_s - (time.monotonic() - t0)
    if failure.retry_after is not None:
        delay = failure.retry_after
    else:
        delay = random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** attempt))
    return None if delay >= remaining else delay


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def redact_url(text: str) -> str:
    """``text`` with the credentials of any URL in it masked (``https://***@host``)."""
    return _USERINFO.sub(r"\1***@", text)


def _status_error_type(status: int) -> str:
    if status == 429:
        return "rate_limited"
    if status >= 500:
        return "server_error"
    if status == 408:
        return "timeout"
    if status == 409:
        # A conflict is transient by OpenAI's own convention; retry it like a server error.
        return "server_error"
    if status in (401, 403):
        return "auth_error"
    if status == 404:
        return "not_found"
    return "bad_request"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(body: bytes, status: int) -> str:
    try:
        data = json.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return f"HTTP {status}: {err['message']}"
        if isinstance(err, str):
            return f"HTTP {status}: {err}"
    except (ValueError, TypeError):
        pass
    return f"HTTP {status}"


class _StreamAssembler:
    """Folds chat.completion.chunk dicts into one chat.completion dict."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.system_fingerprint: str | None = None
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.finished = False

    def add(self, chunk: Mapping[str, Any]) -> None:
        if self.id is None:
            self.id = chunk.get("id")
            self.model = chunk.get("model")
            self.created = chunk.get("created")
            self.system_fingerprint = chunk.get("system_fingerprint")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for ch in chunk.get("choices") or ():
            idx = ch.get("index", 0)
            acc = self.choices.get(idx)
            if acc is None:
                acc = self.choices[idx] = {"role": "assistant", "text": [], "calls": {},
                                           "finish_reason": None, "refusal": None}
            delta = ch.get("delta") or {}
            if delta.get("role"):
                acc["role"] = delta["role"]
            if delta.get("content"):
                acc["text"].append(delta["content"])
            if delta.get("refusal"):
                acc["refusal"] = (acc["refusal"] or "") + delta["refusal"]
            for tc in delta.get("tool_calls") or ():
                i = tc.get("index", len(acc["calls"]))
                call = acc["calls"].get(i)
                if call is None:
                    call = acc["calls"][i] = {"id": "", "type": "function",
                                              "function": {"name": "", "arguments": ""}}
                if tc.get("id"):
                    call["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    call["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    call["function"]["arguments"] += fn["arguments"]
            if ch.get("finish_reason"):
                acc["finish_reason"] = ch["finish_reason"]
                self.finished = True

    def result(self) -> dict[str, Any]:
        choices = []
        for idx in sorted(self.choices):
            acc = self.choices[idx]
            message: dict[str, Any] = {"role": acc["role"],
                                       "content": "".join(acc["text"]) if acc["text"] else None}
            if acc["refusal"] is not None:
                message["refusal"] = acc["refusal"]
            if acc["calls"]:
                message["tool_calls"] = [acc["calls"][i] for i in sorted(acc["calls"])]
            elif message["content"] is None:
                message["content"] = ""
            choices.append({"index": idx, "message": message,
                            "finish_reason": acc["finish_reason"], "logprobs": None})
        out: dict[str, Any] = {"id": self.id or f"chatcmpl-{new_id(12)}",
                               "object": "chat.completion", "created": self.created or
                               int(time.time()), "model": self.model or "", "choices": choices}
        if self.system_fingerprint:
            out["system_fingerprint"] = self.system_fingerprint
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # A parsed body holds dicts: the plain check first, the ABC's (several times slower) after.
    return isinstance(value, dict) or isinstance(value, Mapping)


def _usage(data: Mapping[str, Any] | None) -> Usage | None:
    if not _is_mapping(data):
        return None
    try:
        p = int(data.get("prompt_tokens") or 0)
        c = int(data.get("completion_tokens") or 0)
        t = int(data.get("total_tokens") or (p + c))
    except (TypeError, ValueError):
        return None
    return Usage(prompt_tokens=p, completion_tokens=c, total_tokens=t)


def assistant_message(call: ModelCall) -> Message | None:
    """The assistant Message a recorded call answered (tool calls as ToolCall), or None: a
    Chat Completions ``choices[0].message``, or a Responses object's output items."""
    message = call._message
    if message is None:
        response = call.response
        if _is_mapping(response) and "output" in response and "choices" not in response:
            message = _responses_message(response)
        else:
            message = _assistant_message(response)
        call._message = message
    return message


def request_messages(call: ModelCall) -> list[Message]:
    """A recorded request's conversation as Messages (Chat Completions ``messages`` or a
    Responses ``input``); what cannot be read as a message is left out."""
    body: Any = call.request or {}
    if "messages" not in body and "input" in body:
        from interplay.interception import responses as rs

        try:
            body = rs.responses_to_chat(body)
        except rs.BadRequest:
            return []
    out = []
    for raw in body.get("messages") or ():
        with contextlib.suppress(InterplayError, TypeError, ValueError):
            out.append(Message.from_openai(raw))
    return out


def _responses_message(resp: Mapping[str, Any]) -> Message:
    texts: list[str] = []
    tool_calls: list[ToolCall] = []
    for item in resp.get("output") or ():
        if not _is_mapping(item):
            continue
        if item.get("type") == "message":
            texts += [str(p.get("text") or "") for p in item.get("content") or ()
                      if _is_mapping(p) and p.get("type") == "output_text"]
        elif item.get("type") == "function_call":
            args = item.get("arguments")
            tool_calls.append(ToolCall(id=str(item.get("call_id") or ""),
                                       name=str(item.get("name") or ""),
                                       arguments=args if isinstance(args, str)
                                       else json.dumps(args or {})))
    return Message("assistant", "".join(texts) if texts or not tool_calls else None,
                   tool_calls=tuple(tool_calls))


def _assistant_message(resp: Mapping[str, Any] | None) -> Message | None:
    if not _is_mapping(resp):
        return None
    choices = resp.get("choices")
    if not choices or not _is_mapping(choices[0]):
        return None
    msg = choices[0].get("message")
    if not _is_mapping(msg):
        return None
    calls = []
    for raw in msg.get("tool_calls") or ():
        fn = raw.get("function") or {}
        args = fn.get("arguments")
        calls.append(ToolCall(id=str(raw.get("id") or ""), name=str(fn.get("name") or ""),
                              arguments=args if isinstance(args, str)
                              else json.dumps(args if args is not None else {})))
    content = msg.get("content")
    if content is not None and not isinstance(content, str | list):
        content = str(content)
    return Message(role="assistant", content=content, tool_calls=tuple(calls))


def _root(exc: BaseException) -> BaseException:
    seen = 0
    while (exc.__cause__ or exc.__context__) is not None and seen < 10:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return exc


class _HttpxResponse:
    """An httpx2 response seen through the names :class:`interplay.model.http.HttpResponse` has."""

    __slots__ = ("_resp", "headers", "status")

    def __init__(self, resp: httpx2.Response) -> None:
        self._resp = resp
        self.status: int = resp.status_code
        self.headers = resp.headers

    async def read(self) -> bytes:
        return await self._resp.aread()

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        return self._resp.aiter_bytes()

    async def aclose(self) -> None:
        await self._resp.aclose()


def parse_body(data: bytes, status: int, list_key: str, what: str) -> dict[str, Any]:
    """A whole (non-streamed) response body: a JSON object with a list under ``list_key``
    (``choices`` for Chat Completions, ``output`` for Responses); else a ``bad_response``."""
    try:
        parsed = loads(data)
    except ValueError:
        raise _Failure("bad_response", "response body is not JSON", status) from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get(list_key), list):
        raise _Failure("bad_response", f"response is not {what}", status)
    return parsed


def encode_body(body: Mapping[str, Any],
                messages: Sequence[Message | Mapping[str, Any]]) -> bytes:
    """``body`` (as :meth:`ModelClient.build_body` made it from ``messages``) as JSON, with
    each Message's JSON encoded once per message rather than once per call: a chat resends
    its whole conversation on every call."""
    rest = dumps({k: v for k, v in body.items() if k != "messages"})
    parts = b",".join([(m._wire_json or m.wire_json()) if isinstance(m, Message) else dumps(m)
                       for m in messages])
    return b'{"messages":[' + parts + (b"]," + rest[1:] if len(rest) > 2 else b"]}")


def _new_call_id() -> str:
    return f"mc_{new_id(10)}"


class ModelClient:
    """Chat Completions against one endpoint, with our retries and a pooled connection pool.

    An endpoint with ``base_url`` None is the embedded local model: it is started on the first
    call (once per process) by the :class:`Models` pool or, used alone, by the process-wide
    shared :class:`~interplay.model.local.LocalModel`.
    """

    def __init__(self, endpoint: Endpoint, *, max_connections: int = 64,
                 transport: str = "interplay",
                 _resolve: Callable[[], Awaitable[Endpoint]] | None = None) -> None:
        if transport not in ("interplay", "httpx"):
            raise InterplayError(f"transport must be interplay or httpx; got {transport!r}")
        self.endpoint = endpoint
        self.transport = transport
        self._max_connections = max(1, int(max_connections))
        self._resolve = _resolve
        self._opened = False
        self._http: Any = None
        self._pool: HttpPool | None = None
        # What a failed exchange raises: interplay.model.http's errors are TimeoutError and OSError;
        # the httpx transport adds httpx2's own (imported only then).
        self._timeouts: tuple[type[BaseException], ...] = (TimeoutError,)
        self._failures: tuple[type[BaseException], ...] = (OSError,)
        self._url: str = ""
        self._headers: dict[str, str] = {}
        self._init_lock: asyncio.Lock | None = None
        if endpoint.base_url is not None:
            self._open(endpoint)

    # -- setup ---------------------------------------------------------------------------------

    def _open(self, endpoint: Endpoint) -> None:
        # The bearer header, spelt here: importing the SDK to spell it costs ~25 MB and a second.
        self._headers = {"Authorization": f"Bearer {endpoint.api_key()}",
                         "Content-Type": "application/json", "Accept": "application/json"}
        self._url = str(endpoint.base_url).rstrip("/") + "/chat/completions"
        if self.transport == "httpx":
            self._make_httpx(endpoint)
        else:
            # Our own client, not aiohttp's or httpx's: at 5000 calls/s their per-request
            # machinery cost more CPU than the rest of an episode (benchmarks/bench_run.py,
            # benchmarks/bench_http_client.py).
            try:
                self._pool = HttpPool(str(endpoint.base_url), max_connections=self._max_connections,
                                      connect_timeout_s=min(10.0, endpoint.timeout_s),
                                      read_timeout_s=endpoint.timeout_s)
            except ValueError as exc:
                raise InterplayError(f"model.base_url: {exc}") from None
        self._opened = True

    def _make_httpx(self, endpoint: Endpoint) -> Any:
        import httpx2
        import openai

        self._timeouts = (TimeoutError, httpx2.TimeoutException)
        self._failures = (OSError, httpx2.TransportError, httpx2.StreamError)
        limits = httpx2.Limits(max_connections=self._max_connections,
                               max_keepalive_connections=self._max_connections)
        timeout = httpx2.Timeout(endpoint.timeout_s, connect=min(10.0, endpoint.timeout_s))
        self._http = openai.DefaultAsyncHttpx2Client(limits=limits, timeout=timeout)
        return self._http

    async def _ready(self) -> None:
        if self._opened:
            return
        if self.endpoint.base_url is not None:
            # A remote client after aclose(): it reopens, with a fresh pool, on its next call.
            self._open(self.endpoint)
            return
        if self._init_lock is None:
            self._init_lock = asyncio.Lock()
        async with self._init_lock:
            if self._opened:
                return
            if self._resolve is None:
                from interplay.model.local import shared_local_endpoint

                resolved = await shared_local_endpoint()
            else:
                resolved = await self._resolve()
            if self.endpoint.model == "default":
                # Requests and records name the model that answers; base_url stays None, so
                # the client still reads as the embedded model and re-resolves after aclose().
                self.endpoint = attrs.evolve(self.endpoint, model=resolved.model)
            self._open(attrs.evolve(self.endpoint, base_url=resolved.base_url))

    async def aclose(self) -> None:
        self._opened = False
        pool, self._pool = self._pool, None
        http, self._http = self._http, None
        if pool is not None:
            await pool.aclose()
        if http is not None:
            await http.aclose()

    # -- calls ---------------------------------------------------------------------------------

    def build_body(self, messages: Sequence[Message | Mapping[str, Any]], *,
                   tools: list[dict[str, Any]] | None = None, stream: bool = False,
                   **params: Any) -> dict[str, Any]:
        """The JSON body :meth:`chat` sends. Message dicts are shared, not copied: a harness
        that resends a growing conversation would otherwise hold every message once per call
        (the recorded request of each call keeps its own list, never a dict that changes)."""
        wire = [(m._wire or m.wire()) if isinstance(m, Message) else m if isinstance(m, dict)
                else dict(m) for m in messages]
        body: dict[str, Any] = {"model": self.endpoint.model, "messages": wire}
        body.update(self.endpoint.sampling)
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
                   **params: Any) -> ModelCall:
        """One Chat Completions call with retries; failures are recorded, never raised."""
        body = self.build_body(messages, tools=tools, stream=stream, **params)
        return await self.chat_raw(body, payload=encode_body(body, messages))

    async def chat_raw(self, body: dict[str, Any], *, on_chunk: ChunkSink | None = None,
                       on_start: Callable[[], None] | None = None,
                       payload: bytes | None = None) -> ModelCall:
        """Send ``body`` as it is (a Chat Completions request) with retries; return the call.

        With ``"stream": true`` each SSE chunk is handed to ``on_chunk`` (raw data line, parsed
        chunk) as it arrives; ``on_start`` fires once, just before the first chunk. A failure
        before the first chunk is retried; once a chunk has been handed on, it is final. The
        interception server forwards programs' requests through here. ``payload`` is
        ``body`` already encoded (:func:`encode_body`), when the caller has it.
        """
        call = ModelCall(id=_new_call_id(), model=str(body.get("model") or self.endpoint.model),
                         request=body, started_at=time.time(),
                         streamed=bool(body.get("stream")))
        t0 = time.monotonic()
        try:
            if not self._opened:  # opened already on every call but the first
                await self._ready()
        except InterplayError:
            raise
        except Exception as exc:  # the local model failed to start: record it as a call failure
            call.error, call.error_type = f"{type(exc).__name__}: {exc}", "connection_error"
            call.latency_s = time.monotonic() - t0
            return call
        if body.get("model") == "default" and self.endpoint.model != "default":
            # Built before the embedded model was resolved: send the name it resolved to.
            body = {**body, "model": self.endpoint.model}
            call.model, call.request = self.endpoint.model, body
            payload = None
        ep = self.endpoint
        if payload is None:
            payload = dumps(body)
        delivered = [False]
        attempt = 0
        while True:
            attempt += 1
            call.attempts = attempt
            try:
                await self._attempt(call, payload, t0, on_chunk, on_start, delivered)
                call.error = call.error_type = None
                break
            except _Failure as f:
                call.status, call.error, call.error_type = f.status, f.message, f.error_type
                if f.body is not None and call.response is None:
                    try:
                        parsed = json.loads(f.body)
                        if isinstance(parsed, dict):
                            call.response = parsed
                    except ValueError:
                        pass
                delay = None if delivered[0] else retry_delay(f, attempt, t0, ep)
                if delay is None:
                    break
                log.info("model.retry", attempt=attempt, error_type=f.error_type,
                         status=f.status, delay_s=round(delay, 3))
                call.response = None
                await asyncio.sleep(delay)
        call.latency_s = time.monotonic() - t0
        if call.error_type is not None:
            log.warning("model.call_failed", call_id=call.id, error_type=call.error_type,
                        status=call.status, attempts=call.attempts)
        return call

    async def _attempt(self, call: ModelCall, payload: bytes, t0: float,
                       on_chunk: ChunkSink | None, on_start: Callable[[], None] | None,
                       delivered: list[bool]) -> None:
        try:
            if self._pool is not None:
                resp: Any = await self._pool.request("POST", "/chat/completions", body=payload,
                                                     headers=self._headers)
            else:
                resp = _HttpxResponse(await self._http.send(
                    self._http.build_request("POST", self._url, content=payload,
                                             headers=self._headers), stream=True))
        except (*self._timeouts, *self._failures) as exc:
            # By the root cause: a wrapper's own class can say "timeout" for a refused
            # connection, the root cause cannot.
            kind = "timeout" if isinstance(_root(exc), self._timeouts) else "connection_error"
            raise _Failure(kind, "request timed out" if kind == "timeout" else
                           redact_url(f"connection error: {_root(exc)}")) from None
        if resp.status >= 400:
            try:
                content = await resp.read()
            except (*self._timeouts, *self._failures):
                content = b""
            finally:
                await resp.aclose()
            status = resp.status
            raise _Failure(_status_error_type(status), _error_message(content, status), status,
                           parse_retry_after(resp.headers.get("retry-after")), content)
        try:
            call.status = resp.status
            ctype = resp.headers.get("content-type", "")
            if call.streamed and "text/event-stream" in ctype:
                await self._read_stream(call, resp, t0, on_chunk, on_start, delivered)
            else:
                raw = await resp.read()
                self._finish(call, parse_body(raw, resp.status, "choices", "a chat.completion"),
                             raw)
        except self._timeouts:
            raise _Failure("timeout", "timed out reading the response") from None
        except self._failures as exc:
            raise _Failure("connection_error", f"connection error: {type(exc).__name__}") \
                from None
        finally:
            if isinstance(resp, HttpResponse):
                resp.release()  # what its aclose() does, without a coroutine per call
            else:
                await resp.aclose()

    async def _read_stream(self, call: ModelCall, resp: Any, t0: float,
                           on_chunk: ChunkSink | None, on_start: Callable[[], None] | None,
                           delivered: list[bool]) -> None:
        asm = _StreamAssembler()
        done = False
        async with contextlib.aclosing(aiter_sse_data(resp.aiter_bytes())) as lines:
            async for data in lines:
                if data == b"[DONE]":
                    done = True
                    break
                try:
                    chunk = loads(data)
                except ValueError:
                    raise _Failure("bad_response", "stream chunk is not JSON",
                                   resp.status) from None
                if not isinstance(chunk, dict):
                    raise _Failure("bad_response", "stream chunk is not an object",
                                   resp.status)
                if "error" in chunk and not chunk.get("choices"):
                    err = chunk["error"]
                    msg = err.get("message") if isinstance(err, dict) else str(err)
                    raise _Failure("server_error", f"error in stream: {msg}", resp.status)
                if call.first_token_s is None:
                    call.first_token_s = time.monotonic() - t0
                asm.add(chunk)
                if on_chunk is not None:
                    if not delivered[0]:
                        delivered[0] = True
                        if on_start is not None:
                            on_start()
                    out = on_chunk(data, chunk)
                    if inspect.isawaitable(out):
                        await out
        if not done and not asm.finished:
            raise _Failure("connection_error", "stream ended before it finished",
                           resp.status)
        result = asm.result()
        self._finish(call, result, dumps_kept(result))

    @staticmethod
    def _finish(call: ModelCall, response: dict[str, Any], raw: bytes) -> None:
        # Kept as bytes, not as the parsed dict: a fifth of the memory (see ModelCall). The
        # message is made now, from the dict at hand, rather than by parsing the bytes again.
        call.response = raw
        call._message = _assistant_message(response)
        call.usage = _usage(response.get("usage"))
        choices = response.get("choices") or ()
        if choices and _is_mapping(choices[0]):
            call.finish_reason = choices[0].get("finish_reason")
        if response.get("model"):
            call.model = str(response["model"])


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
        key = (endpoint.base_url, endpoint.model, endpoint.api_key_var,
               json.dumps(endpoint.sampling, sort_keys=True, default=str),
               endpoint.timeout_s, endpoint.max_retries, endpoint.retry_max_s, endpoint.api)
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


async def aiter_sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of an SSE byte stream."""
    buf = b""
    async for piece in chunks:
        buf += piece
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl].rstrip(b"\r"), buf[nl + 1:]
            if line.startswith(b"data:"):
                yield line[5:].strip()
