"""The interception server against clients that misbehave, over real sockets: garbage bodies
are a 400 that records nothing, limits on size and time hold while other clients are served,
an error inside a stream ends it properly, and a fuzzer throws random requests at it."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interplay.config.endpoint import Endpoint
from interplay.interception import InterceptionServer, Limits
from interplay.model.client import ModelClient
from interplay.testing import ScriptedModel
from interplay.values.records import ModelCall

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
MESSAGES = {**CHAT, "max_tokens": 16}
DEEP = b"[" * 100_000 + b"]" * 100_000


@attrs.define
class Rig:
    model: ScriptedModel
    server: InterceptionServer
    calls: list[ModelCall]
    secret: str
    http: httpx.AsyncClient
    loop_errors: list[dict[str, Any]]

    async def post(self, path: str, content: bytes) -> httpx.Response:
        return await self.http.post(self.server.base_url + path, content=content, headers={
            "authorization": f"Bearer {self.secret}", "content-type": "application/json"})

    async def raw(self, data: bytes, *, wait_s: float = 5.0) -> bytes:
        """Send ``data`` on a fresh connection; what comes back until the server closes it."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server_port)
        writer.write(data)
        await writer.drain()
        try:
            async with asyncio.timeout(wait_s):
                return await reader.read()
        finally:
            writer.close()

    @property
    def server_port(self) -> int:
        return int(self.server.root_url.rsplit(":", 1)[1])

    def head(self, method: str, path: str, length: int | None) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", "host: x", f"authorization: Bearer {self.secret}",
                 "content-type: application/json"]
        if length is not None:
            lines.append(f"content-length: {length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.fixture
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    limits = getattr(request, "param", None) or Limits(max_body_mb=1)
    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: errors.append(context))
    async with ScriptedModel() as m:
        client = ModelClient(attrs.evolve(m.endpoint, max_retries=0, timeout_s=5))
        calls: list[ModelCall] = []
        async with InterceptionServer(limits=limits) as srv:
            route = srv.open_trace(client=client, on_call=calls.append)
            async with httpx.AsyncClient(timeout=10) as http:
                yield Rig(m, srv, calls, route.secret, http, errors)
        await client.aclose()
    gc.collect()  # a task whose exception nobody retrieved reports it when collected
    await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert errors == []


def error_of(r: httpx.Response) -> dict[str, Any]:
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "\n" not in error["message"]
    return error


GARBAGE = {
    "nested 100,000 deep": ("/chat/completions", DEEP, None),
    "nested 100,000 deep, responses": ("/responses", DEEP, None),
    "nested past the depth limit": ("/chat/completions",
                                    b'{"messages": ' + b"[" * 300 + b"]" * 300 + b"}", None),
    "a lone surrogate escape": (
        "/chat/completions",
        b'{"messages": [{"role": "user", "content": "a \\ud800 b"}]}', None),
    "a lone surrogate as bytes": (
        "/chat/completions",
        b'{"messages": [{"role": "user", "content": "a \xed\xa0\x80 b"}]}', None),
    "a streamed Responses request with a lone surrogate": (
        "/responses", b'{"input": "a \\udc00 b", "stream": true}', None),
    "NaN": ("/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], '
                                 b'"temperature": NaN}', None),
    "tools not a list": ("/responses", b'{"input": "x", "tools": {"type": "function"}}',
                         "tools"),
    "tools holding a string": ("/chat/completions",
                               json.dumps({**CHAT, "tools": ["f"]}).encode(), "tools"),
    "messages not a list": ("/chat/completions", b'{"messages": {"role": "user"}}',
                            "messages"),
    "input a number": ("/responses", b'{"input": 5}', "input"),
    "stream a string": ("/chat/completions", json.dumps({**CHAT, "stream": "yes"}).encode(),
                        "stream"),
    "stream a number, responses": ("/responses", b'{"input": "x", "stream": 1}', "stream"),
    "stream_options not an object": (
        "/chat/completions", json.dumps({**CHAT, "stream": True, "stream_options": 1}).encode(),
        "stream_options"),
    "instructions a list": ("/responses", b'{"input": "x", "instructions": ["a"]}',
                            "instructions"),
    "text not an object": ("/responses", b'{"input": "x", "text": "plain"}', "text"),
    "model a number": ("/chat/completions", json.dumps({**CHAT, "model": 4}).encode(), "model"),
    "max_tokens a boolean": ("/chat/completions",
                             json.dumps({**CHAT, "max_tokens": True}).encode(), "max_tokens"),
    "a body that is a list": ("/responses", b"[1, 2]", None),
    "nested 100,000 deep, messages": ("/messages", DEEP, None),
    "a lone surrogate, messages": (
        "/messages", b'{"max_tokens": 5, "messages": [{"role": "user", "content": "\\ud800"}]}',
        None),
    "system a number, messages": ("/messages", json.dumps({**MESSAGES, "system": 1}).encode(),
                                  "system"),
    "tool_choice a string, messages": (
        "/messages", json.dumps({**MESSAGES, "tool_choice": "auto"}).encode(), "tool_choice"),
    "a tool_use without an id, messages": ("/messages", json.dumps({**MESSAGES, "messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]})
        .encode(), "messages"),
    "counting a body that is a string": ("/messages/count_tokens", b'"hi"', None),
}


@pytest.mark.parametrize("case", list(GARBAGE))
async def test_garbage_is_a_400_that_records_nothing(rig: Rig, case: str) -> None:
    path, body, param = GARBAGE[case]
    r = await rig.post(path, body)
    assert r.status_code == 400, r.text[:200]
    if path.startswith("/messages"):  # a Messages client reads Anthropic's error shape
        assert r.json()["type"] == "error"
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert set(r.json()["error"]) == {"type", "message"}
    else:
        error = error_of(r)
        assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert rig.calls == [] and rig.model.requests == []
    # the server goes on
    r = await rig.post("/chat/completions", json.dumps(CHAT).encode())
    assert r.status_code == 200 and len(rig.calls) == 1


async def test_a_body_past_the_limit_is_a_413(rig: Rig) -> None:
    big = json.dumps({**CHAT, "pad": "x" * (1 << 20)}).encode()
    r = await rig.post("/chat/completions", big)  # its Content-Length says so
    assert r.status_code == 413
    assert error_of(r)["code"] == "request_too_large" and "1 MB" in error_of(r)["message"]

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: found while reading
        for i in range(0, len(big), 1 << 16):
            yield big[i:i + (1 << 16)]

    r = await rig.http.post(rig.server.base_url + "/chat/completions", content=chunked(),
                            headers={"authorization": f"Bearer {rig.secret}"})
    assert r.status_code == 413
    assert rig.calls == [] and rig.model.requests == []


def anthropic_error(body: bytes) -> dict[str, Any]:
    """A Messages client's error: Anthropic's shape, one line."""
    answer = json.loads(body)
    assert answer["type"] == "error" and set(answer["error"]) == {"type", "message"}
    assert answer["error"]["message"] and "\n" not in answer["error"]["message"]
    return dict(answer["error"])


def split_answer(raw: bytes) -> tuple[bytes, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    return head, body[:length]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/chat/completions"])
@pytest.mark.parametrize("connection", ["close", "keep-alive"])
async def test_a_body_past_the_limit_sent_whole_gets_its_413_not_a_reset(
        rig: Rig, path: str, connection: str) -> None:
    """The whole body written before the answer is read (as http.client, curl and most SDKs
    do): the 413 reaches the client whatever its Connection header, and a connection kept
    alive is idle again once the refused body has come (its keep-alive deadline closes it)."""
    body = json.dumps({**MESSAGES, "pad": "x" * (2 << 20)}).encode()
    head = rig.head("POST", path, len(body)).replace(
        b"\r\n\r\n", f"\r\nconnection: {connection}\r\n\r\n".encode())
    answer = await rig.raw(head + body, wait_s=15)  # until the server closes it
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:100]
    _, error = split_answer(answer)
    if path == "/v1/messages":
        refusal = anthropic_error(error)
        assert refusal["type"] == "request_too_large" and "exceeds 1 MB" in refusal["message"]
    else:
        assert error_of(httpx.Response(413, content=error))["code"] == "request_too_large"
    assert answer.count(b"HTTP/1.1 ") == 1 and rig.calls == []


async def test_a_connection_whose_body_was_refused_serves_its_next_request(rig: Rig) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.server_port)
    try:
        big = json.dumps({**CHAT, "pad": "x" * (2 << 20)}).encode()
        writer.write(rig.head("POST", "/v1/chat/completions", len(big)) + big)
        await writer.drain()
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 413 ")
            await reader.readexactly(int(
                head.lower().split(b"content-length:")[1].split(b"\r\n")[0]))
            small = json.dumps(CHAT).encode()
            writer.write(rig.head("POST", "/v1/chat/completions", len(small)) + small)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
    finally:
        writer.close()
    assert len(rig.calls) == 1


SHORT = Limits(max_body_mb=1, header_timeout_s=0.5, body_timeout_s=0.5)


@pytest.mark.parametrize("rig", [SHORT], indirect=True)
async def test_slow_clients_are_cut_off_while_others_are_served(rig: Rig) -> None:
    body = json.dumps(CHAT).encode()

    async def slowloris() -> bytes:
        """Headers one byte at a time, never finished. What the server sent before it cut the
        connection off: nothing, whether the client saw its close or (a byte written after
        the server's lingering close ended, on a loaded machine) its reset."""
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.server_port)
        head = rig.head("POST", "/v1/chat/completions", len(body))[:-4]
        try:
            for byte in head:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.05)
                if reader.at_eof():
                    break
        except ConnectionError:
            pass
        rest = b""
        try:
            async with asyncio.timeout(10):
                while chunk := await reader.read(1 << 16):
                    rest += chunk
        except ConnectionResetError:
            pass  # what came before the reset is kept
        writer.close()
        return rest

    async def short_body() -> bytes:
        """A Content-Length the body never reaches."""
        return await rig.raw(rig.head("POST", "/v1/chat/completions", len(body) + 10) + body,
                             wait_s=10)

    slow = [asyncio.create_task(slowloris()) for _ in range(20)]
    short = asyncio.create_task(short_body())
    await asyncio.sleep(0.2)
    # meanwhile a well-behaved program is answered, while the slow ones still hang on
    r = await rig.post("/chat/completions", body)
    assert r.status_code == 200
    assert not any(task.done() for task in [*slow, short])
    # then each slow one is cut off (one never cut off would fail its read's timeout)
    for rest in await asyncio.gather(*slow):
        assert rest == b""  # closed with nothing to answer: no request came
    answer = await short
    assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer
    assert error_of(httpx.Response(408, content=answer.split(b"\r\n\r\n", 1)[1]))[
        "code"] == "request_timeout"
    assert len(rig.calls) == 1 and len(rig.model.requests) == 1


@pytest.mark.parametrize("rig", [SHORT], indirect=True)
async def test_a_body_too_slow_on_a_messages_path_is_anthropics_408(rig: Rig) -> None:
    raw = await rig.raw(rig.head("POST", "/v1/messages", 100) + b"{", wait_s=10)
    refusal = refusal_of(raw, 408, "/v1/messages")
    assert refusal["type"] == "timeout_error" and "did not arrive" in refusal["message"]


@pytest.mark.parametrize("rig", [SHORT], indirect=True)
async def test_a_refused_body_that_never_ends_gets_one_answer_then_the_door(rig: Rig) -> None:
    head = rig.head("POST", "/v1/chat/completions", 2 << 20)  # past the limit: a 413 at once
    answer = await rig.raw(head + b"x" * 1000, wait_s=10)  # and the rest never comes
    assert answer.startswith(b"HTTP/1.1 413 ") and answer.count(b"HTTP/1.1") == 1
    assert rig.calls == []


@pytest.mark.parametrize("rig", [Limits(max_body_mb=1, header_timeout_s=30, body_timeout_s=0.5)],
                         indirect=True)
async def test_a_body_timeout_shorter_than_the_header_timeout_holds(rig: Rig) -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    answer = await rig.raw(rig.head("POST", "/v1/chat/completions", 100) + b"{", wait_s=20)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert loop.time() - t0 < 10  # its own 0.5 s (and the linger), not the head's 30 s


async def test_a_client_gone_before_its_body_ended_is_not_served(rig: Rig) -> None:
    body = json.dumps(CHAT).encode()  # whole JSON, though less than the Content-Length says
    _, writer = await asyncio.open_connection("127.0.0.1", rig.server_port)
    writer.write(rig.head("POST", "/v1/chat/completions", len(body) + 10) + body)
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    r = await rig.post("/chat/completions", body)  # served after it: the other has been seen
    assert r.status_code == 200
    assert len(rig.calls) == 1 and len(rig.model.requests) == 1


async def test_headers_past_their_bound_are_a_431(rig: Rig) -> None:
    head = rig.head("POST", "/v1/chat/completions", 2)[:-2] + b"x-pad: " + b"a" * 70_000
    answer = await rig.raw(head + b"\r\n\r\n{}")
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert rig.calls == []


MESSAGES_PATHS = ["/v1/messages?beta=true", "/t/SECRET/v1/messages",
                  "/v1/messages/count_tokens"]


def refusal_of(raw: bytes, status: int, path: str) -> dict[str, Any]:
    """The body of a raw answer of ``status``, checked to be in the shape ``path`` speaks."""
    assert raw.startswith(b"HTTP/1.1 %d " % status), raw[:100]
    _, body = split_answer(raw)
    if "/messages" in path:
        return anthropic_error(body)
    return error_of(httpx.Response(status, content=body))


@pytest.mark.parametrize("path", [*MESSAGES_PATHS, "/v1/chat/completions"])
async def test_the_listeners_own_refusals_come_in_the_shape_the_path_speaks(
        rig: Rig, path: str) -> None:
    path = path.replace("SECRET", rig.secret)
    # headers past their bound, sent whole: a 431 (not a reset)
    head = rig.head("POST", path, 2)[:-2] + b"x-pad: " + b"a" * 70_000 + b"\r\n\r\n{}"
    refusal = refusal_of(await rig.raw(head), 431, path)
    assert "request headers exceed 65536 bytes" in refusal["message"]
    # a request the parser cannot read: a 400
    bad = rig.head("POST", path, 2).replace(b"host: x", b"host: x\r\nbad header: y") + b"{}"
    assert "not valid HTTP" in refusal_of(await rig.raw(bad), 400, path)["message"]
    if "/messages" in path:
        assert refusal["type"] == "invalid_request_error"
    assert rig.calls == []


@pytest.mark.parametrize(("path", "anthropic"), [
    ("/v1/messages/batches", True), ("/v1/messages/x/y", True), ("/t/SECRET/messages/z", True),
    ("/v1/messagesx", False), ("/v1/embeddings", False), ("/v1/chat", False)])
async def test_an_unknown_route_is_a_404_in_the_shape_its_path_speaks(
        rig: Rig, path: str, anthropic: bool) -> None:
    r = await rig.http.post(rig.server.root_url + path.replace("SECRET", rig.secret),
                            content=b"{}", headers={"x-api-key": rig.secret})
    assert r.status_code == 404
    if anthropic:
        assert anthropic_error(r.content)["type"] == "not_found_error"
    else:
        assert error_of(r)["code"] == "not_found"


class _HostileUpstream:
    """A Chat Completions upstream whose stream holds a chunk no model should send."""

    chunks = [b'{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,'
              b'"delta":{"role":"assistant","content":"partial"}}]}',
              b'{"id":"c","object":"chat.completion.chunk","choices":[5]}']

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"connection: close\r\n\r\n")
            for chunk in self.chunks:
                writer.write(b"data: " + chunk + b"\n\n")
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


@pytest.mark.parametrize("path", ["/chat/completions", "/responses", "/messages"])
async def test_an_error_once_a_stream_has_begun_ends_it_and_is_recorded(rig: Rig,
                                                                       path: str) -> None:
    upstream = await asyncio.start_server(_HostileUpstream().serve, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    client = ModelClient(Endpoint(base_url=f"http://127.0.0.1:{port}/v1", model="m",
                                  max_retries=0))
    calls: list[ModelCall] = []
    route = rig.server.open_trace(client=client, on_call=calls.append)
    body = {"input": "x", "stream": True} if path == "/responses" else \
        {**MESSAGES, "stream": True} if path == "/messages" else {**CHAT, "stream": True}
    r = await rig.http.post(route.base_url + path, json=body,
                            headers={"authorization": f"Bearer {route.secret}"})
    await client.aclose()
    upstream.close()
    assert r.status_code == 200
    last = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")][-1]
    # The upstream's answer cannot be read: its fault, not the server's.
    if path == "/responses":
        assert last["type"] == "response.failed"
        assert last["response"]["error"]["code"] == "bad_response"
    elif path == "/messages":
        assert (last["type"], last["error"]["type"]) == ("error", "api_error")
        assert [line for line in r.text.splitlines() if line.startswith("event:")][-1] == \
            "event: error"
    else:
        assert (last["error"]["type"], last["error"]["code"]) == ("server_error", "bad_response")
    assert [(c.error_type, c.streamed) for c in calls] == [("bad_response", True)]


# -- the fuzzer -----------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
FIELDS = ["model", "messages", "input", "instructions", "tools", "tool_choice", "stream",
          "stream_options", "text", "max_tokens", "max_output_tokens", "parallel_tool_calls",
          "temperature", "previous_response_id", "system", "stop_sequences", "thinking",
          "metadata", "output_config", "top_k"]
TEMPLATES = [CHAT, {"model": "m", "input": "hi"},
             {"input": [{"type": "message", "role": "user", "content": "hi"},
                        {"type": "function_call", "call_id": "c", "name": "f",
                         "arguments": "{}"},
                        {"type": "function_call_output", "call_id": "c", "output": "ok"}],
              "tools": [{"type": "function", "name": "f"}], "stream": True},
             MESSAGES,
             {"max_tokens": 8, "stream": True, "system": [{"type": "text", "text": "s"}],
              "tools": [{"name": "f", "input_schema": {"type": "object"}}],
              "messages": [{"role": "user", "content": "hi"},
                           {"role": "assistant", "content": [
                               {"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                           {"role": "user", "content": [
                               {"type": "tool_result", "tool_use_id": "t", "content": "ok"},
                               {"type": "image", "source": {"type": "base64", "data": "QQ=="}},
                           ]}]}]


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["mutated", "mutated", "json", "bytes", "spliced"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(JSON)).encode()
    body = dict(draw(st.sampled_from(TEMPLATES)))
    for _ in range(draw(st.integers(0, 3))):
        body[draw(st.sampled_from(FIELDS))] = draw(JSON)
    raw = json.dumps(body).encode()
    if kind == "spliced":  # bytes no encoder writes, somewhere in a valid body
        at = draw(st.integers(0, len(raw)))
        piece = draw(st.sampled_from([b"\\ud800", b"\xed\xa0\x80", b"\xff", b"\\u0000", b"[" * 300,
                                      b"NaN", b"\x00", b'"', b"\\"]))
        raw = raw[:at] + piece + raw[at:]
    return raw


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, list[tuple[str, str]], bytes]:
    method = draw(st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE", "OPTIONS",
                                   "HEAD"]))
    path = draw(st.sampled_from(["/v1/chat/completions", "/v1/responses", "/v1/models",
                                 "/chat/completions", "/t/{secret}/v1/responses", "/t/",
                                 "/t/{secret}", "/v1/", "/%ff", "/v1/responses?x=1",
                                 "/v1/messages", "/v1/messages?beta=true",
                                 "/t/{secret}/v1/messages", "/v1/messages/count_tokens",
                                 "/v1/messages/", "/messages/count_tokens?beta=true"]))
    auth = draw(st.sampled_from(["Bearer {secret}", "Bearer {secret}", "Bearer nope", "",
                                 "bearer {secret}", "Basic {secret}"]))
    headers = [("authorization", auth)] if auth else []
    key = draw(st.sampled_from(["", "", "{secret}", "nope", " {secret} "]))
    if key:
        headers.append(("x-api-key", key))
    headers += draw(st.lists(st.tuples(
        st.sampled_from(["content-type", "accept", "x-any", "accept-encoding", "expect"]),
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30)), max_size=3))
    return method, path, headers, draw(bodies())


class Served(tuple[InterceptionServer, list[ModelCall], str]):
    def __repr__(self) -> str:  # hypothesis prints its arguments: not the calls recorded
        return "Served()"


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    calls: list[ModelCall] = []
    with ScriptedModel() as m, InterceptionServer(limits=Limits(max_body_mb=1)) as srv:
        client = ModelClient(attrs.evolve(m.endpoint, max_retries=0, timeout_s=5))
        route = srv.open_trace(client=client, on_call=calls.append)
        yield Served((srv, calls, route.secret))


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=requests())
def test_fuzzed_requests(served: Served,
                         capfd: pytest.CaptureFixture[str],
                         request: tuple[str, str, list[tuple[str, str]], bytes]) -> None:
    srv, calls, secret = served
    method, path, headers, body = request
    head = [f"{method} {path.replace('{secret}', secret)} HTTP/1.1", "host: x",
            "connection: close", f"content-length: {len(body)}"]
    head += [f"{k}: {v.replace('{secret}', secret)}" for k, v in headers if k != "expect"]
    before = len(calls)
    answer = exchange(int(srv.root_url.rsplit(":", 1)[1]),
                      ("\r\n".join(head) + "\r\n\r\n").encode() + body)
    status = int(answer.split(b" ", 2)[1])
    assert status < 500, answer[:300]
    if status >= 400:
        assert len(calls) == before, "a refused request was recorded"
    out, err = capfd.readouterr()
    for text in (out, err):
        assert "Traceback" not in text and "never retrieved" not in text, text[-2000:]
    # and a good request is still answered
    good = json.dumps(CHAT).encode()
    ok = exchange(int(srv.root_url.rsplit(":", 1)[1]), (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
        f"authorization: Bearer {secret}\r\ncontent-length: {len(good)}\r\n\r\n").encode()
        + good)
    assert ok.startswith(b"HTTP/1.1 200 ")
