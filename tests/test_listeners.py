"""interplay's listeners (the interception server, the scripted model's server and the embedded
model's server, all on the shared plumbing of ``interplay._plumbing.listener``) against what they do
not serve, over real sockets: a WebSocket handshake gets a plain refusal, never a 500, and nothing
is logged as an error."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from interplay.interception import InterceptionServer
from interplay.model.client import ModelClient
from interplay.testing import ScriptedModel, captured_log

#: A WebSocket client's opening handshake (RFC 6455, section 1.3).
HANDSHAKE = ("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: websocket\r\n"
             "connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             "sec-websocket-version: 13\r\n\r\n")


async def answer_to(port: int, data: bytes) -> bytes:
    """What the server sends back to ``data`` on a fresh connection, until it closes it (or
    for 5 s)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    got = b""
    try:
        async with asyncio.timeout(5):
            while chunk := await reader.read(65536):
                got += chunk
    except TimeoutError:
        pass
    finally:
        writer.close()
    return got


def status_of(answer: bytes) -> int:
    line = answer.split(b"\r\n", 1)[0].split()
    assert len(line) >= 2 and line[0].startswith(b"HTTP/1."), answer[:200]
    return int(line[1])


def errors_in(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in lines if x.get("level") in ("error", "critical", "exception")]


def log_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


@pytest.fixture
async def listeners() -> AsyncIterator[dict[str, int]]:
    """The interception server and the scripted model's server, with a trace open."""
    async with ScriptedModel() as model:
        client = ModelClient(model.endpoint)
        async with InterceptionServer() as srv:
            srv.open_trace(client=client, on_call=lambda call: None)
            yield {"interception": int(srv.root_url.rsplit(":", 1)[1]),
                   "scripted": int(model.base_url.split(":")[2].split("/")[0])}
        await client.aclose()


@pytest.mark.parametrize("which", ["interception", "scripted"])
@pytest.mark.parametrize("path", ["/v1/models", "/v1/chat/completions", "/anything"])
async def test_a_websocket_handshake_is_refused_plainly(listeners: dict[str, int], which: str,
                                                        path: str) -> None:
    assert importlib.util.find_spec("websockets") is not None, "a WebSocket library is here"
    with captured_log("debug") as buffer:
        answer = await answer_to(listeners[which], HANDSHAKE.format(path=path).encode())
        # the listener goes on serving plain HTTP
        plain = await answer_to(listeners[which],
                                b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert status_of(answer) in (403, 404, 426), answer[:300]
    assert b"sec-websocket-accept" not in answer.lower()
    assert status_of(plain) in (200, 401)
    assert errors_in(log_lines(buffer)) == []


async def test_an_upgrade_it_does_not_know_is_served_as_plain_http(
        listeners: dict[str, int]) -> None:
    """An Upgrade a server does not serve (h2c) may be ignored (RFC 9110, 7.8): the request is
    answered as plain HTTP, and the connection closed after it."""
    with captured_log("debug") as buffer:
        answer = await answer_to(listeners["scripted"], (
            b"GET /v1/models HTTP/1.1\r\nhost: x\r\nupgrade: h2c\r\n"
            b"connection: Upgrade, HTTP2-Settings\r\nhttp2-settings: AAMAAABkAAQAAP__\r\n\r\n"))
    assert status_of(answer) == 200
    assert b'"data"' in answer
    lines = log_lines(buffer)
    assert errors_in(lines) == []
    assert not [x for x in lines if x.get("level") == "warning"], lines


async def test_an_upgrade_request_with_a_body_is_served_with_its_body(
        listeners: dict[str, int]) -> None:
    """h2c on a POST: the body follows the head (llhttp stops reading at the Upgrade), and the
    request is answered with it, not as an empty one."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with captured_log("debug") as buffer:
        answer = await answer_to(listeners["scripted"], (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nupgrade: h2c\r\n"
            b"connection: Upgrade, HTTP2-Settings\r\nhttp2-settings: AAMAAABkAAQAAP__\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)))
    assert status_of(answer) == 200, answer[:300]
    assert b'"choices"' in answer
    assert errors_in(log_lines(buffer)) == []


async def test_what_is_not_http_is_refused_in_the_servers_shape(
        listeners: dict[str, int]) -> None:
    answer = await answer_to(listeners["interception"], b"NOT HTTP AT ALL\r\n\r\n")
    assert status_of(answer) == 400
    body = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert body["error"]["message"] and body["error"]["type"] == "invalid_request_error"


@pytest.mark.slow
@pytest.mark.local_model
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                    reason="llama_cpp is not installed (run: bash .ci/setup)")
async def test_the_embedded_models_server_refuses_a_websocket_handshake() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "interplay.cli", "--log-format", "json", "--log-level", "info",
        "serve-local", "--port", "0", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        url = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode().strip()
        assert url.startswith("http://127.0.0.1:"), url
        port = int(url.split(":")[2].split("/")[0])
        answer = await answer_to(port, HANDSHAKE.format(path="/v1/models").encode())
        plain = await answer_to(port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\n"
                                      b"connection: close\r\n\r\n")
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert status_of(answer) in (403, 404, 426), answer[:300]
    assert status_of(plain) == 200
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    assert errors_in(lines) == [], err.decode()[-2000:]


#: The interception server in a process of its own under a descriptor limit of 1024 (soft and
#: hard, as `ulimit -n 1024` sets them) on the event loop argv[2] names, forwarding to the
#: scripted model at argv[1]. It prints a trace's route, serves until its stdin closes, then
#: prints how many connections it shed.
PRESSED_SERVER = """
import asyncio, json, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
from interplay._plumbing import aio as _aio
from interplay.interception import InterceptionServer
from interplay.model.client import ModelClient
from interplay.config.endpoint import Endpoint

async def main():
    client = ModelClient(Endpoint(base_url=sys.argv[1], model="scripted", max_retries=0))
    async with InterceptionServer() as srv:
        route = srv.open_trace(client=client, on_call=lambda call: None)
        print(json.dumps({"base_url": route.base_url, "secret": route.secret}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        shed = getattr(srv._server, "connections_shed", None)  # (none before listeners had one)
    await client.aclose()
    print(json.dumps({"shed": shed}), flush=True)

(_aio.run if sys.argv[2] == "uvloop" else asyncio.run)(main())
"""

#: A local client that holds argv[2] connections to port argv[1], each sending the start of a
#: request and never the rest, each opened again as soon as the server closes it. It prints
#: "held" once it has opened that many, and when its stdin closes, how many it opened in all.
HOSTILE = """
import asyncio, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
opened = 0

async def hold(stop):
    global opened
    while not stop.is_set():
        try:
            async with asyncio.timeout(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.1)
            continue
        opened += 1
        try:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\\r\\nhost: x\\r\\ncontent-le")
            await reader.read()
        except OSError:
            pass
        finally:
            writer.close()

async def main():
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(hold(stop)) for _ in range(n)]
    closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    while opened < n:
        await asyncio.sleep(0.05)
    print("held", flush=True)
    await closed
    print(opened, flush=True)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.parametrize("loop_name", ["uvloop", "asyncio"])
async def test_half_sent_connections_past_the_descriptor_limit_do_not_keep_good_requests_out(
        loop_name: str) -> None:
    """1,100 half-sent connections, held by another local process, against a server allowed
    1024 descriptors: good requests, each on a connection of its own, are all answered."""
    import httpx

    async with ScriptedModel() as model:
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-c", PRESSED_SERVER, model.base_url, loop_name,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        assert server.stdout is not None and server.stdin is not None
        route = json.loads(await server.stdout.readline())
        port = int(route["base_url"].split(":")[2].split("/")[0])
        hostile = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HOSTILE, str(port), "1100", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE)
        assert hostile.stdout is not None and hostile.stdin is not None
        try:
            async with asyncio.timeout(60):
                assert await hostile.stdout.readline() == b"held\n"
            statuses = []
            for i in range(20):
                async with httpx.AsyncClient(timeout=30) as http:
                    r = await http.post(
                        route["base_url"] + "/chat/completions",
                        json={"model": "scripted",
                              "messages": [{"role": "user", "content": f"good {i}"}]},
                        headers={"authorization": f"Bearer {route['secret']}"})
                statuses.append(r.status_code)
            assert statuses == [200] * 20
        finally:
            hostile.stdin.close()
            await asyncio.wait_for(hostile.wait(), 60)
            server.stdin.close()
            out, err = await asyncio.wait_for(server.communicate(), 60)
        assert server.returncode == 0, err.decode()[-3000:]
        shed = json.loads(out.decode().splitlines()[-1])["shed"]
        assert isinstance(shed, int) and shed > 0
        assert b"Traceback" not in err, err.decode()[-3000:]
