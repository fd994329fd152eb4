"""benchmarks/fast_model.py, the benchmarks' low-CPU model server, as a real subprocess: what
interplay's model client gets from it (plain and streamed), pooled concurrency, its counters,
and the HTTP framing it must read (chunked bodies, pipelined requests, HTTP/1.0)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from interplay.config.endpoint import Endpoint
from interplay.model.client import ModelClient
from interplay.model.wire import assistant_message
from interplay.values.records import Message

# Each test starts the benchmark model server as a subprocess.
pytestmark = pytest.mark.slow

SERVER = Path(__file__).resolve().parent.parent / "benchmarks" / "fast_model.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def port() -> Iterator[int]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port),
                             "--latency-ms", "5"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield port
    finally:
        proc.terminate()
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert code == 0, "SIGTERM should end the server cleanly"


def _client(port: int, model: str = "m", max_connections: int = 64) -> ModelClient:
    return ModelClient(Endpoint(base_url=f"http://127.0.0.1:{port}/v1", model=model),
                       max_connections=max_connections)


async def _get(port: int, path: str) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as session, \
            session.get(f"http://127.0.0.1:{port}{path}") as resp:
        return resp.status, json.loads(await resp.read())


def _exchange(port: int, request: bytes, until: bytes | None = None) -> bytes:
    """Send raw bytes; read until ``until`` has arrived, or to EOF when it is None."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        got = b""
        while until is None or until not in got:
            piece = sock.recv(65536)
            if not piece:
                break
            got += piece
    return got


async def test_chat_completion_as_the_model_client_reads_it(port: int) -> None:
    client = _client(port, model="my-model")
    try:
        call = await client.chat([Message("user", "hi")])
    finally:
        await client.aclose()
    assert call.error_type is None, call.error
    assert call.status == 200
    message = assistant_message(call)
    assert message is not None and message.role == "assistant"
    assert message.text == "ok, noted"
    assert call.model == "my-model"
    assert call.finish_reason == "stop"
    assert call.usage is not None
    assert call.usage.completion_tokens == 3
    assert call.usage.prompt_tokens > 0
    assert call.usage.total_tokens == call.usage.prompt_tokens + 3
    raw = call.parsed_response()
    assert raw is not None
    assert raw["object"] == "chat.completion"
    assert raw["id"].startswith("chatcmpl-fast-")
    assert isinstance(raw["created"], int)


async def test_streamed_chat_completion(port: int) -> None:
    client = _client(port, model="streamer")
    chunks: list[dict[str, object]] = []
    try:
        body = client.build_body([Message("user", "hi")], stream=True)
        call = await client.chat_raw(body, on_chunk=lambda _raw, chunk: chunks.append(chunk))
    finally:
        await client.aclose()
    assert call.error_type is None, call.error
    assert call.streamed
    message = assistant_message(call)
    assert message is not None and message.text == "ok, noted"
    assert call.model == "streamer"
    assert call.finish_reason == "stop"
    assert call.usage is not None and call.usage.completion_tokens == 3
    assert len(chunks) == 3  # role, content, finish with usage; [DONE] is not a chunk
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["usage"] is not None


async def test_stream_flag_through_chat(port: int) -> None:
    client = _client(port)
    try:
        call = await client.chat([Message("user", "hi")], stream=True)
    finally:
        await client.aclose()
    assert call.error_type is None, call.error
    assert call.streamed and call.model == "m"
    message = assistant_message(call)
    assert message is not None and message.text == "ok, noted"


async def test_concurrent_calls_over_a_small_pool_are_all_counted(port: int) -> None:
    client = _client(port, max_connections=16)
    try:
        calls = await asyncio.gather(*(client.chat([Message("user", f"question {i}")])
                                       for i in range(200)))
    finally:
        await client.aclose()
    assert [c.error_type for c in calls] == [None] * 200
    assert {assistant_message(c).text for c in calls} == {"ok, noted"}  # type: ignore[union-attr]
    ids = {c.parsed_response()["id"] for c in calls if c.response is not None}
    assert len(ids) == 200
    status, stats = await _get(port, "/stats")
    assert status == 200
    assert stats["chat"] == 200
    assert 1 <= stats["connections"] <= 17  # the pool's 16, plus the /stats request's own
    assert isinstance(stats["cpu_s"], float) and stats["cpu_s"] > 0


async def test_models_list_and_unknown_routes(port: int) -> None:
    status, models = await _get(port, "/v1/models")
    assert status == 200 and models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["fast"]  # type: ignore[index, union-attr]
    status, error = await _get(port, "/v1/nothing-here")
    assert status == 404
    assert error["error"]["code"] == 404  # type: ignore[index]
    _, stats = await _get(port, "/stats")
    assert stats["chat"] == 0


def test_chunked_request_body(port: int) -> None:
    body = json.dumps({"model": "chunky", "messages": [{"role": "user", "content": "hi"}]})
    half = len(body) // 2
    pieces = [body[:half].encode(), body[half:].encode()]
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
               b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
               b"Connection: close\r\n\r\n"
               + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n")
    got = _exchange(port, request)  # to EOF: the server closes as asked
    head, _, payload = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"connection: close" in head.lower()
    data = json.loads(payload)
    assert data["model"] == "chunky"
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "ok, noted"}
    assert data["usage"]["prompt_tokens"] == len(body) // 4


def test_pipelined_requests_are_answered_in_order(port: int) -> None:
    # A slow chat completion, then two instant GETs: the GETs must wait their turn.
    chat = json.dumps({"model": "first", "messages": []}).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
               % (len(chat), chat)
               + b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
               + b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")
    got = _exchange(port, request, b'"cpu_s"')
    order = [got.find(b'"model":"first"'), got.find(b'"owned_by"'), got.find(b'"cpu_s"')]
    assert -1 not in order and order == sorted(order), got


def test_http10_stream_is_close_delimited(port: int) -> None:
    chat = b'{"model": "old", "stream": true, "messages": []}'
    request = (b"POST /chat/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s"
               % (len(chat), chat))
    got = _exchange(port, request)
    head, _, payload = got.partition(b"\r\n\r\n")
    assert b"text/event-stream" in head and b"transfer-encoding" not in head.lower()
    events = [line[6:] for line in payload.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["model"] for c in chunks} == {"old"}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "ok, noted"


def test_malformed_request_gets_400_and_close(port: int) -> None:
    got = _exchange(port, b"NOT HTTP AT ALL\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400 ")
    assert json.loads(got.partition(b"\r\n\r\n")[2])["error"]["code"] == 400
