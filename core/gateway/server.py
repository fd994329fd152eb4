"""The tool gateway: each trace's own tools over MCP (streamable HTTP) on 127.0.0.1.

One gateway serves a run process (started on first need, like the interception server; with
``-w`` or Ray each process has its own). A trace that has tools opens a route: a bearer token
of its own, checked on every request before anything else is read, which reaches that trace's
tools and nothing more. ``tools/list`` lists them, ``tools/call`` runs one through the trace's
binding (:class:`ToolBinding`: the run's ``SegmentContext``), which runs it as the in-process
``chat`` harness does (:func:`interplay.values.tools.run_call`) and records it on the trace: the
very same ``Tool`` values, bound to the same world and seat, so a call changes the world and its
records exactly as a call in-process does. A call whose arguments do not fit, of a tool that
does not exist, or of a tool that raises or times out is an MCP error result the program reads
(``isError``), never a protocol error.

A request without a known token gets a 401 and reaches nothing; so does a request with the
token of a trace that has closed (its episode ended), and a call still running when its trace
closes is cancelled and recorded nowhere. Nothing that controls the world (its clock,
triggers, the user's queue) is served here: the listener has the MCP endpoint (``/mcp``) and
nothing else, and that answers POST only: a stateless server has no event stream to open on a
GET and no session to end on a DELETE (405, ``Allow: POST``).

Every refusal, whoever makes it (this module, the SDK, the listener), is a JSON-RPC error
response without an id (``{"jsonrpc": "2.0", "id": null, "error": {"code", "message"}}``) with
the HTTP status: what an MCP client reads. The SDK's few plain-text refusals (a body too large,
a Host or Origin it refuses, a content type) are turned into it on their way out.

The protocol is the ``mcp`` SDK's (its low-level ``Server``, stateless, answering JSON): this
module binds tools to tokens and writes no protocol of its own. It logs tool names, ids,
counts and times, never arguments or results; a tool name and a call id the program sent are
logged and recorded bounded (:mod:`interplay._bounded`: past 256 characters, their head and
their length). It must not import the run (it reaches a trace
only through its binding).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from interplay._bounded import bounded
from interplay._plumbing import asgi
from interplay._plumbing.listener import AsgiServer
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.values.tools import CallOutcome, Tool

if TYPE_CHECKING:
    import mcp.types as mcp_types

log = get_logger("interplay.gateway")

#: The MCP server's name: a program that names its servers (codex) knows it by this.
SERVER_NAME = "interplay"
#: The one path served.
MCP_PATH = "/mcp"
#: Where a request's route travels in its ASGI scope, from the token check to the handlers.
_SCOPE_KEY = "interplay.tool_route"
_INSTALL_HINT = "pip install 'mcp>=2.3,<3'"
#: JSON-RPC's "Invalid Request": the code of every refusal of a request (the SDK's own too).
INVALID_REQUEST = -32600
#: Internal error: a request the gateway failed to answer.
INTERNAL_ERROR = -32603
_JSON = b"application/json"


def rpc_refusal(message: str, code: str | None = None, *,
                rpc_code: int = INVALID_REQUEST) -> dict[str, Any]:
    """The gateway's one refusal shape: a JSON-RPC error response without an id. ``code``
    (the listener's short name, ``request_timeout``) is left out: the message says it."""
    return {"jsonrpc": "2.0", "id": None, "error": {"code": rpc_code, "message": message}}


async def _refuse(send: asgi.Send, status: int, message: str,
                  extra: list[tuple[bytes, bytes]] | None = None, *,
                  rpc_code: int = INVALID_REQUEST) -> None:
    await asgi.send_json(send, status, rpc_refusal(message, rpc_code=rpc_code), extra)


class _Answer:
    """The ``send`` the SDK's app is handed: passes its answers on, turning a refusal it
    sends as plain text into the gateway's shape, and says whether an answer began."""

    __slots__ = ("held", "parts", "send", "started")

    def __init__(self, send: asgi.Send) -> None:
        self.send = send
        self.started = False
        self.held: dict[str, Any] | None = None
        self.parts: list[bytes] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        if self.held is None:
            if message["type"] == "http.response.start":
                self.started = True
                if message["status"] >= 400 and not _is_json(message.get("headers") or ()):
                    self.held = message
                    return
            await self.send(message)
            return
        self.parts.append(message.get("body", b""))
        if message.get("more_body"):
            return
        text = b"".join(self.parts).decode("utf-8", "replace").strip()
        headers = [(k, v) for k, v in self.held.get("headers") or ()
                   if k.lower() not in (b"content-type", b"content-length")]
        await _refuse(self.send, self.held["status"], " ".join(text.split())[:300] or
                      "refused", headers)


def _is_json(headers: Any) -> bool:
    for key, value in headers:
        if key.lower() == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == _JSON
    return False


class ToolBinding(Protocol):
    """What a route reaches of its trace: the seat's tools, and the one way to run a call of
    one and record it (``SegmentContext`` is one)."""

    @property
    def tools(self) -> Sequence[Tool]: ...

    async def call_tool(self, name: str, arguments: str | Mapping[str, Any] | None, *,
                        call_id: str) -> CallOutcome: ...


@attrs.define(eq=False)
class ToolRoute:
    """One trace's way in: its token and the URL a program is given."""

    token: str
    url: str
    binding: ToolBinding
    #: Calls run through this route.
    calls: int = 0
    #: Set by ``close_trace``: the token is refused and nothing more is recorded.
    closed: bool = False
    _inflight: set[asyncio.Task[CallOutcome]] = attrs.field(factory=set, init=False,
                                                            repr=False)


def _sdk() -> Any:
    """The mcp SDK's server pieces, imported on first need (a second's import that a run
    without out-of-process tool use never pays)."""
    try:
        import mcp.types as types
        from mcp.server.lowlevel import Server
    except ImportError as exc:
        raise InterplayError(f"the tool gateway (env tools for harness programs such as "
                             f"codex) needs the mcp package, which cannot be imported ({exc}); "
                             f"{_INSTALL_HINT}") from None
    return types, Server


#: The SDK's loggers that write a line about each request (a stateless transport ended, a Host
#: or Origin refused, a client gone before its body came, a message with malformed params).
_PER_REQUEST_LOGGERS = ("mcp.server.streamable_http", "mcp.server.transport_security",
                        "mcp.server.runner")


class _PerRequest(logging.Filter):
    """Moves the SDK's lines about one request to debug: a run makes thousands of requests,
    and a hostile client as many refusals as it likes (each is answered, with its reason, to
    the client). An error stays an error, unless it is the client going away."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and not _client_gone(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _client_gone(record: logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    return exc is not None and type(exc).__name__ == "ClientDisconnect"


def _quiet_per_request_lines() -> None:
    for name in _PER_REQUEST_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _PerRequest) for f in logger.filters):
            logger.addFilter(_PerRequest())


class ToolGateway:
    """Serves every trace's tools for one run process (see the module docstring)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 max_body_bytes: int = 8 << 20, header_timeout_s: float = 10.0,
                 body_timeout_s: float = 30.0) -> None:
        self.max_body_bytes = max_body_bytes
        self._routes: dict[str, ToolRoute] = {}
        self._server = AsgiServer(self.app, host=host, port=port, graceful_s=2.0,
                                  header_timeout_s=header_timeout_s,
                                  body_timeout_s=body_timeout_s, refusal=rpc_refusal)
        self._mcp_app: Any = None
        self._types: Any = None
        self._keeper: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The MCP endpoint every trace's program is given (with its own token)."""
        return f"{self._server.url}{MCP_PATH}"

    async def start(self) -> None:
        types, Server = _sdk()
        self._types = types
        _quiet_per_request_lines()
        server = Server(SERVER_NAME, on_list_tools=self._list_tools,
                        on_call_tool=self._call_tool)
        # Stateless, answering JSON: every request stands alone (no session to expire or to
        # be taken over, no stream kept open), and the token is checked on each.
        self._mcp_app = server.streamable_http_app(
            streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
            max_request_body_size=self.max_body_bytes, host=self._server.host)
        manager = server.session_manager
        ready = asyncio.Event()
        self._stopping = asyncio.Event()

        async def keep() -> None:
            # The SDK's session manager runs in a task group entered and left in one task.
            assert self._stopping is not None
            async with manager.run():
                ready.set()
                await self._stopping.wait()

        self._keeper = asyncio.create_task(keep())
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({self._keeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            waiter.cancel()
            self._keeper.result()  # raises what stopped it
            raise RuntimeError("the tool gateway stopped while starting")
        try:
            await self._server.start()
        except BaseException:
            await self._stop_keeper()
            raise
        log.info("gateway.started", port=self._server.port)

    async def stop(self) -> None:
        """Refuse every token, cancel the calls in flight, and stop listening."""
        for token in list(self._routes):
            self.close_trace(token)
        await self._server.stop()
        await self._stop_keeper()

    async def _stop_keeper(self) -> None:
        if self._keeper is None or self._stopping is None:
            return
        self._stopping.set()
        keeper, self._keeper = self._keeper, None
        await asyncio.gather(keeper, return_exceptions=True)

    async def __aenter__(self) -> ToolGateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- traces ----------------------------------------------------------------------------------

    def open_trace(self, binding: ToolBinding) -> ToolRoute:
        """A new trace's route to the tools of ``binding``."""
        route = ToolRoute(token=secrets.token_urlsafe(24), url=self.url, binding=binding)
        self._routes[route.token] = route
        return route

    def close_trace(self, token: str) -> None:
        """Refuse the trace's token from now on and cancel its calls in flight (they are
        recorded nowhere)."""
        route = self._routes.pop(token, None)
        if route is None:
            return
        route.closed = True
        for task in list(route._inflight):
            task.cancel()

    @property
    def open_routes(self) -> int:
        return len(self._routes)

    # -- the app ---------------------------------------------------------------------------------

    async def app(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != MCP_PATH:
            await _refuse(send, 404, f"no route {scope['path']}; the tool gateway serves MCP "
                                     f"at {MCP_PATH}")
            return
        token: str | None = None
        value = asgi.header(scope, b"authorization")
        if value is not None and value[:7].lower() == b"bearer ":
            token = value[7:].strip().decode("latin-1")
        route = self._routes.get(token) if token else None
        if route is None:
            log.info("gateway.refused", status=401, method=scope["method"],
                     reason_code="missing_token" if token is None else "unknown_token")
            await _refuse(send, 401, "missing or unknown bearer token for the tool gateway "
                                     "(the trace's own token, in Authorization: Bearer)",
                          [(b"www-authenticate", b'Bearer error="invalid_token"')])
            return
        if scope["method"] != "POST":
            # Stateless: no event stream to open (the SDK would hold a GET open, pinging, until
            # the run ends) and no session to delete.
            await _refuse(send, 405, f"the tool gateway answers POST only (stateless: no "
                                     f"event stream, no session); got {scope['method']}",
                          [(b"allow", b"POST")])
            return
        scope[_SCOPE_KEY] = route
        answer = _Answer(send)
        try:
            await self._mcp_app(scope, receive, answer)
        except Exception:
            # Never let a request take the listener down; the traceback goes to the log only.
            log.exception("gateway.internal_error", method=scope["method"])
            if not answer.started:
                await _refuse(send, 500, "internal error in the tool gateway",
                              rpc_code=INTERNAL_ERROR)

    def _route_of(self, ctx: Any) -> ToolRoute | None:
        request = getattr(ctx, "request", None)
        route = request.scope.get(_SCOPE_KEY) if request is not None else None
        return None if route is None or route.closed else route

    async def _list_tools(self, ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        types = self._types
        route = self._route_of(ctx)
        tools = [] if route is None else list(route.binding.tools)
        log.debug("gateway.list_tools", tools=len(tools))
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description,
                       input_schema=t.parameters) for t in tools])

    async def _call_tool(self, ctx: Any, params: Any) -> mcp_types.CallToolResult:
        types = self._types
        route = self._route_of(ctx)
        if route is None:
            return _result(types, "error: this trace is closed; its tools can no longer be "
                                  "called", error=True)
        meta = params.meta if isinstance(params.meta, Mapping) else {}
        # The model's own call id, as codex (callId) and Claude Code (claudecode/toolUseId)
        # pass it; other programs get one made up.
        call_id = meta.get("callId") or meta.get("claudecode/toolUseId")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"mcp_{secrets.token_hex(8)}"
        # The program chose both: what is logged and recorded of them is bounded (a name past
        # the bound names no tool, and is run as an unknown one).
        name, call_id = bounded(params.name), bounded(call_id)
        t0 = time.monotonic()
        task = asyncio.ensure_future(route.binding.call_tool(name, params.arguments,
                                                             call_id=call_id))
        route._inflight.add(task)
        try:
            await asyncio.wait({task})
        finally:
            route._inflight.discard(task)
            if not task.done():  # the request itself was cancelled
                task.cancel()
        if task.cancelled():
            log.info("gateway.call_cancelled", tool=name, call_id=call_id,
                     reason_code="trace_closed")
            return _result(types, "error: the trace closed while this call ran; it was "
                                  "cancelled", error=True)
        if (exc := task.exception()) is not None:
            # A binding that failed itself (not the tool: run_call answers for those).
            log.error("gateway.call_failed", tool=name, call_id=call_id,
                      exception_type=type(exc).__name__)
            return _result(types, "error: internal error in the tool gateway", error=True)
        outcome = task.result()
        route.calls += 1
        log.info("gateway.call", tool=name, call_id=call_id,
                 error_type=outcome.error_type, duration_s=round(time.monotonic() - t0, 4),
                 output_chars=len(outcome.output))
        return _result(types, outcome.output, error=outcome.error_type is not None)


def _result(types: Any, text: str, *, error: bool) -> mcp_types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                is_error=error)
