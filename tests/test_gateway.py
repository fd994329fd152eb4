"""The tool gateway over real HTTP with the `mcp` client: each trace's own tools listed and
called through its own token, error results the model reads (the chat harness's very texts),
records on the right trace only, refusals for a missing, unknown or closed token, nothing
but MCP on the listener, and no tool argument or result in the log."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from interplay import Env, SeatSpec, Task, Tool, tool
from interplay.builtin_harnesses.chat import NullHarness
from interplay.config.endpoint import Endpoint
from interplay.gateway import ToolGateway, ToolRoute
from interplay.model.client import Models
from interplay.run import Agent
from interplay.run.episode import LiveEpisodeContext, RunResources
from interplay.testing import captured_log
from interplay.values import EpisodeInfo

SECRET_ARG = "ARGUMENT-SENTINEL-5e1d"
SECRET_RESULT = "RESULT-SENTINEL-93ab"


def shop_tools(log: list[str]) -> list[Tool]:
    @tool
    def find_order(order_id: str) -> str:
        """Look an order up."""
        log.append(order_id)
        return json.dumps({"order_id": order_id, "status": "pending",
                           "note": SECRET_RESULT})

    @tool
    async def fails(reason: str) -> str:
        """Always fails."""
        raise ValueError(f"no: {reason}")

    async def slow() -> str:
        await asyncio.sleep(30)
        return "late"

    return [find_order, fails, Tool("slow", "Takes too long.", {"type": "object",
                                                                  "properties": {}}, slow,
                                    timeout_s=0.2)]


def desk_tools() -> list[Tool]:
    @tool
    def book_desk(day: str) -> str:
        """Book a desk."""
        return f"desk booked for {day}"

    return [book_desk]


@asynccontextmanager
async def mcp_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (httpx2.AsyncClient(headers=headers) as http,
                streamable_http_client(url, http_client=http) as (read, write, *_),
                ClientSession(read, write) as session):
        await session.initialize()
        yield session


class TwoSeats(Env):
    """Two seats of one episode, each with tools of its own."""

    name = "two-seats"
    seats: ClassVar[dict[str, SeatSpec]] = {"shop": SeatSpec(harness="null"),
                                            "desk": SeatSpec(harness="null")}

    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def tools(self, seat: str, ctx: LiveEpisodeContext) -> list[Tool]:
        return shop_tools(self.calls) if seat == "shop" else desk_tools()


class Seats:
    """The two agents of one episode (two traces), sharing the run's gateway."""

    def __init__(self) -> None:
        # No model is called: the gateway serves tools, not turns.
        self.resources = RunResources(endpoint=Endpoint(base_url="http://127.0.0.1:9/v1",
                                                        model="none"))
        self.calls: list[str] = []
        env = TwoSeats(self.calls)
        self.episode = LiveEpisodeContext(env=env, task=Task(idx=0, prompt="hi"),
                                      info=EpisodeInfo(episode_id="e1", env=env.name,
                                                       task_idx=0),
                                      resources=self.resources)
        self.shop = self.episode.agent("shop").chat(Task(idx=0, prompt="hi"))
        self.desk = self.episode.agent("desk").chat(Task(idx=0, prompt="hi"))

    async def aclose(self) -> None:
        await self.shop.close()
        await self.desk.close()
        await self.resources.aclose()


@pytest.fixture
async def seats() -> AsyncIterator[Seats]:
    s = Seats()
    try:
        yield s
    finally:
        await s.aclose()


async def routes(seats: Seats) -> tuple[ToolRoute, ToolRoute]:
    shop, desk = await seats.shop.ctx.tool_route(), await seats.desk.ctx.tool_route()
    assert shop is not None and desk is not None
    return shop, desk


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


async def test_each_token_lists_and_calls_only_its_own_traces_tools(seats: Seats) -> None:
    shop, desk = await routes(seats)
    assert shop.url == desk.url and shop.token != desk.token
    assert shop.url.startswith("http://127.0.0.1:") and shop.url.endswith("/mcp")
    async with mcp_session(shop.url, shop.token) as s:
        listed = (await s.list_tools()).tools
        assert [t.name for t in listed] == ["find_order", "fails", "slow"]
        assert listed[0].description == "Look an order up."
        assert listed[0].input_schema["required"] == ["order_id"]
        result = await s.call_tool("find_order", {"order_id": "1042"},
                                   meta={"callId": "call_from_model"})
        assert not result.is_error
        assert json.loads(text(result))["status"] == "pending"
        # The other trace's tool is not there for this token.
        other = await s.call_tool("book_desk", {"day": "mon"})
        assert other.is_error
        assert text(other) == ("error: there is no tool named 'book_desk'; available tools: "
                               "fails, find_order, slow")
    async with mcp_session(desk.url, desk.token) as s:
        assert [t.name for t in (await s.list_tools()).tools] == ["book_desk"]
        assert text(await s.call_tool("book_desk", {"day": "mon"})) == "desk booked for mon"
        missing = await s.call_tool("find_order", {"order_id": "1"})
        assert missing.is_error

    assert seats.calls == ["1042"]
    shop_runs = seats.shop.trace.tool_runs
    assert [(r.call_id, r.name, r.error_type) for r in shop_runs] == [
        ("call_from_model", "find_order", None), (shop_runs[1].call_id, "book_desk",
                                                  "unknown_tool")]
    assert shop_runs[1].call_id.startswith("mcp_")  # a client that sends no call id
    assert [(r.name, r.error_type) for r in seats.desk.trace.tool_runs] == [
        ("book_desk", None), ("find_order", "unknown_tool")]


async def test_bad_calls_are_error_results_with_the_chat_harness_texts(seats: Seats) -> None:
    shop, _ = await routes(seats)
    calls: list[tuple[str, Any]] = [
        ("find_order", {}), ("find_order", {"order_id": "1", "extra": True}),
        ("fails", {"reason": "because"}), ("slow", {}), ("nope", {"x": 1}),
        ("find_order", {"order_id": 1042})]
    async with mcp_session(shop.url, shop.token) as s:
        results = [await s.call_tool(name, args) for name, args in calls]
        # The session goes on after every one of them.
        assert not (await s.call_tool("find_order", {"order_id": "7"})).is_error
    assert all(r.is_error for r in results)
    # What the in-process chat harness's loop gives the model for the same calls.
    in_process = [await seats.shop.ctx.call_tool(name, json.dumps(args), call_id=f"c{i}")
                  for i, (name, args) in enumerate(calls)]
    assert [text(r) for r in results] == [o.output for o in in_process]
    assert text(results[0]) == ("error: 'order_id' is a required property; call it "
                                "again with the tool's parameters")
    assert text(results[2]) == "error: ValueError: no: because"
    assert text(results[3]) == "error: the tool did not finish within 0.2 s"
    # Checked against the tool's schema before the tool runs, naming the field.
    assert text(results[5]) == ("error: argument 'order_id': 1042 is not of type 'string'; "
                                "call it again with the tool's parameters")
    kinds = [r.error_type for r in seats.shop.trace.tool_runs]
    assert kinds[:7] == ["bad_arguments", "bad_arguments", "tool_error", "timeout",
                         "unknown_tool", "bad_arguments", None]
    assert kinds[7:] == kinds[:6]
    assert seats.calls == ["7"]  # only the call that fit reached the tool


async def test_no_token_an_unknown_one_and_a_closed_trace_are_refused(seats: Seats) -> None:
    shop, desk = await routes(seats)
    init = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "find_order", "arguments": {"order_id": "1"}}}
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}
    async with httpx2.AsyncClient() as http:
        for auth in (None, "Bearer not-a-token", f"Basic {shop.token}",
                     f"Bearer {shop.token}x"):
            extra = {} if auth is None else {"Authorization": auth}
            answer = await http.post(shop.url, json=init, headers={**headers, **extra})
            assert answer.status_code == 401, auth
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert "bearer token" in answer.json()["error"]["message"]
        # The token works until its trace closes (its episode ended), then never again.
        ok = await http.post(shop.url, json=init,
                             headers={**headers, "Authorization": f"Bearer {shop.token}"})
        assert ok.status_code == 200 and ok.json()["result"]["isError"] is False
        await seats.shop.close()
        closed = await http.post(shop.url, json=init,
                                 headers={**headers, "Authorization": f"Bearer {shop.token}"})
        assert closed.status_code == 401
        # Another trace's token still reaches that trace's tools only.
        still = await http.post(desk.url, json=init,
                                headers={**headers, "Authorization": f"Bearer {desk.token}"})
        assert still.json()["result"]["isError"] is True
    assert seats.calls == ["1"]
    assert len(seats.shop.trace.tool_runs) == 1  # the refused requests are recorded nowhere
    assert [r.error_type for r in seats.desk.trace.tool_runs] == ["unknown_tool"]


async def test_a_call_running_when_its_trace_closes_is_cancelled_unrecorded() -> None:
    started = asyncio.Event()
    finished: list[str] = []

    async def wait_for_it() -> str:
        started.set()
        await asyncio.sleep(20)
        finished.append("ran")
        return "done"

    # A standalone agent (no episode) has a gateway of its own, stopped by aclose().
    agent = Agent(name="a", harness=NullHarness(),
                  client=Models().client(Endpoint(base_url="http://127.0.0.1:9/v1", model="x")),
                  tools=[Tool("wait_for_it", "Waits.", {"type": "object", "properties": {}},
                              wait_for_it)])
    session = agent.chat(Task(idx=0, prompt="hi"))
    try:
        route = await session.ctx.tool_route()
        assert route is not None
        async with mcp_session(route.url, route.token) as s:
            call = asyncio.create_task(s.call_tool("wait_for_it", {}))
            await started.wait()
            await session.close()
            result = await asyncio.wait_for(call, 10)
        assert result.is_error and "cancelled" in text(result)
        assert finished == [] and session.trace.tool_runs == []
    finally:
        await session.close()
        await agent.aclose()
        await agent.client.aclose()


async def test_only_mcp_is_served_and_the_listener_stops_with_the_run(seats: Seats) -> None:
    shop, _ = await routes(seats)
    root = shop.url.removesuffix("/mcp")
    auth = {"Authorization": f"Bearer {shop.token}"}
    async with httpx2.AsyncClient(headers=auth) as http:
        for path in ("/", "/v1/responses", "/v1/chat/completions", "/clock", "/mcp/tools",
                     "/t/x/mcp"):
            answer = await http.post(root + path, json={})
            assert answer.status_code == 404, path
    await seats.resources.aclose()
    async with httpx2.AsyncClient() as http:
        with pytest.raises(httpx2.ConnectError):
            await http.post(shop.url, json={})


async def test_no_tool_argument_or_result_reaches_the_log(seats: Seats) -> None:
    shop, _ = await routes(seats)
    with captured_log("debug") as buffer:
        async with mcp_session(shop.url, shop.token) as s:
            await s.call_tool("find_order", {"order_id": SECRET_ARG})
            await s.call_tool("fails", {"reason": SECRET_ARG})
    lines = [json.loads(x) for x in buffer.getvalue().splitlines()]
    calls = [x for x in lines if x["event"] == "gateway.call"]
    assert [(x["tool"], x["error_type"]) for x in calls] == [("find_order", None),
                                                              ("fails", "tool_error")]
    assert SECRET_ARG not in buffer.getvalue() and SECRET_RESULT not in buffer.getvalue()
    assert shop.token not in buffer.getvalue()


async def test_a_seat_without_tools_starts_no_gateway() -> None:
    agent = Agent(name="a", harness=NullHarness(),
                  client=Models().client(Endpoint(base_url="http://127.0.0.1:9/v1", model="x")))
    session = agent.chat(Task(idx=0, prompt="hi"))
    try:
        assert await session.ctx.tool_route() is None
        assert agent._gateway is None
    finally:
        await session.close()
        await agent.aclose()
        await agent.client.aclose()


def test_without_the_mcp_package_the_gateway_says_what_to_install() -> None:
    code = "\n".join([
        "import asyncio, sys",
        "sys.modules['mcp'] = None",
        "from interplay import InterplayError",
        "from interplay.gateway import ToolGateway",
        "try:",
        "    asyncio.run(ToolGateway().start())",
        "except InterplayError as exc:",
        "    print(exc)",
    ])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "needs the mcp package" in done.stdout
    assert "pip install 'mcp>=2.3,<3'" in done.stdout



# -- the gateway as documented: what it answers over the wire ------------------------------------


async def exchange(port: int, *parts: bytes) -> bytes:
    """What the gateway answers to ``parts`` sent one after another on a fresh connection
    (until it closes it, or for 5 s)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = b""
    try:
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.05)
        async with asyncio.timeout(5):
            while chunk := await reader.read(65536):
                got += chunk
    except TimeoutError:
        pass
    finally:
        writer.close()
    return got


def head_and_body(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), answer[:200]
    headers = {name.lower(): value for name, value in
               (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def request(port: int, token: str | None, *, method: str = "POST", body: bytes = b"",
            extra: str = "", host: str | None = None) -> bytes:
    auth = "" if token is None else f"authorization: Bearer {token}\r\n"
    length = f"content-length: {len(body)}\r\n" if method == "POST" else ""
    return (f"{method} /mcp HTTP/1.1\r\nhost: {host or f'127.0.0.1:{port}'}\r\n{auth}"
            f"accept: application/json, text/event-stream\r\ncontent-type: application/json\r\n"
            f"mcp-protocol-version: 2025-06-18\r\n{length}{extra}connection: close\r\n\r\n"
            ).encode() + body


LIST = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}).encode()
H2C = "upgrade: h2c\r\nhttp2-settings: AAMAAABkAAQAAP__\r\n"


def port_of(route: ToolRoute) -> int:
    return int(route.url.split(":")[2].split("/")[0])


async def test_an_h2c_upgrade_request_is_answered_as_http_1_1_with_its_body(
        seats: Seats) -> None:
    shop, _ = await routes(seats)
    port = port_of(shop)
    # "connection: close" is replaced: an Upgrade is named in Connection.
    whole = request(port, shop.token, body=LIST, extra=H2C).replace(
        b"connection: close", b"connection: Upgrade, HTTP2-Settings")
    head, _, body = whole.partition(b"\r\n\r\n")
    chunked = head.replace(f"content-length: {len(LIST)}".encode(),
                           b"transfer-encoding: chunked") + b"\r\n\r\n"
    for parts in ([whole], [head + b"\r\n\r\n", body[:10], body[10:]],
                  [chunked, b"%x\r\n%s\r\n" % (20, body[:20]),
                   b"%x\r\n%s\r\n0\r\n\r\n" % (len(body) - 20, body[20:])]):
        status, headers, answer = head_and_body(await exchange(port, *parts))
        assert status == 200, answer
        listed = json.loads(answer)["result"]["tools"]
        assert [t["name"] for t in listed] == ["find_order", "fails", "slow"]
        assert headers["connection"] == "close"


async def test_get_and_delete_are_refused_a_stateless_server_has_no_stream(
        seats: Seats) -> None:
    shop, _ = await routes(seats)
    for method in ("GET", "DELETE"):
        status, headers, body = head_and_body(
            await exchange(port_of(shop), request(port_of(shop), shop.token, method=method)))
        assert (status, headers["allow"]) == (405, "POST")
        assert "POST only" in json.loads(body)["error"]["message"]


async def test_every_refusal_is_a_json_rpc_error(seats: Seats) -> None:
    shop, _ = await routes(seats)
    port, token = port_of(shop), shop.token
    ws = (b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: websocket\r\nconnection: Upgrade"
          b"\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n")
    cases = {
        401: request(port, None, body=LIST),
        404: request(port, token, body=LIST).replace(b"/mcp", b"/v1/responses", 1),
        405: request(port, token, method="GET"),
        421: request(port, token, body=LIST, host="evil.example"),
        403: request(port, token, body=LIST, extra="origin: http://evil.example\r\n"),
        400: request(port, token, body=LIST).replace(b"application/json\r\nmcp",
                                                      b"text/plain\r\nmcp"),
        413: request(port, token, body=LIST).replace(f"content-length: {len(LIST)}".encode(),
                                                     b"content-length: 99999999"),
        406: request(port, token, body=LIST).replace(b"application/json, text/event-stream",
                                                     b"text/html"),
        # The listener's own: a WebSocket handshake, and what is not HTTP at all.
        4030: ws,
        4000: b"NOT HTTP AT ALL\r\n\r\n",
    }
    for expected, data in cases.items():
        status, headers, body = head_and_body(await exchange(port, data))
        assert status == int(str(expected)[:3]), (expected, body)
        assert headers["content-type"] == "application/json", (expected, headers)
        answer = json.loads(body)
        assert answer["jsonrpc"] == "2.0" and answer["id"] is None, (expected, answer)
        assert set(answer["error"]) == {"code", "message"}
        assert isinstance(answer["error"]["code"], int) and answer["error"]["message"]


async def test_the_listeners_own_timeout_is_a_json_rpc_error() -> None:
    gateway = ToolGateway(header_timeout_s=0.3, body_timeout_s=0.3)
    await gateway.start()
    try:
        route = gateway.open_trace(Desk())
        data = request(port_of(route), route.token, body=LIST)[:-10]  # the body falls short
        status, _, body = head_and_body(await exchange(port_of(route), data))
        assert status == 408
        answer = json.loads(body)
        assert (answer["jsonrpc"], answer["id"]) == ("2.0", None)
        assert answer["error"]["message"].startswith("the request body did not")
    finally:
        await gateway.stop()


class Desk:
    """A binding with desk_tools and no trace (what the gateway needs of one)."""

    tools = desk_tools()

    async def call_tool(self, name: str, arguments: Any, *, call_id: str) -> Any:
        raise AssertionError("not called")


async def test_the_sdks_lines_keep_their_text_and_per_request_ones_are_debug(
        seats: Seats) -> None:
    shop, _ = await routes(seats)
    port = port_of(shop)
    hostile = [request(port, shop.token, body=LIST, host="evil.example"),
               request(port, shop.token, body=LIST, extra="origin: http://evil.example\r\n")]
    for level in ("info", "debug"):
        with captured_log(level) as buffer:
            for _ in range(5):
                for data in hostile:
                    await exchange(port, data)
            async with mcp_session(shop.url, shop.token) as s:
                await s.call_tool("find_order", {"order_id": "1"})
        lines = [json.loads(x) for x in buffer.getvalue().splitlines()]
        # The server's side (the test's own mcp client logs what it sends: redacted).
        sdk = [x for x in lines if str(x.get("logger", "")).startswith(("mcp.server.",
                                                                          "mcp.shared."))]
        # Their text kept (an argument that is not a number is still redacted).
        assert not [x for x in sdk if x["event"].startswith("<redacted")], sdk
        if level == "info":
            assert sdk == [], sdk  # nothing per request above debug
        else:
            events = {x["event"] for x in sdk}
            assert "Terminating session: None" in events
            assert "Invalid Host header: evil.example" in events
            assert "Invalid Origin header: http://evil.example" in events
            assert {x["level"] for x in sdk} == {"debug"}
