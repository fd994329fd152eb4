"""The model client against the scripted model over real HTTP, through each transport (aiohttp
and the openai SDK's client, which must behave alike): results, streaming reassembly, and the
retry policy for every fault class."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest

from interplay._plumbing import asgi
from interplay._plumbing.listener import AsgiServer
from interplay.config.endpoint import Endpoint
from interplay.errors import InterplayError
from interplay.model.client import ModelClient, Models, encode_body
from interplay.model.retries import Failure, RetryPolicy, parse_retry_after
from interplay.model.transport import redact_url
from interplay.model.wire import assistant_message
from interplay.testing import ScriptedModel, ScriptedReply
from interplay.values.records import Message

HI = [Message(role="user", content="hi there")]
TRANSPORTS = ["aiohttp", "openai"]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def fast(ep: Endpoint, transport: str = "aiohttp", **changes: object) -> Endpoint:
    return attrs.evolve(ep, **{"timeout_s": 1.0, "max_retries": 3, "retry_max_s": 8.0,
                               "transport": transport, **changes})


@pytest.mark.parametrize("stream", [False, True])
async def test_text_and_tool_call(stream: bool, transport: str) -> None:
    script = [ScriptedReply.text("hello you"),
              ScriptedReply.tool_call("lookup", {"q": "x"}, call_id="c1", text="checking")]
    async with ScriptedModel(script) as m:
        client = ModelClient(fast(m.endpoint, transport, sampling={"temperature": 0.5}))
        try:
            call = await client.chat(HI, stream=stream, temperature=0.1)
            assert call.error_type is None and call.status == 200
            assert call.request["temperature"] == 0.1
            assert call.streamed is stream
            assert call.parsed_response()["object"] == "chat.completion"
            assert assistant_message(call).text == "hello you"
            assert call.usage.completion_tokens == 2 and call.finish_reason == "stop"
            if stream:
                assert call.first_token_s is not None
            tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
            call = await client.chat(HI, tools=tools, stream=stream)
            msg = assistant_message(call)
            assert msg.text == "checking"
            assert msg.tool_calls[0].name == "lookup" and msg.tool_calls[0].id == "c1"
            assert msg.tool_calls[0].parsed_arguments() == {"q": "x"}
            assert call.finish_reason == "tool_calls"
            assert m.requests[1].body["tools"] == tools
        finally:
            await client.aclose()


async def test_the_wire_body_is_the_recorded_request(transport: str) -> None:
    """Messages are encoded once and spliced into each body; what the model receives must be
    exactly the request recorded, for Message objects, plain dicts and text beyond ASCII."""
    system = Message("system", "Réponds en français ✓")
    tool_msg = {"role": "tool", "content": "42 °C", "tool_call_id": "c1"}
    async with ScriptedModel([ScriptedReply.text("un"), ScriptedReply.text("deux")]) as m:
        client = ModelClient(fast(m.endpoint, transport, sampling={"temperature": 0.5}))
        try:
            first = await client.chat([system, *HI], max_tokens=7)
            second = await client.chat([system, *HI, tool_msg], stream=True,
                                       tools=[{"type": "function",
                                               "function": {"name": "t", "parameters": {}}}])
        finally:
            await client.aclose()
    assert [r.body for r in m.requests] == [first.request, second.request]
    assert m.requests[0].body["messages"][0]["content"] == "Réponds en français ✓"
    assert m.requests[1].body["stream"] is True and m.requests[1].body["temperature"] == 0.5
    # The same message is one shared dict in both recorded requests.
    assert first.request["messages"][0] is second.request["messages"][0]


def test_encode_body_matches_json_dumps() -> None:
    messages = [Message("user", "a \"quoted\" line\n"), {"role": "assistant", "content": None}]
    body = {"model": "m", "messages": [m.wire() if isinstance(m, Message) else m
                                       for m in messages], "temperature": 0}
    assert json.loads(encode_body(body, messages)) == body
    assert json.loads(encode_body({"messages": [], "model": "m"}, [])) == {"messages": [],
                                                                           "model": "m"}


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("fault", "error_type"), [
    (ScriptedReply.fault(429, retry_after=0.01), "rate_limited"),
    (ScriptedReply.fault(500), "server_error"),
    (ScriptedReply.fault(503), "server_error"),
    (ScriptedReply.hang(), "timeout"),
    (ScriptedReply.drop(), "connection_error"),
])
async def test_retryable_faults_are_retried(fault: ScriptedReply, error_type: str,
                                            stream: bool, transport: str) -> None:
    async with ScriptedModel([fault, ScriptedReply.text("ok")]) as m:
        client = ModelClient(fast(m.endpoint, transport, timeout_s=0.3))
        call = await client.chat(HI, stream=stream)
        await client.aclose()
    assert call.error_type is None, call.error
    assert call.attempts == 2 and len(m.requests) == 2
    assert assistant_message(call).text == "ok"

    async with ScriptedModel(lambda req: fault) as m:
        client = ModelClient(fast(m.endpoint, transport, timeout_s=0.3, max_retries=2))
        t0 = time.monotonic()
        call = await client.chat(HI, stream=stream)
        await client.aclose()
    assert call.error_type == error_type
    # A hang is asked once more, not again: two attempts that began no answer end the call.
    asked = 2 if fault.hangs else 3
    assert call.attempts == asked and len(m.requests) == asked
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize(("status", "error_type"), [
    (400, "bad_request"), (401, "auth_error"), (404, "not_found"), (422, "bad_request")])
async def test_client_errors_are_not_retried(status: int, error_type: str,
                                             transport: str) -> None:
    async with ScriptedModel(lambda req: ScriptedReply.fault(status)) as m:
        client = ModelClient(fast(m.endpoint, transport))
        call = await client.chat(HI)
        await client.aclose()
    assert call.error_type == error_type and call.status == status
    assert call.attempts == 1 and len(m.requests) == 1
    assert call.parsed_response()["error"]["message"] == f"scripted fault {status}"
    assert call.error == f"HTTP {status}: scripted fault {status}"


async def test_malformed_output_is_a_bad_response(transport: str) -> None:
    async with ScriptedModel(lambda req: ScriptedReply.malformed()) as m:
        client = ModelClient(fast(m.endpoint, transport))
        plain = await client.chat(HI)
        streamed = await client.chat(HI, stream=True)
        await client.aclose()
    assert plain.error_type == streamed.error_type == "bad_response"
    assert plain.attempts == streamed.attempts == 1 and len(m.requests) == 2


#: Data lines no reader of chat.completion chunks can fold: not JSON, not an object, or an
#: object whose fields have the wrong shape. Each follows one good chunk.
GARBLED_CHUNKS = [b"{not json", b"[1, 2]", b'{"id": "x"}', b'{"choices": "x"}',
                  b'{"choices": [7]}', b'{"choices": [{"delta": "x"}]}',
                  b'{"choices": [{"index": "0", "delta": {}}]}',
                  b'{"choices": [{"delta": {"content": 5}}]}',
                  b'{"choices": [{"delta": {"tool_calls": ["x"]}}]}',
                  b'{"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]}',
                  b'{"choices": [{"delta": {"tool_calls": [{"function": {"arguments": 1}}]}}]}',
                  b'{"choices": [], "usage": 3}']
GOOD_CHUNK = (b'{"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": '
              b'[{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]}')


@pytest.fixture
async def garbling(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """An upstream that streams one good chunk, then ``request.param``, then a proper end."""
    bad: bytes = request.param

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await asgi.start_sse(send)
        end = b'{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}'
        await send({"type": "http.response.body", "body": b"".join(
            b"data: " + line + b"\n\n" for line in (GOOD_CHUNK, bad, end, b"[DONE]"))})

    server = AsgiServer(app)
    await server.start()
    yield f"{server.url}/v1"
    await server.stop()


@pytest.mark.parametrize("garbling", GARBLED_CHUNKS, indirect=True)
async def test_a_garbled_stream_chunk_is_a_bad_response(garbling: str, transport: str) -> None:
    client = ModelClient(Endpoint(base_url=garbling, transport=transport, max_retries=2))
    try:
        call = await client.chat(HI, stream=True)
    finally:
        await client.aclose()
    assert (call.error_type, call.status, call.attempts) == ("bad_response", 200, 1)
    assert call.error.startswith("stream chunk")


async def test_connection_refused(transport: str) -> None:
    client = ModelClient(Endpoint(base_url="http://127.0.0.1:9/v1", max_retries=2,
                                  retry_max_s=5.0, timeout_s=1.0, transport=transport))
    call = await client.chat(HI)
    await client.aclose()
    assert call.error_type == "connection_error" and call.attempts == 3
    assert call.error.startswith("connection error sending the request: ")


async def test_retry_after_beyond_the_budget_stops_at_once(transport: str) -> None:
    async with ScriptedModel(lambda req: ScriptedReply.fault(429, retry_after=30)) as m:
        client = ModelClient(fast(m.endpoint, transport, retry_max_s=2.0))
        t0 = time.monotonic()
        call = await client.chat(HI)
        await client.aclose()
    assert call.error_type == "rate_limited" and call.attempts == 1
    assert time.monotonic() - t0 < 10


@pytest.mark.slow
async def test_retry_budget_bounds_the_attempts(transport: str) -> None:
    async with ScriptedModel(lambda req: ScriptedReply.fault(429, retry_after=0.4)) as m:
        client = ModelClient(fast(m.endpoint, transport, max_retries=50, retry_max_s=1.0,
                                  timeout_s=0.5))
        t0 = time.monotonic()
        call = await client.chat(HI)
        await client.aclose()
    assert call.error_type == "rate_limited"
    assert 2 <= call.attempts <= 3
    # Retry-After was waited each time, and no wait ran past the budget.
    assert 0.4 * (call.attempts - 1) <= time.monotonic() - t0 < 1.0 + 0.5


def test_parse_retry_after() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    later = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 100))
    assert 90 < parse_retry_after(later) <= 101


async def test_models_pool_shares_clients() -> None:
    async with ScriptedModel() as m:
        models = Models(max_connections=8)
        a = models.client(m.endpoint)
        assert models.client(attrs.evolve(m.endpoint)) is a
        assert models.client(attrs.evolve(m.endpoint, model="other")) is not a
        call = await a.chat(HI)
        await models.aclose()
    assert assistant_message(call).text == "echo: hi there"


async def test_a_closed_remote_client_reopens_on_its_next_call(transport: str) -> None:
    async with ScriptedModel() as m:
        client = ModelClient(fast(m.endpoint, transport))
        first = await client.chat(HI)
        await client.aclose()
        again = await client.chat(HI, stream=True)
        await client.aclose()
    assert first.error_type is None and again.error_type is None, again.error
    assert assistant_message(again).text == "echo: hi there"
    assert len(m.requests) == 2  # both went to the scripted model, none elsewhere
    assert client.endpoint.base_url == m.base_url


def test_a_client_follows_a_new_loop_and_refuses_a_second_running_one(transport: str) -> None:
    with ScriptedModel() as m:
        client = ModelClient(fast(m.endpoint, transport))
        # A script calling asyncio.run twice: the first loop is closed, the client goes on.
        assert asyncio.run(client.chat(HI)).error_type is None
        assert asyncio.run(client.chat(HI)).error_type is None

        async def elsewhere() -> None:
            await client.chat(HI)

        async def main() -> None:
            await client.chat(HI)
            errors: list[BaseException] = []

            def other_thread() -> None:
                try:
                    asyncio.run(elsewhere())
                except BaseException as exc:
                    errors.append(exc)

            t = threading.Thread(target=other_thread)
            t.start()
            await asyncio.to_thread(t.join)
            await client.aclose()
            assert len(errors) == 1 and isinstance(errors[0], InterplayError)
            assert "another event loop" in str(errors[0])

        asyncio.run(main())
    assert len(m.requests) == 3


def test_redact_url_masks_credentials() -> None:
    text = "connection error: cannot reach https://user:sk-secret@api.example.com/v1 (x)"
    assert redact_url(text) == "connection error: cannot reach https://***@api.example.com/v1 (x)"
    assert redact_url("http://127.0.0.1:9/v1") == "http://127.0.0.1:9/v1"


def test_the_policy_waits_with_full_jitter_and_honours_retry_after_in_the_budget() -> None:
    policy = RetryPolicy(Endpoint(base_url="http://127.0.0.1:9/v1", max_retries=3, retry_max_s=10.0,
                             timeout_s=1.0))
    assert policy.delay(Failure("bad_request", "no", 400), 1, 0.0) is None
    assert policy.delay(Failure("server_error", "x", 500, retry_after=1.5), 1, 0.0) == 1.5
    assert policy.delay(Failure("server_error", "x", 500, retry_after=9), 1, 2.0) is None
    assert policy.delay(Failure("timeout", "x"), 4, 0.0) is None  # three retries made
    final = Failure("connection_error", "x")
    final.final = True
    assert policy.delay(final, 1, 0.0) is None
    waits = [policy.delay(Failure("timeout", "x"), 3, 0.0) for _ in range(300)]
    assert all(w is not None and 0 <= w <= 2.0 for w in waits)
    assert min(waits) < 0.5 < 1.5 < max(waits)  # type: ignore[type-var]


def test_with_the_default_settings_a_hung_request_is_retried() -> None:
    ep = Endpoint(base_url="http://127.0.0.1:9/v1")
    # The first attempt hung for the whole timeout: a retry must still fit in the budget.
    assert RetryPolicy(ep).delay(Failure("timeout", "timed out"), 1, ep.timeout_s) is not None
