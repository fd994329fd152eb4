"""The interception server: the model boundary for harness programs that run as processes.

An HTTP server on 127.0.0.1 (a hand-written ASGI app on uvicorn) that serves the OpenAI
APIs, ``POST /v1/chat/completions`` and ``POST /v1/responses``, and Anthropic's Messages API,
``POST /v1/messages`` (streamed and not, each) and ``POST /v1/messages/count_tokens``, and
``GET /v1/models``. Each trace gets a secret (``Authorization: Bearer <secret>``,
``x-api-key: <secret>`` as a Messages client sends it, or a ``/t/<secret>/v1`` path); a
request without a known secret is refused and never recorded, in the error shape of the API it
spoke. Each request is forwarded through the trace's :class:`~interplay.model.ModelClient`
(Responses and Messages translated to Chat Completions and back) and recorded as one ModelCall
through the trace's ``on_call``; a ``count_tokens`` request asks the endpoint's tokenizer and
is no turn. When the endpoint serves the Responses API itself (``Endpoint.api =
"responses"``), ``/v1/responses`` requests are forwarded as they are instead
(:mod:`~interplay.interception.passthrough`). An identical request (same secret, same body
bytes) arriving while the first is still in flight is coalesced onto it: same answer, one
upstream call, one record.

An upstream call lives only as long as someone waits for it: when every program request
waiting on it has gone (the program was killed) or its trace is closed, it is cancelled and
not recorded; requests still waiting get an error. Nothing is recorded on a closed trace.
Each trace's upstream calls take their fair share of the endpoint's connections
(:mod:`interplay.model.share`): one trace's many requests never hold up another's one.

This module owns the server's life, the traces' routes, and one request's way through it:
route, coalesce, forward, record. Every refusal, the listener's own (400, 408, 431) too, is
in the shape the request's path speaks: Anthropic's on ``/v1/messages`` and below, OpenAI's
elsewhere. How a request is sent upstream and answered back is
:mod:`~interplay.interception.forward`'s; how one answer is held and replayed to every request
waiting on it is :mod:`~interplay.interception.flight`'s. It holds no user logic and logs no
bodies, message text or secrets; what it logs of a request's own names (its unknown keys, its
tools' names) is bounded (:mod:`interplay._bounded`).
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

from interplay._bounded import bounded, bounded_names
from interplay._plumbing import asgi
from interplay._plumbing.listener import AsgiServer
from interplay.errors import ErrorType, InterplayError
from interplay.interception import callers
from interplay.interception import forward as fw
from interplay.interception.flight import Flight, error_json
from interplay.interception.limits import Limits
from interplay.log import get_logger
from interplay.model import messages as ms
from interplay.model import request as rq
from interplay.model.client import ModelClient
from interplay.model.retries import Failure
from interplay.model.share import PARTY
from interplay.values.records import ModelCall

log = get_logger("interplay.interception")


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
    #: The ids the trace's next call continues from (see ``open_trace``).
    prefix: Callable[[], list[int] | None] | None = None
    calls: int = 0
    #: Set by ``close_trace``; from then on nothing is recorded through ``on_call``.
    closed: bool = False
    #: What could not be forwarded (sampling keys the Responses API cannot take, fields of a
    #: Messages request Chat Completions has no form for), already reported for this trace.
    _unforwarded: set[str] = attrs.field(factory=set, init=False, repr=False)
    _flights: set[Flight] = attrs.field(factory=set, init=False, repr=False)
    # close_trace may come from another thread than the server's loop (thread mode): the
    # closed check and the recording happen under this lock, so none slips in after closing.
    _lock: threading.RLock = attrs.field(factory=threading.RLock, init=False, repr=False)


#: The most names of what could not be forwarded one trace remembers having reported.
_UNFORWARDED_KEPT = 1000

#: The routes served (under ``/v1``, or under a ``/t/<secret>/v1`` path), by the API each is.
_APIS = {"/chat/completions": "chat.completions", "/responses": "responses",
         "/messages": "messages", "/messages/count_tokens": "messages.count_tokens",
         "/models": "models"}


def _speaks_messages(path: str) -> bool:
    """Whether a request to ``path`` (under a ``/t/<secret>`` prefix or not) is a Messages
    client's, which reads errors in Anthropic's shape (``{"type": "error", "error": {"type",
    "message"}}``): ``/v1/messages`` and every path below it, those not served included
    (``/v1/messages/batches`` is a 404 a Messages client reads)."""
    if path.startswith("/t/"):
        end = path.find("/", 3)
        path = path[end:] if end >= 0 else ""
    if path.startswith("/v1/"):
        path = path[3:]
    return path == "/messages" or path.startswith("/messages/")


def _listener_refusal(path: str, status: int, message: str, code: str | None) -> dict[str, Any]:
    """What the listener answers itself (a request it cannot parse, headers past their bound,
    a body too slow) in the shape the request's API reads, as the server's own refusals."""
    if _speaks_messages(path):
        return ms.error_body(status, message)
    return asgi.error_body(message, code=code)


async def _refuse(send: asgi.Send, anthropic: bool, status: int, message: str, *,
                  code: str | None = None, param: str | None = None) -> None:
    """An error answer in the shape the request's API reads."""
    await asgi.send_bytes(send, status, error_json(status, message, anthropic=anthropic,
                                                   code=code, param=param))


def _masked(path: str | None) -> str | None:
    """A request path fit for the log: a ``/t/<secret>`` prefix has its secret masked."""
    if path and path.startswith("/t/"):
        end = path.find("/", 3)
        return "/t/***" + (path[end:] if end >= 0 else "")
    return path


class InterceptionServer:
    """Serves the model boundary for one run (see the module docstring)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._routes: dict[str, TraceRoute] = {}
        self._flights: dict[tuple[str, str, bytes], Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: The clients of every trace opened (closed with the serving thread's loop).
        self._clients: set[ModelClient] = set()
        self._server = AsgiServer(self.app, refusal=asgi.ByPath(_listener_refusal),
                                  host=host, port=port, graceful_s=2.0,
                                  header_timeout_s=self.limits.header_timeout_s,
                                  body_timeout_s=self.limits.body_timeout_s,
                                  write_timeout_s=self.limits.unread_timeout_s)

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
                   capture: bool = False,
                   prefix: Callable[[], list[int] | None] | None = None) -> TraceRoute:
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
        the program as they came. ``prefix`` gives, at each call, the ids the trace's previous
        call read and sampled, which a capturing call sent as Chat Completions continues from
        (:meth:`ModelClient.chat_raw <interplay.model.client.ModelClient.chat_raw>`); a
        Responses upstream gets its requests as they are.
        """
        if client.endpoint.api == "responses" and client.endpoint.is_local:
            raise InterplayError("model.api = 'responses' needs a model.base_url: the embedded "
                                 "model serves Chat Completions only; set api = 'chat'")
        secret = secrets.token_urlsafe(24)
        route = TraceRoute(secret=secret, base_url=self.base_url,
                           path_base_url=f"{self._server.url}/t/{secret}/v1", client=client,
                           on_call=on_call, model=model, sampling=dict(sampling or {}),
                           capture=capture, prefix=prefix)
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
        anthropic = _speaks_messages(scope.get("path") or "")
        try:
            await self._handle(scope, receive, send, anthropic)
        except asgi.BodyTooLarge:
            log.info("interception.refused", status=413, reason_code="request_too_large")
            await _refuse(send, anthropic, 413, f"the request body exceeds "
                          f"{self.limits.max_body_mb:g} MB (interception.max_body_mb)",
                          code="request_too_large")
        except asgi.ClientGone:
            log.info("interception.client_gone", reason_code="body_incomplete")
        except Exception:
            # Never let bad input take the server down; the traceback goes to the log only.
            log.exception("interception.internal_error", path=_masked(scope.get("path")))
            try:
                await _refuse(send, anthropic, 500, "internal error in the interception server")
            except Exception:
                pass

    async def _handle(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send,
                      anthropic: bool) -> None:
        path: str = scope["path"]
        secret: str | None = None
        if path.startswith("/t/"):
            end = path.find("/", 3)
            if end < 0:
                await _refuse(send, anthropic, 404, "no such route", code="not_found")
                return
            secret, path = path[3:end], path[end:]
        length: bytes | None = None
        for k, v in scope["headers"]:
            if k == b"authorization" and secret is None:
                if v[:7].lower() == b"bearer ":
                    secret = v[7:].strip().decode("latin-1")
            elif k == b"x-api-key" and secret is None:
                # A Messages client (Claude Code, the anthropic SDK) sends its key so.
                secret = v.strip().decode("latin-1")
            elif k == b"content-length":
                length = v
        method: str = scope["method"]
        if path.startswith("/v1/"):
            path = path[3:]
        api = _APIS.get(path)
        if api is None:
            await _refuse(send, anthropic, 404, f"no route {method} {path}", code="not_found")
            return
        expected = "GET" if api == "models" else "POST"
        if method != expected:
            await _refuse(send, anthropic, 405, f"{path} takes {expected}",
                          code="method_not_allowed")
            return
        route = self._routes.get(secret) if secret else None
        if route is None:
            await _refuse(send, anthropic, 401, "missing or unknown API key for this server",
                          code="invalid_api_key")
            return
        if api == "models":
            name = route.model or route.client.endpoint.model
            await asgi.send_json(send, 200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "interplay"}]})
            return
        limit = self.limits.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            raise asgi.BodyTooLarge
        raw = await asgi.read_body(receive, limit)
        if api == "messages.count_tokens":
            await self._count_tokens(route, raw, send)
            return
        # Who sent it: the trace's program, or another process with its secret. Asked before
        # the flights are looked at: nothing may come between that and a new flight's start.
        sender = await asyncio.to_thread(callers.who, scope.get("client"), self._server.port)
        if route.closed:
            # Closed while the sender was looked up: its flights were cancelled already, and
            # a new one would go upstream with nobody to end it.
            await _refuse(send, anthropic, 410, "the trace was closed; this request was "
                          "cancelled", code="trace_closed")
            return
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
                await _refuse(send, anthropic, 400, exc.message, param=exc.param,
                              code=exc.code)
                return
            flight = self._flights[key] = Flight(key, anthropic=anthropic)
            task = asyncio.create_task(self._produce(route, api, body, upstream, flight,
                                                     sender))
            flight.task = task
            route._flights.add(flight)
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._produced, route, api, flight))
        await self._deliver(flight, receive, send)

    async def _count_tokens(self, route: TraceRoute, raw: bytes, send: asgi.Send) -> None:
        """``POST /v1/messages/count_tokens``: the request's prompt tokens, as the trace's
        endpoint counts them (:meth:`ModelClient.count_tokens`). Not a turn: nothing is
        recorded."""
        api = "messages.count_tokens"
        try:
            body = rq.parse(raw)
            rq.check(api, body)
            request = ms.count_request(body)
        except rq.BadRequest as exc:
            log.info("interception.refused", status=400, api=api, param_name=exc.param,
                     reason_code=exc.code)
            await _refuse(send, True, 400, exc.message)
            return
        request["model"] = route.model or route.client.endpoint.model
        t0 = time.monotonic()
        try:
            count = await route.client.count_tokens(request)
        except Failure as f:
            status = 404 if f.error_type == ErrorType.NOT_SUPPORTED else \
                f.status if f.status and f.status >= 400 else \
                fw.ERROR_STATUS.get(f.error_type, 502)
            log.info("interception.count_failed", api=api, status=status,
                     error_type=f.error_type)
            await _refuse(send, True, status, f"cannot count tokens: {f.message}")
            return
        log.info("interception.counted", api=api, input_tokens=count,
                 latency_s=round(time.monotonic() - t0, 4))
        await asgi.send_json(send, 200, {"input_tokens": count})

    async def _deliver(self, flight: Flight, receive: asgi.Receive, send: asgi.Send) -> None:
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

    def _leave(self, flight: Flight) -> None:
        flight.waiters -= 1
        if flight.waiters > 0 or flight.done or flight.task is None:
            return
        # Nobody waits for this answer any more (the program was killed): stop asking for it,
        # and let an identical request arriving now start afresh rather than join a dying call.
        flight.cancel_reason = flight.cancel_reason or "client_disconnected"
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        flight.task.cancel()

    @staticmethod
    def _upstream_body(route: TraceRoute, api: str,
                       body: dict[str, Any]) -> dict[str, Any]:
        upstream, dropped = fw.upstream_body(api, body, route.client.endpoint,
                                             model=route.model, sampling=route.sampling)
        # The names are the program's (a request's own keys, its tools' names): bounded, and
        # only so many remembered (past them, a name is said again when it comes again).
        new = {bounded(name) for name in dropped} - route._unforwarded
        if new:
            names = sorted(new)
            route._unforwarded.update(names[:max(0, _UNFORWARDED_KEPT - len(route._unforwarded))])
            if api == "messages":
                # Expected of every Messages client (Claude Code sends thinking, metadata,
                # context_management): said once per trace, by name, as the rules drop them.
                log.info("interception.fields_not_forwarded", api=api,
                         param_names=bounded_names(names), params=len(names),
                         reason_code="not_in_chat_completions")
            else:
                log.warning("interception.sampling_not_forwarded",
                            param_names=bounded_names(names), params=len(names),
                            reason_code="not_in_responses_api")
        return upstream

    async def _produce(self, route: TraceRoute, api: str, body: dict[str, Any],
                       upstream: dict[str, Any], flight: Flight,
                       sender: str | None = None) -> None:
        t0 = time.monotonic()
        stream = bool(upstream.get("stream"))
        failure: Exception | None = None
        # This task's calls are the trace's: its share of the endpoint's connections.
        PARTY.set(id(route))  # by id: a copied context must not keep the route alive
        try:
            prefix = route.prefix() if route.capture and route.prefix is not None else None
            call = await fw.forward(route.client, api, body, upstream, flight,
                                    capture=route.capture, prefix=prefix)
        except asyncio.CancelledError:
            # Nobody waits for the answer any more, or the trace was closed: the program never
            # got an answer, so there is no turn to record.
            self._cancelled(flight, api, time.monotonic() - t0)
            return
        except Exception as exc:
            # The program's answer ends first (a stream begun ends with its error event), then
            # the turn is recorded, then logged: nothing after can leave either undone.
            failure = exc
            flight.fail(500, "internal error while forwarding", "server_error")
            call = ModelCall(id=f"mc_{secrets.token_hex(10)}", api=api,
                             started_at=time.time() - (time.monotonic() - t0),
                             latency_s=time.monotonic() - t0,
                             error=f"{type(exc).__name__} in the interception server",
                             error_type=ErrorType.SERVER_ERROR)
        finally:
            self._land(route, flight)
        # One request is one recorded turn: the request as the program sent it (the answer as
        # the program got it is the call's response: the forwarders see to that).
        call.api, call.request, call.streamed = api, body, stream
        call.caller = sender
        self._record(route, call)
        if failure is not None:
            log.error("interception.forward_failed", api=api, call_id=call.id, exc_info=failure)

    def _land(self, route: TraceRoute, flight: Flight) -> None:
        flight.finish()
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        route._flights.discard(flight)

    def _produced(self, route: TraceRoute, api: str, flight: Flight,
                  task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # Retrieved here, so that it is logged through the guard rather than by asyncio
            # with the task's repr (which holds the request).
            log.error("interception.producer_failed", api=api, error_type=ErrorType.SERVER_ERROR,
                      exception_type=type(exc).__name__)
        if not flight.done:  # cancelled before it began, or failed: never leave it open
            if task.cancelled():
                self._cancelled(flight, api, 0.0)
            else:
                flight.fail(500, "internal error while forwarding", "server_error")
            self._land(route, flight)

    def _cancelled(self, flight: Flight, api: str, elapsed_s: float) -> None:
        reason = flight.cancel_reason or "server_stopping"
        log.info("interception.cancelled", api=api, reason_code=reason, waiters=flight.waiters,
                 elapsed_s=round(elapsed_s, 4))
        message = {"trace_closed": "the trace was closed; this request was cancelled",
                   "client_disconnected": "the request was cancelled"}.get(
            reason, "the interception server is stopping")
        flight.fail(410 if reason == "trace_closed" else 503, message, reason)

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
                     streamed=record.streamed, status=record.status, caller=record.caller,
                     error_type=record.error_type, latency_s=round(record.latency_s, 4))
            try:
                route.on_call(record)
            except Exception:
                log.exception("interception.on_call_failed", call_id=record.id)
