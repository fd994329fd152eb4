"""Client-controlled strings stay bounded wherever interplay keeps them: hostile requests to the
interception server's three APIs (a megabyte key, 50,000 keys) and to the tool gateway (a
megabyte tool name and call id, a call id full of terminal escapes), over real sockets, leave
no long log line and no long record, each cut string saying how long it was; in console
format nothing a terminal would act on is written raw."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import AsyncIterator, Iterator

import attrs
import httpx
import pytest
import structlog
from test_gateway import Seats, mcp_session, routes

from interplay import log as log_mod
from interplay._bounded import MAX_CHARS, bounded, bounded_names, is_cut
from interplay.interception import InterceptionServer
from interplay.model.client import ModelClient
from interplay.testing import ScriptedModel, captured_log
from interplay.values.records import ModelCall

#: The longest log line a hostile request may leave (a line holds a few bounded values).
LONGEST_LINE = 4096
MB = 1 << 20
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\r\nfake line\u202e"



def longest(buffer: io.StringIO) -> int:
    return max((len(line) for line in buffer.getvalue().splitlines()), default=0)


def events(buffer: io.StringIO, name: str) -> list[dict[str, object]]:
    return [e for e in map(json.loads, buffer.getvalue().splitlines()) if e["event"] == name]


@contextlib.contextmanager
def console_log() -> Iterator[io.StringIO]:
    """The log of the block as the console format writes it (the command's default)."""
    buffer = io.StringIO()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    log_mod.configure(fmt="console", level="debug", stream=buffer)
    try:
        yield buffer
    finally:
        structlog.reset_defaults()
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)


# -- the helper ---------------------------------------------------------------------------------


def test_a_string_within_the_bound_is_kept_and_a_longer_one_keeps_its_head_and_length() -> None:
    assert bounded("toolu_01ABC") == "toolu_01ABC"
    assert bounded("x" * MAX_CHARS) == "x" * MAX_CHARS
    cut = bounded("k" * MB)
    assert cut.startswith("k" * 64) and cut.endswith("…[cut: 1048576 chars]")
    assert len(cut) < MAX_CHARS and is_cut(cut) and not is_cut("k" * 64)
    names = bounded_names(f"k{i}" for i in range(50_000))
    assert names[:2] == ["k0", "k1"] and names[-1] == "…[+49980 more]" and len(names) == 21
    assert bounded_names(["a", "b"]) == ["a", "b"]


def test_the_logs_guard_bounds_whatever_a_call_passes() -> None:
    with captured_log("debug") as buffer:
        log_mod.get_logger("interplay.test").info(
            "probe.line", tool="t" * MB, param_names=[f"k{i}" for i in range(50_000)],
            request_path="/v1/" + "p" * MB, call_ids=["c" * MB] * 3)
    assert longest(buffer) < LONGEST_LINE
    [line] = events(buffer, "probe.line")
    assert line["tool"] == bounded("t" * MB)
    names = line["param_names"]
    assert isinstance(names, list) and len(names) == 21 and names[-1] == "…[+49980 more]"
    assert str(line["request_path"]).endswith(f"[cut: {MB + 4} chars]")


def test_console_lines_show_terminal_escapes_escaped() -> None:
    with console_log() as buffer:
        log_mod.get_logger("interplay.test").info("probe.line", call_id=ESCAPES,
                                                  tool_names=[ESCAPES])
        logging.getLogger("uvicorn.error").warning("bad %s", ESCAPES)
    text = buffer.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\r" not in text and text.count("\n") == 2  # one line each, nothing injected
    assert "\\x1b]0;pwned\\x07" in text and "\\u202e" in text


# -- the interception server ----------------------------------------------------------------------


@attrs.define
class Boundary:
    server: InterceptionServer
    secret: str
    calls: list[ModelCall]
    http: httpx.AsyncClient

    async def post(self, path: str, body: dict[str, object]) -> httpx.Response:
        return await self.http.post(self.server.base_url + path, content=json.dumps(body),
                                    headers={"x-api-key": self.secret,
                                             "content-type": "application/json"})


@pytest.fixture
async def boundary() -> AsyncIterator[Boundary]:
    async with ScriptedModel() as model:
        client = ModelClient(attrs.evolve(model.endpoint, max_retries=0, timeout_s=10))
        calls: list[ModelCall] = []
        async with InterceptionServer() as server:
            route = server.open_trace(client=client, on_call=calls.append)
            async with httpx.AsyncClient(timeout=60) as http:
                yield Boundary(server, route.secret, calls, http)
        await client.aclose()


HELLO = [{"role": "user", "content": "hello"}]
ROUTES = {"/messages": {"model": "m", "max_tokens": 16, "messages": HELLO},
          "/chat/completions": {"model": "m", "messages": HELLO},
          "/responses": {"model": "m", "input": "hello"}}


@pytest.mark.parametrize("path", list(ROUTES))
async def test_a_megabyte_key_and_50000_keys_leave_no_long_log_line(boundary: Boundary,
                                                                    path: str) -> None:
    body = ROUTES[path]
    with captured_log("debug") as buffer:
        r = await boundary.post(path, {**body, "k" * MB: 1})
        assert r.status_code == 200, r.text[:300]
        r = await boundary.post(path, {**body, **{f"key_{i:05}": i for i in range(50_000)}})
        assert r.status_code == 200, r.text[:300]
        r = await boundary.post(path, {**body, "tools": [
            {"name": "n" * MB, "input_schema": {"type": "object"}, "type": "custom",
             "defer_loading": True}]} if path == "/messages" else body)
        assert r.status_code == 200, r.text[:300]
    assert len(boundary.calls) == 3
    assert longest(buffer) < LONGEST_LINE, longest(buffer)
    if path == "/messages":  # the route that names what it did not forward
        said = events(buffer, "interception.fields_not_forwarded")
        assert [line["params"] for line in said] == [1, 50_000, 1]
        assert said[0]["param_names"] == [bounded("k" * MB)]
        assert said[1]["param_names"][-1] == "…[+49980 more]"  # type: ignore[index]
        [tool] = said[2]["param_names"]  # type: ignore[misc]
        assert tool.startswith("tools[nnn") and tool.endswith(f"[cut: {MB + 21} chars]")


# -- the tool gateway ---------------------------------------------------------------------------


async def test_a_megabyte_tool_name_and_call_id_are_logged_and_recorded_bounded() -> None:
    seats = Seats()
    try:
        shop, _ = await routes(seats)
        with captured_log("debug") as buffer:
            async with mcp_session(shop.url, shop.token) as s:
                await s.call_tool("t" * MB, {}, meta={"callId": "c" * MB})
                await s.call_tool("find_order", {"order_id": "W1"},
                                  meta={"claudecode/toolUseId": "u" * MB})
                await s.call_tool("find_order", {"order_id": "W2"},
                                  meta={"callId": "call_ok"})
        assert longest(buffer) < LONGEST_LINE, longest(buffer)
        calls = events(buffer, "gateway.call")
        assert [c["tool"] for c in calls] == [bounded("t" * MB), "find_order", "find_order"]
        runs = seats.shop.trace.tool_runs
        assert [(r.name, r.call_id, r.error_type) for r in runs] == [
            (bounded("t" * MB), bounded("c" * MB), "unknown_tool"),
            ("find_order", bounded("u" * MB), None), ("find_order", "call_ok", None)]
        assert runs[0].name.endswith("[cut: 1048576 chars]")
        assert len(json.dumps([attrs.asdict(r) for r in runs])) < 2048
    finally:
        await seats.aclose()


async def test_a_call_id_of_terminal_escapes_reaches_the_console_log_escaped() -> None:
    seats = Seats()
    try:
        shop, _ = await routes(seats)
        with console_log() as buffer:
            async with mcp_session(shop.url, shop.token) as s:
                await s.call_tool("find_order", {"order_id": "W1"}, meta={"callId": ESCAPES})
        text = buffer.getvalue()
        [line] = [x for x in text.splitlines() if "gateway.call " in x]
        assert "x1b]0;pwned" in line and "u202e" in line  # escaped, one way or another
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text
        # the record keeps the model's id as it was (it names the model's own call)
        assert [r.call_id for r in seats.shop.trace.tool_runs] == [ESCAPES]
    finally:
        await seats.aclose()
