"""The interception server: the model boundary for harness programs that run as processes.

An OpenAI-compatible HTTP server on 127.0.0.1 (a hand-written ASGI app on uvicorn) that serves
``POST /v1/chat/completions`` and ``POST /v1/responses`` (streamed and not) and
``GET /v1/models``. Each trace gets a secret (``Authorization: Bearer <secret>`` or a
``/t/<secret>/v1`` path); a request without a known secret is refused and never recorded.
Each request is forwarded through the trace's :class:`~interplay.model.ModelClient` (Responses
translated to Chat Completions and back) and recorded as one ModelCall through the trace's
``on_call``. When the endpoint serves the Responses API itself (``Endpoint.api =
"responses"``), ``/v1/responses`` requests are forwarded as they are instead
(:mod:`~interplay.interception.passthrough`). An identical request (same secret, same body
bytes) arriving while the first is still in flight is coalesced onto it: same answer, one
upstream call, one record.

An upstream call lives only as long as someone waits for it: when every program request
waiting on it has gone (the program was killed) or its trace is closed, it is cancelled and
not recorded; requests still waiting get an error. Nothing is recorded on a closed trace.

It holds no user logic and logs no bodies, message text or secrets. It runs past 400 lines
because one request's way through it (route, coalesce, forward in one of three forms, record)
is one story, read in one place.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from interplay import _asgi as asgi
from interplay import _codec
from interplay.errors import InterplayError
from interplay.interception import passthrough
from interplay.interception.limits import Limits
from interplay.log import get_logger
from interplay.model import request as rq
from interplay.model import responses as rs
from interplay.model.client import ModelClient
from interplay.records import ModelCall

log = get_logger("interplay.interception")

_ERROR_STATUS = {"timeout": 504, "connection_error": 502, "bad_response": 502}


@attrs.define(eq=False)
class TraceRoute:
    """One trace's way in: its secret and the URLs a program is given."""

    secret: str
    base_url: str
    path_base_url: str
    client: ModelClient
    on_call: Callable[[ModelCall], None]
    model: str | None = None
    #: The seat's sampling, applied over what the program sends (see ``open_trace``).
    sampling: dict[str, Any] = attrs.Factory(dict)
    #: Ask the upstream for each call's token ids and logprobs (see ``open_trace``).
    capture: bool = False
    calls: int = 0
    #: Set by ``close_trace``; from then on nothing is recorded through ``on_call``.
    closed: bool = False
    #: Sampling keys the Responses API cannot take, already reported for this trace.
    _unforwarded: set[str] = attrs.field(factory=set, init=False, repr=False)
    _flights: set[_Flight] = attrs.field(factory=set, init=False, repr=False)
    # close_trace may come from another thread than the server's loop (thread mode): the
    # closed check and the recording happen under this lock, so none slips in after closing.
    _lock: threading.RLock = attrs.field(factory=threading.RLock, init=False, repr=False)


class _Flight:
    """One upstream call and the bytes it answered, replayable to every coalesced request."""

    __slots__ = ("abort", "cancel_reason", "chunks", "done", "headers", "key", "status",
                 "task", "waiters", "wake")

    def __init__(self, key: tuple[str, str, bytes]) -> None:
        self.key = key
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

    def finish(self) -> None:
        self.done = True
        self._notify()

    async def replay(self, send: asgi.Send) -> None:
        while not self.status:
            if self.done:  # ended without an answer: never leave the program waiting
                await asgi.send_error(send, 502, "the upstream call ended without an answer",
                                      type_="server_error", code="bad_response")
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


# Keys that shape a request rather than how the model samples: never taken from sampling.
_NOT_SAMPLING = frozenset({"model", "messages", "input", "instructions", "tools", "stream",
                           "stream_options", "previous_response_id"})
_CHAT_TOKEN_LIMITS = ("max_tokens", "max_completion_tokens")


def _sampled(body: Mapping[str, Any], under: Mapping[str, Any], over: Mapping[str, Any],
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


def _chat_stream_error(message: str, code: str) -> bytes:
    return b"data: " + _codec.dumps(asgi.error_body(message, type_="server_error",
                                                    code=code)) + b"\n\n"


def _masked(path: str | None) -> str | None:
    """A request path fit for the log: a ``/t/<secret>`` prefix has its secret masked."""
    if path and path.startswith("/t/"):
        end = path.find("/", 3)
        return "/t/***" + (path[end:] if end >= 0 else "")
    return path


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


def _error_json(call: ModelCall) -> tuple[int, bytes]:
    status = call.status if call.status and call.status >= 400 else \
        _ERROR_STATUS.get(call.error_type or "", 502)
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = _codec.dumps(asgi.error_body(call.error or "upstream model call failed", type_=kind,
                                        code=call.error_type))
    return status, body


class InterceptionServer:
    """Serves the model boundary for one run (see the module docstring)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._routes: dict[str, TraceRoute] = {}
        self._flights: dict[tuple[str, str, bytes], _Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: The clients of every trace opened (closed with the serving thread's loop).
        self._clients: set[ModelClient] = set()
        self._server = asgi.AsgiServer(self.app, host=host, port=port, graceful_s=2.0,
                                       header_timeout_s=self.limits.header_timeout_s,
                                       body_timeout_s=self.limits.body_timeout_s)

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        return self._server.url

    @property
    def base_url(self) -> str:
        return f"{self._server.url}/v1"

    async def start(self) -> None:
        await self._server.start()
        log.info("interception.started", port=self._server.port)

    async def stop(self) -> None:
        await self._shutdown()
        await self._server.stop()

    async def _shutdown(self, *, close_clients: bool = False) -> None:
        """End the upstream calls in flight (their programs get a 503 ``server_stopping``
        while the server still serves them), in the serving loop; with ``close_clients``,
        close the connections the traces' clients hold in that loop too."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if close_clients:
            clients, self._clients = self._clients, set()
            for client in clients:
                await client.aclose()

    @property
    def inflight(self) -> int:
        """Upstream calls in flight now (coalesced requests share one)."""
        return len(self._tasks)

    @property
    def waiting(self) -> int:
        """Program requests waiting for an upstream answer now."""
        return sum(f.waiters for f in list(self._flights.values()))

    async def __aenter__(self) -> InterceptionServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start_in_thread(self) -> None:
        """For sync callers: serve from a background thread with its own event loop. The
        ModelClients of its traces are then used from that loop only, and their connections
        are closed with it (a client reopens in the next loop that uses it)."""
        self._server.start_in_thread()

    def stop_thread(self) -> None:
        if self._server.run_in_thread(self._shutdown(close_clients=True)) is False:
            log.warning("interception.shutdown_timed_out")
        self._server.stop_thread()

    def __enter__(self) -> InterceptionServer:
        self.start_in_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_thread()

    # -- traces ----------------------------------------------------------------------------------

    def open_trace(self, *, client: ModelClient, on_call: Callable[[ModelCall], None],
                   model: str | None = None, sampling: Mapping[str, Any] | None = None,
                   capture: bool = False) -> TraceRoute:
        """A new trace's route: its requests go upstream through ``client`` (as ``model``, or
        the endpoint's model) and each is recorded through ``on_call``.

        Sampling, from weakest to strongest: the endpoint's ``sampling``, then what the
        program sends, then ``sampling`` (the seat's). The seat's values win over the
        program's: the researcher who configured the seat decides its temperature, top_p,
        max_tokens or seed, not the program under test. A seat's token limit replaces the
        program's under either name (``max_tokens``, ``max_completion_tokens``).

        ``capture`` asks the upstream for each call's token ids and logprobs and records them
        on the call's ``tokens`` (:mod:`interplay.model.tokens`); the program gets its answer
        without what it did not ask for, except from a Responses upstream, whose bytes reach
        the program as they came.
        """
        if client.endpoint.api == "responses" and client.endpoint.is_local:
            raise InterplayError("model.api = 'responses' needs a model.base_url: the embedded "
                                 "model serves Chat Completions only; set api = 'chat'")
        secret = secrets.token_urlsafe(24)
        route = TraceRoute(secret=secret, base_url=self.base_url,
                           path_base_url=f"{self._server.url}/t/{secret}/v1", client=client,
                           on_call=on_call, model=model, sampling=dict(sampling or {}),
                           capture=capture)
        self._routes[secret] = route
        self._clients.add(client)
        return route

    def close_trace(self, secret: str) -> None:
        """Refuse the trace's secret from now on, record nothing more on it, and cancel its
        upstream calls still in flight (their waiting requests get a 410 ``trace_closed``).
        Safe to call from another thread than the server's (thread mode)."""
        route = self._routes.pop(secret, None)
        if route is None:
            return
        with route._lock:
            route.closed = True
        self._server.call_soon(lambda: self._cancel_flights(route))

    def _cancel_flights(self, route: TraceRoute) -> None:
        for flight in list(route._flights):
            if not flight.done and flight.task is not None:
                flight.cancel_reason = flight.cancel_reason or "trace_closed"
                if self._flights.get(flight.key) is flight:
                    del self._flights[flight.key]
                flight.task.cancel()

    # -- the app ---------------------------------------------------------------------------------

    async def app(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        if scope["type"] != "http":
            return
        try:
            await self._handle(scope, receive, send)
        except asgi.BodyTooLarge:
            log.info("interception.refused", status=413, reason_code="request_too_large")
            await asgi.send_error(
                send, 413, f"the request body exceeds {self.limits.max_body_mb:g} MB "
                "(interception.max_body_mb)", code="request_too_large")
        except asgi.ClientGone:
            log.info("interception.client_gone", reason_code="body_incomplete")
        except Exception:
            # Never let bad input take the server down; the traceback goes to the log only.
            log.exception("interception.internal_error", path=_masked(scope.get("path")))
            try:
                await asgi.send_error(send, 500, "internal error in the interception server",
                                      type_="server_error")
            except Exception:
                pass

    async def _handle(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        path: str = scope["path"]
        secret: str | None = None
        if path.startswith("/t/"):
            end = path.find("/", 3)
            if end < 0:
                await asgi.send_error(send, 404, "no such route", code="not_found")
                return
            secret, path = path[3:end], path[end:]
        length: bytes | None = None
        for k, v in scope["headers"]:
            if k == b"authorization" and secret is None:
                if v[:7].lower() == b"bearer ":
                    secret = v[7:].strip().decode("latin-1")
            elif k == b"content-length":
                length = v
        method: str = scope["method"]
        if path.startswith("/v1/"):
            path = path[3:]
        if path not in ("/chat/completions", "/responses", "/models"):
            await asgi.send_error(send, 404, f"no route {method} {path}", code="not_found")
            return
        expected = "GET" if path == "/models" else "POST"
        if method != expected:
            await asgi.send_error(send, 405, f"{path} takes {expected}",
                                  code="method_not_allowed")
            return
        route = self._routes.get(secret) if secret else None
        if route is None:
            await asgi.send_error(send, 401, "missing or unknown API key for this server",
                                  code="invalid_api_key")
            return
        if path == "/models":
            name = route.model or route.client.endpoint.model
            await asgi.send_json(send, 200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "interplay"}]})
            return
        limit = self.limits.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            raise asgi.BodyTooLarge
        raw = await asgi.read_body(receive, limit)
        api = "responses" if path == "/responses" else "chat.completions"
        key = (route.secret, api, raw)
        flight = self._flights.get(key)
        if flight is not None:
            log.info("interception.coalesced", api=api)
        else:
            try:
                body = rq.parse(raw)
                rq.check(api, body, translated=route.client.endpoint.api != "responses")
                upstream = self._upstream_body(route, api, body)
            except rq.BadRequest as exc:
                log.info("interception.refused", status=400, api=api, param_name=exc.param,
                         reason_code=exc.code)
                await asgi.send_error(send, 400, exc.message, param=exc.param, code=exc.code)
                return
            flight = self._flights[key] = _Flight(key)
            task = asyncio.create_task(self._produce(route, api, body, upstream, flight))
            flight.task = task
            route._flights.add(flight)
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._produced, route, api, flight))
        await self._deliver(flight, receive, send)

    async def _deliver(self, flight: _Flight, receive: asgi.Receive, send: asgi.Send) -> None:
        """Replay the flight to this request while watching for the program to go away."""
        flight.waiters += 1
        left = False

        async def watch() -> None:
            nonlocal left
            try:
                while (await receive())["type"] != "http.disconnect":
                    pass
            except Exception:  # a broken connection is a gone client too
                pass
            left = True
            self._leave(flight)

        watcher = asyncio.create_task(watch())
        try:
            await flight.replay(send)
        finally:
            if not left:
                watcher.cancel()
                self._leave(flight)

    def _leave(self, flight: _Flight) -> None:
        flight.waiters -= 1
        if flight.waiters > 0 or flight.done or flight.task is None:
            return
        # Nobody waits for this answer any more (the program was killed): stop asking for it,
        # and let an identical request arriving now start afresh rather than join a dying call.
        flight.cancel_reason = flight.cancel_reason or "client_disconnected"
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        flight.task.cancel()

    def _upstream_body(self, route: TraceRoute, api: str,
                       body: dict[str, Any]) -> dict[str, Any]:
        endpoint = route.client.endpoint
        if api == "responses" and endpoint.api == "responses":
            under, dropped = rs.sampling_for_responses(endpoint.sampling)
            over, dropped_seat = rs.sampling_for_responses(route.sampling)
            new = set(dropped + dropped_seat) - route._unforwarded
            if new:
                route._unforwarded |= new
                log.warning("interception.sampling_not_forwarded", param_names=sorted(new),
                            reason_code="not_in_responses_api")
            upstream = _sampled(body, under, over, limits=("max_output_tokens",))
            upstream["model"] = route.model or endpoint.model
            return upstream
        if api == "responses":
            upstream = rs.responses_to_chat(body)
        else:
            upstream = dict(body)
            if upstream.get("stream"):
                upstream["stream_options"] = dict(upstream.get("stream_options") or {},
                                                  include_usage=True)
        upstream = _sampled(upstream, route.client.endpoint.sampling, route.sampling)
        upstream["model"] = route.model or route.client.endpoint.model
        return upstream

    async def _produce(self, route: TraceRoute, api: str, body: dict[str, Any],
                       upstream: dict[str, Any], flight: _Flight) -> None:
        t0 = time.monotonic()
        stream = bool(upstream.get("stream"))
        failure: Exception | None = None
        try:
            if api == "chat.completions":
                call = await self._forward_chat(route, body, upstream, flight, stream)
            elif route.client.endpoint.api == "responses":
                call = await self._forward_responses(route, upstream, flight, stream)
            else:
                call = await self._forward_translated(route, body, upstream, flight, stream)
        except asyncio.CancelledError:
            # Nobody waits for the answer any more, or the trace was closed: the program never
            # got an answer, so there is no turn to record.
            self._cancelled(flight, api, time.monotonic() - t0)
            return
        except Exception as exc:
            # The program's answer ends first (a stream begun ends with its error event), then
            # the turn is recorded, then logged: nothing after can leave either undone.
            failure = exc
            self._fail(flight, 500, "internal error while forwarding", "server_error")
            call = ModelCall(id=f"mc_{secrets.token_hex(10)}", api=api,
                             started_at=time.time() - (time.monotonic() - t0),
                             latency_s=time.monotonic() - t0,
                             error=f"{type(exc).__name__} in the interception server",
                             error_type="server_error")
        finally:
            self._land(route, flight)
        # One request is one recorded turn: the request as the program sent it (the answer as
        # the program got it is the call's response: the forwarders see to that).
        call.api, call.request, call.streamed = api, body, stream
        self._record(route, call)
        if failure is not None:
            log.error("interception.forward_failed", api=api, call_id=call.id, exc_info=failure)

    def _land(self, route: TraceRoute, flight: _Flight) -> None:
        flight.finish()
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        route._flights.discard(flight)

    def _produced(self, route: TraceRoute, api: str, flight: _Flight,
                  task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # Retrieved here, so that it is logged through the guard rather than by asyncio
            # with the task's repr (which holds the request).
            log.error("interception.producer_failed", api=api, error_type="server_error",
                      exception_type=type(exc).__name__)
        if not flight.done:  # cancelled before it began, or failed: never leave it open
            if task.cancelled():
                self._cancelled(flight, api, 0.0)
            else:
                self._fail(flight, 500, "internal error while forwarding", "server_error")
            self._land(route, flight)

    def _cancelled(self, flight: _Flight, api: str, elapsed_s: float) -> None:
        reason = flight.cancel_reason or "server_stopping"
        log.info("interception.cancelled", api=api, reason_code=reason, waiters=flight.waiters,
                 elapsed_s=round(elapsed_s, 4))
        message = {"trace_closed": "the trace was closed; this request was cancelled",
                   "client_disconnected": "the request was cancelled"}.get(
            reason, "the interception server is stopping")
        self._fail(flight, 410 if reason == "trace_closed" else 503, message, reason)

    def _record(self, route: TraceRoute, record: ModelCall) -> None:
        with route._lock:
            if route.closed:
                # The answer came after close_trace (its cancellation arrived too late):
                # the trace is finished and stays as it was closed.
                log.info("interception.late_call_dropped", api=record.api, call_id=record.id,
                         error_type=record.error_type)
                return
            route.calls += 1
            log.info("interception.call", api=record.api, call_id=record.id,
                     streamed=record.streamed, status=record.status,
                     error_type=record.error_type, latency_s=round(record.latency_s, 4))
            try:
                route.on_call(record)
            except Exception:
                log.exception("interception.on_call_failed", call_id=record.id)

    @staticmethod
    def _fail(flight: _Flight, status: int, message: str, code: str) -> None:
        """End the flight's answer with an error, in whatever form it has taken so far."""
        if not flight.status:
            flight.answer(status, _codec.dumps(asgi.error_body(
                message, type_="invalid_request_error" if status < 500 else "server_error",
                code=code)))
        elif flight.abort is not None:
            flight.push(flight.abort(message, code))

    async def _forward_chat(self, route: TraceRoute, body: dict[str, Any],
                            upstream: dict[str, Any], flight: _Flight,
                            stream: bool) -> ModelCall:
        opts = body.get("stream_options")
        want_usage = bool(opts.get("include_usage")) if isinstance(opts, dict) else False

        def on_start() -> None:
            flight.start(200, asgi.SSE_HEADERS)
            flight.abort = _chat_stream_error

        def on_chunk(data: bytes, chunk: dict[str, Any]) -> None:
            if not want_usage and not chunk.get("choices") and chunk.get("usage"):
                return  # asked for by us, for the record; the program did not ask
            flight.push(b"data: " + data + b"\n\n")

        call = await route.client.chat_raw(upstream, on_chunk=on_chunk if stream else None,
                                           on_start=on_start, capture=route.capture)
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
                                           call.error_type or "server_error"))
        else:
            flight.answer(*_error_json(call))
        return call

    async def _forward_responses(self, route: TraceRoute, upstream: dict[str, Any],
                                 flight: _Flight, stream: bool) -> ModelCall:
        """A Responses request forwarded as it is to an upstream that serves Responses."""
        forward = passthrough.Forward(route.client, upstream, capture=route.capture)

        def on_start(status: int, headers: list[tuple[bytes, bytes]]) -> None:
            flight.start(status, headers)
            if stream and status < 400:
                flight.abort = forward.failed_event

        return await forward.run(on_start, flight.push)

    async def _forward_translated(self, route: TraceRoute, body: dict[str, Any],
                                  upstream: dict[str, Any], flight: _Flight,
                                  stream: bool) -> ModelCall:
        """A Responses request sent upstream as Chat Completions, answered as Responses (and
        recorded as the Responses object the program got)."""
        streamer = rs.ChatToResponsesStream(body, upstream["model"])

        def on_start() -> None:
            flight.start(200, asgi.SSE_HEADERS)
            flight.abort = streamer.events.failed
            for ev in streamer.start():
                flight.push(ev)

        def on_chunk(data: bytes, chunk: dict[str, Any]) -> None:
            for ev in streamer.chunk(chunk):
                flight.push(ev)

        call = await route.client.chat_raw(upstream, on_chunk=on_chunk if stream else None,
                                           on_start=on_start, capture=route.capture)
        if call.error_type is None and call.response is not None:
            completion = call.parsed_response()
            if stream:
                if not flight.status:
                    on_start()
                events, response = streamer.finish(completion)
                for ev in events:
                    flight.push(ev)
                call.response = _codec.dumps_kept(response)
            else:
                call.response = _codec.dumps_kept(rs.chat_to_response(completion, body))
                flight.answer(200, call.response)
        elif flight.status:
            flight.push(streamer.events.failed(call.error or "upstream failed",
                                               call.error_type or "server_error"))
        else:
            flight.answer(*_error_json(call))
        return call
