"""The interception server's Messages route over real HTTP, read by the anthropic SDK as a
client: its types validate every body and event we send, its stream parser reads our SSE, and
the scripted model (the test double for the model) sees the Chat Completions each request
became. Then the translation's rules one by one, refusals, token counting and the records."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import attrs
import httpx
import pydantic
import pytest
from anthropic.types import Message as AnthropicMessage
from anthropic.types import MessageTokensCount, RawMessageStreamEvent

from interplay.interception import InterceptionServer, Limits
from interplay.model import assistant_message, request_messages, request_tool_names
from interplay.model import messages as ms
from interplay.model.client import ModelClient
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, captured_log
from interplay.values.records import ModelCall

USER = [{"role": "user", "content": "hello there"}]
LOOKUP = {"name": "lookup", "description": "Look a word up.",
          "input_schema": {"type": "object", "properties": {"word": {"type": "string"}},
                           "required": ["word"]}}
EVENTS = pydantic.TypeAdapter(RawMessageStreamEvent)


@attrs.define
class Rig:
    model: ScriptedModel
    server: InterceptionServer
    calls: list[ModelCall]
    secret: str
    http: httpx.AsyncClient
    #: The SDK clients made, closed with the rig: one left open is closed by its finalizer
    #: in whichever test's loop collects it, after its own loop has gone.
    clients: list[anthropic.AsyncAnthropic] = attrs.Factory(list)

    def sdk(self, key: str | None = None) -> anthropic.AsyncAnthropic:
        client = anthropic.AsyncAnthropic(base_url=self.server.root_url,
                                          api_key=key or self.secret, max_retries=0)
        self.clients.append(client)
        return client

    async def post(self, path: str, body: Any, *, headers: dict[str, str] | None = None,
                   **kw: Any) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await self.http.post(self.server.root_url + path, content=content, headers={
            "x-api-key": self.secret, "content-type": "application/json",
            **(headers or {})}, **kw)

    def upstream(self, i: int = -1) -> dict[str, Any]:
        """The Chat Completions body the scripted model received."""
        return self.model.requests[i].body


@pytest.fixture
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    script = getattr(request, "param", None)
    async with ScriptedModel(script) as m:
        client = ModelClient(attrs.evolve(m.endpoint, max_retries=0, timeout_s=5))
        calls: list[ModelCall] = []
        async with InterceptionServer(limits=Limits(max_body_mb=1)) as srv:
            route = srv.open_trace(client=client, on_call=calls.append)
            async with httpx.AsyncClient(timeout=10) as http:
                rig = Rig(m, srv, calls, route.secret, http)
                try:
                    yield rig
                finally:
                    for sdk in rig.clients:
                        await sdk.close()
        await client.aclose()


def sse_events(text: str) -> list[dict[str, Any]]:
    """The events of an SSE body, each checked: its ``event:`` line names its type, and the
    anthropic SDK's event types validate its data."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        data = json.loads(lines[1][6:])
        assert lines[0][7:] == data["type"]
        if data["type"] != "error":
            EVENTS.validate_python(data)
        out.append(data)
    return out


def tool_user(request: ScriptedRequest) -> ScriptedReply | str:
    """Calls ``lookup`` when offered it; answers the tool's result once it is back."""
    results = [m for m in request.messages if m["role"] == "tool"]
    if results:
        return f"The tool said: {results[-1]['content']}"
    if request.body.get("tools"):
        return ScriptedReply.tool_call("lookup", {"word": "zebra"}, call_id="toolu_7",
                                       text="Let me look.")
    return "echo: " + request.last_user_text()


# -- the SDK as a client --------------------------------------------------------------------------


async def test_a_whole_message_and_a_streamed_one(rig: Rig) -> None:
    sdk = rig.sdk()
    whole = await sdk.messages.create(model="claude-x", max_tokens=64, system="Be brief.",
                                      messages=USER)
    async with sdk.messages.stream(model="claude-x", max_tokens=64, messages=USER) as stream:
        kinds = [event.type async for event in stream]
        streamed = await stream.get_final_message()
    await sdk.close()
    for message in (whole, streamed):
        assert [b.type for b in message.content] == ["text"]
        assert message.content[0].text == "echo: hello there"  # type: ignore[union-attr]
        assert (message.stop_reason, message.model, message.role) == ("end_turn", "claude-x",
                                                                      "assistant")
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (4, 3)
    # The final usage arrives with message_delta, as a Messages client reads it.
    assert (streamed.usage.input_tokens, streamed.usage.output_tokens) == (2, 3)
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[-3:-1] == ["content_block_stop", "message_delta"]
    # The record: the request as the program sent it, the message as it got it.
    assert [(c.api, c.streamed, c.error_type) for c in rig.calls] == [
        ("messages", False, None), ("messages", True, None)]
    assert rig.calls[0].request["system"] == "Be brief."
    for call in rig.calls:
        AnthropicMessage.model_validate(call.parsed_response())
    assert rig.calls[1].parsed_response()["id"] == streamed.id
    assert rig.calls[1].usage is not None and rig.calls[1].usage.total_tokens == 5
    # The upstream got Chat Completions, as the endpoint's model.
    assert rig.upstream(0)["messages"] == [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "hello there"}]
    assert rig.upstream(0)["max_tokens"] == 64 and rig.upstream(0)["model"] == "scripted"
    assert rig.upstream(1)["stream"] is True


@pytest.mark.parametrize("rig", [tool_user], indirect=True)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_call_and_its_result(rig: Rig, stream: bool) -> None:
    sdk = rig.sdk()
    ask: dict[str, Any] = {"model": "m", "max_tokens": 64, "tools": [LOOKUP],
                           "messages": [{"role": "user", "content": "What is a zebra?"}]}
    if stream:
        async with sdk.messages.stream(**ask) as s:
            first = await s.get_final_message()
    else:
        first = await sdk.messages.create(**ask)
    assert first.stop_reason == "tool_use"
    text, use = first.content
    assert text.type == "text" and text.text == "Let me look."
    assert use.type == "tool_use" and (use.id, use.name, use.input) == (
        "toolu_7", "lookup", {"word": "zebra"})
    ask["messages"] += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                        {"role": "user", "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_7",
                             "content": [{"type": "text", "text": "a striped horse"}]},
                            {"type": "text", "text": "Short, please."}]}]
    second = await sdk.messages.create(**ask)
    await sdk.close()
    assert second.content[0].text == "The tool said: a striped horse"  # type: ignore[union-attr]
    # Upstream: the tool as a function, the call on the assistant message, the result as a
    # tool message right after it, then the user's own words.
    upstream = rig.upstream()
    assert upstream["tools"] == [{"type": "function", "function": {
        "name": "lookup", "description": "Look a word up.",
        "parameters": LOOKUP["input_schema"]}}]
    assert upstream["messages"][1:] == [
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "toolu_7", "type": "function",
             "function": {"name": "lookup", "arguments": '{"word": "zebra"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_7", "content": "a striped horse"},
        {"role": "user", "content": "Short, please."}]
    # The records read back as the conversation the model saw.
    call = rig.calls[-1]
    assert [m.role for m in request_messages(call)] == ["user", "assistant", "tool", "user"]
    assert request_tool_names(call) == ["lookup"]
    said = assistant_message(rig.calls[0])
    assert said is not None and [(c.id, c.name, c.arguments) for c in said.tool_calls] == [
        ("toolu_7", "lookup", '{"word": "zebra"}')]


async def test_the_stream_is_the_exact_event_sequence(rig: Rig) -> None:
    rig.model._handler = lambda _: ScriptedReply.tool_call("lookup", {"word": "x"},
                                                            call_id="c1", text="On it.")
    r = await rig.post("/v1/messages?beta=true", {"model": "m", "max_tokens": 9, "stream": True,
                                                   "tools": [LOOKUP], "messages": USER})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    shape = [(e["type"], (e.get("delta") or e.get("content_block") or {}).get("type"))
             for e in events]
    assert shape == [("message_start", None),
                     ("content_block_start", "text"), ("content_block_delta", "text_delta"),
                     ("content_block_delta", "text_delta"), ("content_block_stop", None),
                     ("content_block_start", "tool_use"),
                     ("content_block_delta", "input_json_delta"), ("content_block_stop", None),
                     ("message_delta", None), ("message_stop", None)]
    assert [e.get("index") for e in events[1:8]] == [0, 0, 0, 0, 1, 1, 1]
    assert events[6]["delta"]["partial_json"] == '{"word":"x"}'
    assert events[8]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[8]["usage"]["output_tokens"] == 3


@pytest.mark.parametrize("rig", [lambda _: ScriptedReply.text("Hi.").unstreamed()],
                         indirect=True)
async def test_a_streamed_request_answered_with_json_still_streams(rig: Rig) -> None:
    r = await rig.post("/v1/messages", {"model": "m", "max_tokens": 9, "stream": True,
                                        "messages": USER})
    events = sse_events(r.text)
    assert [e["type"] for e in events] == ["message_start", "content_block_start",
                                           "content_block_delta", "content_block_stop",
                                           "message_delta", "message_stop"]
    assert events[2]["delta"]["text"] == "Hi."


# -- the rules ------------------------------------------------------------------------------------

CLAUDE_CODE = {
    "model": "smol", "max_tokens": 32000, "stream": False,
    "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328.ace;"},
               {"type": "text", "text": "You are a Claude agent.",
                "cache_control": {"type": "ephemeral"}},
               {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "Say hi"},
        {"role": "system", "content": [{"type": "text", "text": "# Environment\nlinux"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm",
                                           "signature": "s"},
                                          {"type": "text", "text": "Hi."}]},
        {"role": "user", "content": [{"type": "text", "text": "Again",
                                      "cache_control": {"type": "ephemeral"}}]}],
    "tools": [{"name": "DeferredToolPlaceholder", "description": "never call",
               "input_schema": {"type": "object", "properties": {}}, "defer_loading": True},
              {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
              LOOKUP],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    "metadata": {"user_id": "{\"device_id\": \"abc\"}"},
    "thinking": {"type": "adaptive", "display": "omitted"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "high"},
    "stop_sequences": ["\n\nHuman:"], "temperature": 0.3, "top_k": 40,
}


def test_what_claude_code_sends_becomes_chat_completions() -> None:
    chat, dropped = ms.messages_to_chat(CLAUDE_CODE)
    assert chat["messages"] == [
        # The billing header is a header, not prompt text; cache_control is the upstream's.
        {"role": "system", "content": "You are a Claude agent.\n\nYou are terse."},
        {"role": "user", "content": "Say hi"},
        # Claude Code's environment block, kept where it was sent.
        {"role": "system", "content": "# Environment\nlinux"},
        {"role": "assistant", "content": "Hi."},  # its thinking is not this model's
        {"role": "user", "content": "Again"}]
    assert [t["function"]["name"] for t in chat["tools"]] == ["lookup"]
    assert (chat["tool_choice"], chat["parallel_tool_calls"]) == ("required", False)
    assert (chat["max_tokens"], chat["stop"], chat["temperature"], chat["top_k"]) == (
        32000, ["\n\nHuman:"], 0.3, 40)
    assert "stream" not in chat and "metadata" not in chat and "thinking" not in chat
    assert sorted(dropped) == ["context_management", "metadata", "output_config.effort",
                               "thinking", "tools[DeferredToolPlaceholder:defer_loading]",
                               "tools[web_search:web_search_20250305]"]


def test_tool_choices() -> None:
    def choice(value: dict[str, Any]) -> Any:
        chat, _ = ms.messages_to_chat({"messages": USER, "tools": [LOOKUP],
                                       "tool_choice": value})
        return chat["tool_choice"], chat.get("parallel_tool_calls")

    assert choice({"type": "auto"}) == ("auto", None)
    assert choice({"type": "none"}) == ("none", None)
    assert choice({"type": "tool", "name": "lookup"}) == (
        {"type": "function", "function": {"name": "lookup"}}, None)


def test_images_tool_errors_and_structured_output() -> None:
    chat, _ = ms.messages_to_chat({"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup",
                                           "input": {"word": "é"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": []},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                         "data": "QUJD"}},
            {"type": "text", "text": "What is this?"}]}],
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}})
    assert chat["messages"] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"word": "é"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "error"},
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
            {"type": "text", "text": "What is this?"}]}]
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "output", "schema": {"type": "object"}}}


def test_answers_become_messages() -> None:
    request = {"model": "asked", "stop_sequences": ["STOP"]}

    def answer(choice: dict[str, Any], usage: Any = None) -> dict[str, Any]:
        message = ms.chat_to_message({"choices": [choice], "usage": usage}, request)
        AnthropicMessage.model_validate(message)
        return message

    # vLLM names the stop string that ended the text; without it the end is the model's.
    said = answer({"message": {"content": "a"}, "finish_reason": "stop", "stop_reason": "STOP"})
    assert (said["stop_reason"], said["stop_sequence"]) == ("stop_sequence", "STOP")
    assert answer({"message": {"content": "a"}, "finish_reason": "stop"})["stop_reason"] == \
        "end_turn"
    assert answer({"message": {"content": "a"}, "finish_reason": "length"})["stop_reason"] == \
        "max_tokens"
    # Arguments that are not a JSON object reach the program as an empty input.
    broken = answer({"message": {"content": None, "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": "{not json"}}]},
        "finish_reason": "tool_calls"})
    assert broken["content"] == [{"type": "tool_use", "id": "c", "name": "f", "input": {}}]
    assert broken["stop_reason"] == "tool_use"
    # Prompt tokens the upstream read from its cache are cache reads, as Anthropic counts.
    usage = answer({"message": {"content": ""}}, {
        "prompt_tokens": 100, "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 60}})["usage"]
    assert usage == {"input_tokens": 40, "output_tokens": 7, "cache_creation_input_tokens": 0,
                     "cache_read_input_tokens": 60}


async def test_dropped_fields_are_said_once_per_trace_by_name(rig: Rig) -> None:
    body = {**CLAUDE_CODE, "tools": [LOOKUP], "tool_choice": {"type": "auto"}}
    with captured_log("info") as out:
        for _ in range(2):
            r = await rig.post("/v1/messages", body)
            assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    said = [line for line in lines if line["event"] == "interception.fields_not_forwarded"]
    assert len(said) == 1
    assert said[0]["param_names"] == ["context_management", "metadata", "output_config.effort",
                                      "thinking"]
    assert "You are terse" not in out.getvalue() and rig.secret not in out.getvalue()


# -- refusals -------------------------------------------------------------------------------------


def anthropic_error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == kind
    assert set(body["error"]) == {"type", "message"} and "\n" not in body["error"]["message"]
    return str(body["error"]["message"])


BAD = {
    "no max_tokens": ({"model": "m", "messages": USER}, "max_tokens"),
    "no messages": ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),
    "a role of its own": ({"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
                          "role must be user or assistant"),
    "a block without a type": ({"max_tokens": 5, "messages": [
        {"role": "user", "content": [{"text": "x"}]}]}, "type None"),
    "a tool_result without its id": ({"max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
        "tool_use_id"),
    "a document": ({"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "data": "x"}}]}]}, "document"),
    "an image in a tool result": ({"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "image", "source": {"type": "base64", "data": "QQ=="}}]}]}]},
        "tool message holds text"),
    "mcp servers": ({"max_tokens": 5, "messages": USER,
                     "mcp_servers": [{"type": "url", "url": "http://x"}]}, "mcp_servers"),
    "a tool without a schema": ({"max_tokens": 5, "messages": USER,
                                 "tools": [{"name": "f"}]}, "input_schema"),
    "system a number": ({"max_tokens": 5, "messages": USER, "system": 3}, "system"),
    "temperature a string": ({"max_tokens": 5, "messages": USER, "temperature": "hot"},
                             "temperature"),
    "stop_sequences of numbers": ({"max_tokens": 5, "messages": USER, "stop_sequences": [1]},
                                  "stop_sequences"),
    "not JSON": (b'{"messages": [', "not valid JSON"),
}


@pytest.mark.parametrize("case", list(BAD))
async def test_a_malformed_request_is_a_400_that_records_nothing(rig: Rig, case: str) -> None:
    body, says = BAD[case]
    message = anthropic_error(await rig.post("/v1/messages", body), 400,
                              "invalid_request_error")
    assert says in message
    assert rig.calls == [] and rig.model.requests == []


async def test_keys_and_routes(rig: Rig) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": USER}
    other = rig.server.open_trace(client=ModelClient(rig.model.endpoint),
                                  on_call=lambda _: None)
    with captured_log("debug") as log:
        # The key as a Messages client sends it, and as a bearer.
        assert (await rig.post("/v1/messages", body)).status_code == 200
        bearer = await rig.http.post(rig.server.root_url + "/v1/messages", json=body,
                                     headers={"authorization": f"Bearer {rig.secret}"})
        assert bearer.status_code == 200
        # No key, a wrong one, another trace's, a closed trace's: refused, in Anthropic's
        # shape.
        rig.server.close_trace(other.secret)
        for key in ("", "wrong", other.secret):
            anthropic_error(await rig.post("/v1/messages", body, headers={"x-api-key": key}),
                            401, "authentication_error")
        with pytest.raises(anthropic.AuthenticationError):
            await rig.sdk("wrong").messages.create(**body)
        anthropic_error(await rig.http.get(rig.server.root_url + "/v1/messages",
                                           headers={"x-api-key": rig.secret}), 405,
                        "invalid_request_error")
        big = {**body, "pad": "x" * (1 << 20)}
        assert "1 MB" in anthropic_error(await rig.post("/v1/messages", big), 413,
                                         "request_too_large")
        # A malformed block, with the trace's key in the path as well.
        anthropic_error(await rig.http.post(
            f"{rig.server.root_url}/t/{rig.secret}/v1/messages", json={**body, "messages": [
                {"role": "user", "content": [{"type": "text", "text": 7}]}]}), 400,
            "invalid_request_error")
    assert len(rig.calls) == 2
    # Neither key nor any message text reaches the log, answered or refused.
    said = log.getvalue()
    assert "interception.refused" in said
    assert rig.secret not in said and other.secret not in said and "hello there" not in said


@pytest.mark.parametrize("rig", [[ScriptedReply.fault(503), ScriptedReply.drop("half an")]],
                         indirect=True)
async def test_upstream_failures_reach_the_program_as_messages_errors(rig: Rig) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": USER}
    anthropic_error(await rig.post("/v1/messages", body), 503, "overloaded_error")
    r = await rig.post("/v1/messages", {**body, "stream": True})
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "error"
    assert events[-1]["error"]["type"] == "api_error"
    assert [c.error_type for c in rig.calls] == ["server_error", "connection_error"]


async def test_identical_requests_in_flight_are_one_call(rig: Rig) -> None:
    rig.model._handler = lambda _: ScriptedReply.text("once", latency_s=0.3)
    body = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
    a, b = await asyncio.gather(rig.post("/v1/messages", body), rig.post("/v1/messages", body))
    assert a.text == b.text and len(rig.model.requests) == 1 and len(rig.calls) == 1


# -- counting tokens ------------------------------------------------------------------------------


async def test_count_tokens_asks_the_endpoints_tokenizer_and_records_nothing(rig: Rig) -> None:
    sdk = rig.sdk()
    counted = await sdk.messages.count_tokens(model="m", system="Be brief.", messages=USER,
                                              tools=[LOOKUP])
    await sdk.close()
    MessageTokensCount.model_validate(counted.model_dump())
    # What a completion of the same prompt reports as its prompt tokens.
    whole = await rig.post("/v1/messages", {"model": "m", "max_tokens": 5, "system": "Be brief.",
                                            "messages": USER})
    assert counted.input_tokens == whole.json()["usage"]["input_tokens"] == 4
    assert rig.model.tokenized == 1 and len(rig.calls) == 1


async def test_count_tokens_of_an_endpoint_that_cannot_count() -> None:
    async def no_tokenizer(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"detail": "Not Found"}'})

    from interplay._plumbing.listener import AsgiServer
    from interplay.config.endpoint import Endpoint

    upstream = AsgiServer(no_tokenizer, port=0, graceful_s=0.1)
    await upstream.start()
    client = ModelClient(Endpoint(base_url=f"{upstream.url}/v1", model="m", max_retries=0))
    try:
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=client, on_call=lambda _: None)
            async with httpx.AsyncClient() as http:
                r = await http.post(srv.root_url + "/v1/messages/count_tokens",
                                    json={"model": "m", "messages": USER},
                                    headers={"x-api-key": route.secret})
    finally:
        await client.aclose()
        await upstream.stop()
    assert "/tokenize" in anthropic_error(r, 404, "not_found_error")


# -- programs that go away ----------------------------------------------------------------------


async def wait_until(check: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("rig", [lambda _: ScriptedReply.hang()], indirect=True)
async def test_a_half_open_stream_cancels_its_call_and_records_nothing(rig: Rig) -> None:
    body = json.dumps({"model": "m", "max_tokens": 5, "messages": USER,
                       "stream": True}).encode()
    port = int(rig.server.root_url.rsplit(":", 1)[1])
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/messages?beta=true HTTP/1.1\r\nhost: x\r\n"
                 b"x-api-key: " + rig.secret.encode() + b"\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    await wait_until(lambda: len(rig.model.requests) == 1, "the request reached the model")
    writer.close()  # the program goes away mid-answer
    await wait_until(lambda: rig.model.abandoned == 1, "the upstream connection closed")
    await wait_until(lambda: rig.server.inflight == 0, "the call ended")
    assert rig.calls == []


@pytest.mark.parametrize("rig", [lambda _: ScriptedReply.hang()], indirect=True)
async def test_closing_a_trace_answers_its_waiting_requests_in_anthropics_shape(
        rig: Rig) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": USER}
    waiting = [asyncio.create_task(rig.post("/v1/messages", body)) for _ in range(2)]
    await wait_until(lambda: rig.server.waiting == 2 and len(rig.model.requests) == 1,
                     "both requests wait on one call")
    rig.server.close_trace(rig.secret)
    for answer in await asyncio.gather(*waiting):
        assert "closed" in anthropic_error(answer, 410, "invalid_request_error")
    assert rig.calls == [] and len(rig.model.requests) == 1
