"""The interception server over real HTTP: the openai SDK through it (Chat Completions and
Responses, streamed and not), refusals, coalescing, failures, Responses<->Chat translation."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import attrs
import httpx
import openai
import pytest

from interplay.config import loading as config
from interplay.config.endpoint import Endpoint
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.errors import InterplayError
from interplay.interception import InterceptionServer, Limits
from interplay.model import assistant_message, request_messages, request_tool_names
from interplay.model.client import ModelClient, Models
from interplay.run.episode import LiveEpisodeContext, RunResources, run_episode
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, captured_log
from interplay.values.records import ModelCall, Task

CHAT = {"model": "whatever", "messages": [{"role": "user", "content": "hello there"}]}


@attrs.define
class Rig:
    model: ScriptedModel
    server: InterceptionServer
    client: ModelClient
    calls: list[ModelCall]
    secret: str
    base_url: str
    http: httpx.AsyncClient

    def sdk(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.secret, max_retries=0)

    async def post(self, path: str, content: bytes | str, secret: str | None = "",
                   **kw: Any) -> httpx.Response:
        headers = {"content-type": "application/json"}
        if secret is not None:
            headers["authorization"] = f"Bearer {secret or self.secret}"
        return await self.http.post(self.server.root_url + path, content=content,
                                    headers=headers, **kw)


@pytest.fixture
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    script = getattr(request, "param", None)
    async with ScriptedModel(script) as m:
        client = ModelClient(attrs.evolve(m.endpoint, max_retries=0, timeout_s=0.5))
        calls: list[ModelCall] = []
        async with InterceptionServer(limits=Limits(max_body_mb=1)) as srv:
            route = srv.open_trace(client=client, on_call=calls.append)
            async with httpx.AsyncClient(timeout=10) as http:
                yield Rig(m, srv, client, calls, route.secret, route.base_url, http)
        await client.aclose()


async def test_sdk_chat_completions(rig: Rig) -> None:
    sdk = rig.sdk()
    r = await sdk.chat.completions.create(**CHAT)
    assert r.choices[0].message.content == "echo: hello there"
    parts = []
    stream = await sdk.chat.completions.create(**CHAT, stream=True)
    async for chunk in stream:
        parts += [c.delta.content or "" for c in chunk.choices]
    assert "".join(parts) == "echo: hello there"
    await sdk.close()
    assert [c.streamed for c in rig.calls] == [False, True]
    assert all(c.api == "chat.completions" and c.error_type is None for c in rig.calls)
    assert rig.calls[0].request == CHAT  # as the program sent it
    assert rig.calls[1].parsed_response()["choices"][0]["message"]["content"] == "echo: hello there"
    assert rig.calls[1].usage.total_tokens > 0
    # the upstream got the endpoint's model, whatever the program named
    assert {r.body["model"] for r in rig.model.requests} == {"scripted"}


@pytest.mark.slow
async def test_sdk_responses(rig: Rig) -> None:
    sdk = rig.sdk()
    r = await sdk.responses.create(model="m", input="hello there")
    assert r.output_text == "echo: hello there" and r.usage.output_tokens == 3
    types = []
    text = ""
    async with sdk.responses.stream(model="m", input="hello again") as stream:
        async for ev in stream:
            types.append(ev.type)
        final = await stream.get_final_response()
        text = final.output_text
    await sdk.close()
    assert text == "echo: hello again"
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.output_item.done" in types and "response.output_text.delta" in types
    assert [c.api for c in rig.calls] == ["responses", "responses"]
    assert rig.calls[1].request["input"] == "hello again"
    assert rig.calls[1].parsed_response()["object"] == "response"
    assert rig.calls[1].usage.completion_tokens == 3


async def test_path_secret_and_models(rig: Rig) -> None:
    route_url = rig.server.root_url + f"/t/{rig.secret}/v1"
    sdk = openai.AsyncOpenAI(base_url=route_url, api_key="ignored", max_retries=0)
    r = await sdk.chat.completions.create(**CHAT)
    models = await sdk.models.list()
    await sdk.close()
    assert r.choices[0].message.content == "echo: hello there"
    assert [m.id for m in models.data] == ["scripted"]


async def test_refusals(rig: Rig) -> None:
    body = json.dumps(CHAT)
    assert (await rig.post("/v1/chat/completions", body, secret=None)).status_code == 401
    assert (await rig.post("/v1/chat/completions", body, secret="wrong")).status_code == 401
    assert (await rig.post("/t/wrong/v1/responses", body, secret=None)).status_code == 401
    assert (await rig.http.get(rig.server.root_url + "/v1/models")).status_code == 401
    assert rig.calls == [] and rig.model.requests == []
    for path, bad in [("/v1/chat/completions", "{not json"),
                      ("/v1/chat/completions", "[1, 2]"),
                      ("/v1/chat/completions", json.dumps({"messages": "hi"})),
                      ("/v1/chat/completions", json.dumps({"messages": [{"content": "x"}]})),
                      ("/v1/responses", json.dumps({"model": "m"})),
                      ("/v1/responses", json.dumps({"input": 5})),
                      ("/v1/responses", json.dumps({"input": [{"type": "message",
                                                               "role": "robot"}]})),
                      ("/v1/responses", json.dumps({"input": [{"type": "function_call"}]}))]:
        r = await rig.post(path, bad)
        assert r.status_code == 400, (path, bad)
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    big = json.dumps({**CHAT, "pad": "x" * (2 << 20)})
    assert (await rig.post("/v1/chat/completions", big)).status_code == 413
    assert (await rig.post("/v1/completions", json.dumps(CHAT))).status_code == 404
    assert (await rig.post("/nowhere", "")).status_code == 404
    assert rig.calls == [] and rig.model.requests == []
    # and the server still answers
    r = await rig.post("/v1/chat/completions", json.dumps(CHAT))
    assert r.status_code == 200 and len(rig.calls) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_previous_response_id_it_cannot_honour_is_refused(rig: Rig,
                                                                    stream: bool) -> None:
    """The server keeps no earlier responses and the endpoint serves Chat Completions: the
    earlier turns cannot be found, and answering without them would be a silent wrong
    answer."""
    body = {"model": "m", "input": "and then?", "previous_response_id": "resp_1",
            "stream": stream}
    with captured_log("info") as log_out:
        r = await rig.post("/v1/responses", json.dumps(body))
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (
        "previous_response_id", "unsupported_parameter", "invalid_request_error")
    assert "send the whole conversation in 'input'" in error["message"]
    assert 'api = "responses"' in error["message"]
    assert rig.calls == [] and rig.model.requests == []
    [refused] = [json.loads(x) for x in log_out.getvalue().splitlines()
                 if json.loads(x)["event"] == "interception.refused"]
    assert refused["reason_code"] == "unsupported_parameter"
    assert "and then?" not in log_out.getvalue()
    # null is taken as absent, as the OpenAI API takes it
    r = await rig.post("/v1/responses", json.dumps({**body, "previous_response_id": None}))
    assert r.status_code == 200 and len(rig.calls) == 1


async def test_a_previous_response_id_goes_to_an_endpoint_that_serves_responses(
        passthrough: Passthrough) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(passthrough.base_url + "/responses",
                            json={"input": "and then?", "previous_response_id": "resp_1"},
                            headers={"authorization": f"Bearer {passthrough.secret}"})
    assert r.status_code == 200
    assert passthrough.model.requests[0].body["previous_response_id"] == "resp_1"


async def test_closed_trace_is_refused(rig: Rig) -> None:
    rig.server.close_trace(rig.secret)
    assert (await rig.post("/v1/chat/completions", json.dumps(CHAT))).status_code == 401


@pytest.mark.slow
@pytest.mark.parametrize(
    "rig", [lambda req: ScriptedReply.text("slow answer", latency_s=0.4)], indirect=True)
@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("stream", [False, True])
async def test_identical_inflight_requests_are_coalesced(rig: Rig, stream: bool,
                                                         api: str) -> None:
    if api == "chat":
        path, body = "/v1/chat/completions", {**CHAT, "stream": stream}
    else:
        path, body = "/v1/responses", {"model": "m", "input": "hi", "stream": stream}
    raw = json.dumps(body).encode()
    first, second = await asyncio.gather(rig.post(path, raw), rig.post(path, raw))
    assert first.status_code == second.status_code == 200
    assert first.content == second.content and b"slow" in first.content
    assert len(rig.model.requests) == 1 and len(rig.calls) == 1
    # once finished, the same body is a new call
    await rig.post(path, raw)
    assert len(rig.model.requests) == 2 and len(rig.calls) == 2


@pytest.mark.parametrize("rig", [lambda req: ScriptedReply.fault(503)], indirect=True)
async def test_upstream_failure_is_returned_and_recorded(rig: Rig) -> None:
    r = await rig.post("/v1/chat/completions", json.dumps(CHAT))
    assert r.status_code == 503 and r.json()["error"]["code"] == "server_error"
    r = await rig.post("/v1/responses", json.dumps({"input": "x", "stream": True}))
    assert r.status_code == 503
    assert [c.error_type for c in rig.calls] == ["server_error", "server_error"]
    assert [c.api for c in rig.calls] == ["chat.completions", "responses"]


@pytest.mark.parametrize("rig", [lambda req: ScriptedReply.hang()], indirect=True)
async def test_upstream_timeout_is_a_gateway_timeout(rig: Rig) -> None:
    r = await rig.post("/v1/chat/completions", json.dumps(CHAT))
    assert r.status_code == 504
    assert [c.error_type for c in rig.calls] == ["timeout"]


TOOL_SCRIPT = [ScriptedReply.tool_call("exec_command", {"cmd": "echo hi"}, call_id="c9",
                                       text="running it"),
               ScriptedReply.text("it printed hi")]


@pytest.mark.parametrize("rig", [TOOL_SCRIPT], indirect=True)
@pytest.mark.parametrize("stream", [False, True])
async def test_responses_tool_call_round_trip(rig: Rig, stream: bool) -> None:
    tools = [{"type": "function", "name": "exec_command", "description": "run",
              "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
             {"type": "web_search"}]
    history: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                         "text": "say hi"}]}]
    sdk = rig.sdk()
    if stream:
        async with sdk.responses.stream(model="m", input=history, tools=tools) as s:
            done_items = [ev.item for ev in [e async for e in s]
                          if ev.type == "response.output_item.done"]
            first = await s.get_final_response()
        assert [i.type for i in done_items] == ["message", "function_call"]
    else:
        first = await sdk.responses.create(model="m", input=history, tools=tools)
    call = next(i for i in first.output if i.type == "function_call")
    assert call.call_id == "c9" and json.loads(call.arguments) == {"cmd": "echo hi"}
    history += [{"type": "function_call", "call_id": call.call_id, "name": call.name,
                 "arguments": call.arguments},
                {"type": "function_call_output", "call_id": "c9", "output": "hi\n"}]
    second = await sdk.responses.create(model="m", input=history, tools=tools)
    await sdk.close()
    assert second.output_text == "it printed hi"
    sent = rig.model.requests[1].body
    assert sent["messages"][0] == {"role": "system", "content": "be brief"}
    assert sent["messages"][2]["tool_calls"][0]["id"] == "c9"
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": "c9", "content": "hi\n"}
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command"]
    assert len(rig.calls) == 2 and rig.calls[0].parsed_response()["output"][1]["call_id"] == "c9"


NAMESPACED = [ScriptedReply.tool_call("mcp__interplay__find_order", {"order_id": "7"},
                                      call_id="c1"),
              ScriptedReply.text("found it")]


@pytest.mark.parametrize("rig", [NAMESPACED], indirect=True)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_namespaces_tools_reach_a_chat_model_by_qualified_names(rig: Rig,
                                                                       stream: bool) -> None:
    """codex offers an MCP server's tools as a Responses ``namespace``: the Chat Completions
    model sees ``<namespace>__<tool>``, and its call comes back with the namespace apart."""
    tools = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
             {"type": "namespace", "name": "mcp__interplay", "description": "Tools",
              "tools": [{"type": "function", "name": "find_order", "description": "Look up.",
                         "strict": False, "parameters": {"type": "object", "properties": {
                             "order_id": {"type": "string"}}}}]}]
    history: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "find 7"}]
    body = {"model": "m", "input": history, "tools": tools, "stream": stream}
    r = await rig.post("/v1/responses", json.dumps(body))
    assert r.status_code == 200
    if stream:
        events = [json.loads(line[6:]) for line in r.text.splitlines()
                  if line.startswith("data: ")]
        (item,) = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    else:
        (item,) = r.json()["output"]
    assert (item["type"], item["namespace"], item["name"], item["call_id"]) == (
        "function_call", "mcp__interplay", "find_order", "c1")
    sent = rig.model.requests[0].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["exec_command",
                                                              "mcp__interplay__find_order"]
    assert sent["tools"][1]["function"]["description"] == "Look up."
    # The call and its output, sent back as codex sends them, read by the same names.
    history += [dict(item), {"type": "function_call_output", "call_id": "c1",
                             "output": [{"type": "input_text", "text": "Output:"},
                                        {"type": "input_text", "text": "pending"}]}]
    r = await rig.post("/v1/responses", json.dumps({**body, "stream": False}))
    assert r.json()["output"][0]["content"][0]["text"] == "found it"
    sent = rig.model.requests[1].body["messages"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == "mcp__interplay__find_order"
    assert sent[2] == {"role": "tool", "tool_call_id": "c1", "content": "Output:\n\npending"}
    # The recorded turn reads back as the model saw it.
    assert assistant_message(rig.calls[0]).tool_calls[0].name == "mcp__interplay__find_order"
    assert request_messages(rig.calls[1])[1].tool_calls[0].name == \
        "mcp__interplay__find_order"
    # And the tools it offered, by the names the model saw (the namespace's in front).
    assert request_tool_names(rig.calls[1]) == ["exec_command", "mcp__interplay__find_order"]


def test_the_tools_a_recorded_request_offered_in_each_api() -> None:
    fn = {"name": "find", "parameters": {"type": "object"}}
    chat = ModelCall(id="a", request={"messages": [], "tools": [{"type": "function",
                                                                 "function": fn}]})
    responses = ModelCall(id="b", api="responses", request={"input": "hi", "tools": [
        {"type": "function", **fn}, {"type": "web_search"},
        {"type": "namespace", "name": "mcp__interplay", "tools": [{"type": "function", **fn}]}]})
    messages = ModelCall(id="c", api="messages", request={"messages": [], "tools": [
        {"name": "find", "input_schema": {"type": "object"}},
        {"name": "web_search", "type": "web_search_20250305"}]})
    assert request_tool_names(chat) == ["find"]
    assert request_tool_names(responses) == ["find", "mcp__interplay__find"]  # hosted: none
    assert request_tool_names(messages) == ["find"]  # Anthropic-defined tools are not sent on
    for unreadable in ({"input": 3, "tools": "x"}, {"messages": [], "tools": [3, {}]}, {}):
        assert request_tool_names(ModelCall(id="d", request=unreadable)) == []
    assert request_tool_names(ModelCall(id="e", api="messages", request={"tools": [{}]})) == []
    deferred = {"name": "later", "input_schema": {}, "defer_loading": True}
    assert request_tool_names(ModelCall(id="f", api="messages",
                                        request={"tools": [deferred]})) == []


def test_sync_callers_serve_from_a_thread() -> None:
    calls: list[ModelCall] = []
    with ScriptedModel() as m, InterceptionServer() as srv:
        route = srv.open_trace(client=ModelClient(m.endpoint), on_call=calls.append)
        sdk = openai.OpenAI(base_url=route.path_base_url, api_key="unused", max_retries=0)
        r = sdk.chat.completions.create(**CHAT)
    assert r.choices[0].message.content == "echo: hello there"
    assert len(calls) == 1 and calls[0].error_type is None


async def test_responses_content_parts_stay_apart(rig: Rig) -> None:
    # codex sends its instructions and each skill as parts of one developer message
    developer = [{"type": "input_text", "text": "You are terse."},
                 {"type": "input_text", "text": "<skills_instructions>use them"},
                 {"type": "input_text", "text": ""}]
    user = [{"type": "input_text", "text": "first part"},
            {"type": "input_text", "text": "second part"}]
    sdk = rig.sdk()
    r = await sdk.responses.create(model="m", input=[
        {"type": "message", "role": "developer", "content": developer},
        {"type": "message", "role": "user", "content": user}])
    await sdk.close()
    sent = rig.model.requests[0].body["messages"]
    assert sent[0] == {"role": "system",
                       "content": "You are terse.\n\n<skills_instructions>use them"}
    assert sent[1] == {"role": "user", "content": "first part\n\nsecond part"}
    assert r.output_text == "echo: first part\n\nsecond part"


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for something another process or thread does (bounded only to fail, not to time)."""
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


# A harness program: asks the model and waits for the answer as long as it takes.
PROGRAM = """
import sys, httpx
body = {"model": "m", "messages": [{"role": "user", "content": "wait"}],
        "stream": sys.argv[3] == "stream"}
httpx.post(sys.argv[1] + "/chat/completions", json=body, timeout=None,
           headers={"authorization": "Bearer " + sys.argv[2]})
"""


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
async def test_a_killed_program_cancels_its_upstream_call(stream: bool) -> None:
    async with ScriptedModel(lambda req: ScriptedReply.hang()) as m:
        # a long timeout: only the cancellation can end the hung upstream call
        client = ModelClient(attrs.evolve(m.endpoint, max_retries=0, timeout_s=600))
        calls: list[ModelCall] = []
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=client, on_call=calls.append)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", PROGRAM, route.base_url, route.secret,
                "stream" if stream else "whole")
            await until(lambda: len(m.requests) == 1, "the request reached the model")
            assert srv.inflight == 1 and srv.waiting == 1
            proc.kill()
            await proc.wait()
            # the model sees its connection dropped; the server holds nothing
            await until(lambda: m.abandoned == 1, "the upstream connection closed")
            await until(lambda: srv.inflight == 0 and srv.waiting == 0, "the call ended")
            srv.close_trace(route.secret)
            await asyncio.sleep(0)
        await client.aclose()
    # the program never got an answer: no turn to record
    assert calls == [] and route.calls == 0 and route.closed


@pytest.mark.parametrize("rig", [lambda req: ScriptedReply.hang()], indirect=True)
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_closing_a_trace_cancels_its_calls_and_records_nothing_after(
        rig: Rig, api: str) -> None:
    # a long timeout: only the close can end the hung call
    client = ModelClient(attrs.evolve(rig.model.endpoint, max_retries=0, timeout_s=600))
    calls: list[ModelCall] = []
    secret = rig.server.open_trace(client=client, on_call=calls.append).secret
    path, body = ("/v1/chat/completions", CHAT) if api == "chat" else \
        ("/v1/responses", {"model": "m", "input": "hi"})
    raw = json.dumps(body)
    waiting = [asyncio.create_task(rig.post(path, raw, secret=secret)) for _ in range(2)]
    await until(lambda: rig.server.waiting == 2 and len(rig.model.requests) == 1,
                "both requests wait on one call")
    assert rig.server.inflight == 1
    rig.server.close_trace(secret)
    answers = await asyncio.gather(*waiting)
    assert [(r.status_code, r.json()["error"]["code"]) for r in answers] == [
        (410, "trace_closed")] * 2
    await until(lambda: rig.model.abandoned == 1, "the upstream connection closed")
    await until(lambda: rig.server.inflight == 0, "the call ended")
    await client.aclose()
    assert calls == [] and len(rig.model.requests) == 1
    assert (await rig.post(path, raw, secret=secret)).status_code == 401


async def test_a_call_goes_on_while_a_coalesced_request_still_waits() -> None:
    release = threading.Event()

    def held(request: ScriptedRequest) -> ScriptedReply:
        release.wait(60)  # holds the model until the test lets it answer
        return ScriptedReply.text("worth the wait")

    async with ScriptedModel(held) as m:
        client = ModelClient(attrs.evolve(m.endpoint, max_retries=0, timeout_s=600))
        calls: list[ModelCall] = []
        try:
            async with InterceptionServer() as srv, httpx.AsyncClient(timeout=None) as http:
                route = srv.open_trace(client=client, on_call=calls.append)

                async def ask() -> httpx.Response:
                    return await http.post(route.base_url + "/chat/completions", json=CHAT,
                                           headers={"authorization": f"Bearer {route.secret}"})

                first = asyncio.create_task(ask())
                await until(lambda: len(m.requests) == 1, "the request reached the model")
                second = asyncio.create_task(ask())
                await until(lambda: srv.waiting == 2, "the second request joined the call")
                first.cancel()  # its client goes away
                await until(lambda: srv.waiting == 1, "the first request left")
                assert srv.inflight == 1
                release.set()
                answer = await second
        finally:
            release.set()
        await client.aclose()
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "worth the wait"
    assert len(m.requests) == 1 and len(calls) == 1 and calls[0].error_type is None


async def test_seat_sampling_wins_over_the_program(rig: Rig) -> None:
    endpoint = attrs.evolve(rig.model.endpoint, max_retries=0, sampling={
        "top_p": 0.1, "temperature": 1.0, "max_completion_tokens": 50, "presence_penalty": 0.5})
    client = ModelClient(endpoint)
    calls: list[ModelCall] = []
    route = rig.server.open_trace(client=client, on_call=calls.append, sampling={
        "temperature": 0.0, "max_tokens": 7, "seed": 3, "model": "not-a-sampling-key"})
    sdk = openai.AsyncOpenAI(base_url=route.base_url, api_key=route.secret, max_retries=0)
    await sdk.chat.completions.create(**CHAT, temperature=0.9, top_p=0.5,
                                      max_completion_tokens=100)
    await sdk.responses.create(model="m", input="hi", temperature=0.9, max_output_tokens=100)
    await sdk.close()
    await client.aclose()
    chat, responses = (r.body for r in rig.model.requests)
    # the seat's values over the program's, the program's over the endpoint's
    assert {k: chat.get(k) for k in ("temperature", "top_p", "max_tokens",
                                      "max_completion_tokens", "seed", "presence_penalty",
                                      "model")} == {
        "temperature": 0.0, "top_p": 0.5, "max_tokens": 7, "max_completion_tokens": None,
        "seed": 3, "presence_penalty": 0.5, "model": "scripted"}
    assert {k: responses.get(k) for k in ("temperature", "top_p", "max_tokens",
                                           "max_completion_tokens", "seed")} == {
        "temperature": 0.0, "top_p": 0.1, "max_tokens": 7, "max_completion_tokens": None,
        "seed": 3}
    # the record keeps the request as the program sent it
    assert calls[0].request["temperature"] == 0.9 and "seed" not in calls[0].request
    assert calls[1].request["max_output_tokens"] == 100


SAMPLING_PROGRAM = """
import os, sys
from openai import OpenAI
reply = OpenAI().chat.completions.create(model=os.environ["OPENAI_MODEL"], temperature=1.5,
    messages=[{"role": "user", "content": sys.stdin.read()}])
print(reply.choices[0].message.content)
"""


class OneSeat(Env):
    """An env whose one step runs the assistant seat once on the task."""

    name = "one-seat"
    seats: ClassVar[dict[str, SeatSpec]] = {"assistant": SeatSpec(harness="command")}

    def tasks(self) -> list[Task]:
        return []

    def steps(self) -> list[Step]:
        class Run(Step):
            name = "run"

            async def run(self, ctx: LiveEpisodeContext) -> None:
                await ctx.agent("assistant").run(ctx.task)

        return [Run()]


@pytest.mark.slow
async def test_an_out_of_process_harness_gets_its_seats_sampling() -> None:
    async with ScriptedModel() as m:
        resources = RunResources(endpoint=m.endpoint, seats={"assistant": {
            "sampling": {"temperature": 0.2, "seed": 11},
            "harness_config": {"argv": [sys.executable, "-c", SAMPLING_PROGRAM]}}})
        try:
            ep = await run_episode(OneSeat(), Task(0, prompt="sample me"),
                                   resources=resources)
        finally:
            await resources.aclose()
    trace = ep.trace("assistant")
    assert trace.messages[-1].text == "echo: sample me", (ep.error, trace.error)
    sent = m.requests[0].body
    assert (sent["temperature"], sent["seed"]) == (0.2, 11)
    assert trace.model_calls[0].request["temperature"] == 1.5


@attrs.define
class Passthrough:
    model: ScriptedModel
    server: InterceptionServer
    calls: list[ModelCall]
    secret: str
    base_url: str

    def sdk(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.secret, max_retries=0)


@pytest.fixture
async def passthrough(request: pytest.FixtureRequest) -> AsyncIterator[Passthrough]:
    """A trace whose endpoint serves the Responses API itself."""
    async with ScriptedModel(getattr(request, "param", None)) as m:
        client = ModelClient(attrs.evolve(m.endpoint, api="responses", max_retries=0,
                                          sampling={"temperature": 0.7, "stop": ["x"]}))
        calls: list[ModelCall] = []
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=client, on_call=calls.append,
                                   sampling={"max_tokens": 5, "seed": 1, "top_p": 0.3})
            yield Passthrough(m, srv, calls, route.secret, route.base_url)
        await client.aclose()


async def test_responses_are_forwarded_as_they_are(passthrough: Passthrough) -> None:
    p = passthrough
    sdk = p.sdk()
    whole = await sdk.responses.create(model="m", input="hello there", top_p=0.9,
                                       max_output_tokens=100, store=False)
    types = []
    async with sdk.responses.stream(model="m", input="hello again") as s:
        async for ev in s:
            types.append(ev.type)
        streamed = await s.get_final_response()
    await sdk.close()
    assert whole.output_text == "echo: hello there" and streamed.output_text == "echo: hello again"
    # the upstream got the Responses request itself, not a Chat Completions translation
    assert [r.api for r in p.model.requests] == ["responses", "responses"]
    sent = p.model.requests[0].body
    assert sent["input"] == "hello there" and "messages" not in sent and sent["store"] is False
    # the endpoint's sampling under the program's, the seat's over it, in Responses names;
    # seed and stop have no Responses form and are not sent
    assert {k: sent.get(k) for k in ("model", "temperature", "top_p", "max_output_tokens",
                                      "seed", "stop", "max_tokens")} == {
        "model": "scripted", "temperature": 0.7, "top_p": 0.3, "max_output_tokens": 5,
        "seed": None, "stop": None, "max_tokens": None}
    # the events are the upstream's own
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [(c.api, c.streamed, c.error_type, c.finish_reason) for c in p.calls] == [
        ("responses", False, None, "stop"), ("responses", True, None, "stop")]
    assert p.calls[0].request["max_output_tokens"] == 100  # as the program sent it
    assert p.calls[0].parsed_response()["id"] == whole.id
    assert p.calls[1].parsed_response()["id"] == streamed.id
    assert p.calls[1].parsed_response()["output"][0]["content"][0]["text"] == "echo: hello again"
    assert p.calls[1].usage.completion_tokens == 3 and p.calls[1].first_token_s is not None


# an item translation to Chat Completions could not carry
CUSTOM = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c1", "name": "apply_patch",
          "input": "*** Begin Patch", "status": "completed"}


@pytest.mark.parametrize("passthrough", [[ScriptedReply.output_items([CUSTOM]),
                                          ScriptedReply.output_items([CUSTOM])]],
                         indirect=True)
async def test_passthrough_keeps_items_translation_would_lose(passthrough: Passthrough) -> None:
    tools = [{"type": "custom", "name": "apply_patch"}]
    body = {"model": "m", "input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "patch it"}]}], "tools": tools}
    async with httpx.AsyncClient(timeout=30) as http:
        headers = {"authorization": f"Bearer {passthrough.secret}"}
        whole = await http.post(passthrough.base_url + "/responses", json=body,
                                headers=headers)
        streamed = await http.post(passthrough.base_url + "/responses",
                                   json={**body, "stream": True}, headers=headers)
    assert whole.json()["output"] == [CUSTOM]
    assert b'"custom_tool_call"' in streamed.content
    assert passthrough.model.requests[0].body["tools"] == tools
    assert [c.parsed_response()["output"] for c in passthrough.calls] == [[CUSTOM], [CUSTOM]]


@pytest.mark.parametrize("passthrough", [[ScriptedReply.fault(429, retry_after=9),
                                          ScriptedReply.drop(), ScriptedReply.malformed()]],
                         indirect=True)
async def test_passthrough_failures(passthrough: Passthrough) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        headers = {"authorization": f"Bearer {passthrough.secret}"}
        limited = await http.post(passthrough.base_url + "/responses",
                                  json={"input": "x"}, headers=headers)
        dropped = await http.post(passthrough.base_url + "/responses",
                                  json={"input": "x", "stream": True}, headers=headers)
        garbled = await http.post(passthrough.base_url + "/responses",
                                  json={"input": "x"}, headers=headers)
    # the upstream's own error, as it was
    assert limited.status_code == 429 and limited.headers["retry-after"] == "9"
    assert limited.json()["error"]["message"] == "scripted fault 429"
    # a stream cut midway ends with a failure event the program can read
    events = [json.loads(line[5:]) for line in dropped.text.splitlines()
              if line.startswith("data:")]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.failed"
    assert events[-1]["sequence_number"] == events[-2]["sequence_number"] + 1
    assert events[-1]["response"]["id"] == events[0]["response"]["id"]
    # a body that is not a Response is the upstream's fault: 502, recorded as bad_response
    assert garbled.status_code == 502
    assert garbled.json()["error"]["code"] == "bad_response"
    assert [(c.api, c.status, c.error_type) for c in passthrough.calls] == [
        ("responses", 429, "rate_limited"), ("responses", None, "connection_error"),
        ("responses", 200, "bad_response")]


async def test_passthrough_needs_a_remote_endpoint() -> None:
    assert config.structure({"base_url": "http://127.0.0.1:1/v1", "api": "responses"},
                            Endpoint, path="model").api == "responses"
    with pytest.raises(InterplayError, match=r"model\.api: expected one of 'chat', 'responses'"):
        config.structure({"api": "response"}, Endpoint, path="model")
    # distinct clients for endpoints that differ only in their api
    models = Models()
    assert models.client(Endpoint(api="responses")) is not models.client(Endpoint())
    async with InterceptionServer() as srv:
        with pytest.raises(InterplayError, match=r"api = 'responses' needs a model\.base_url"):
            srv.open_trace(client=ModelClient(Endpoint(api="responses")), on_call=print)


@pytest.mark.parametrize("rig", [[ScriptedReply.text("plain answer").unstreamed(),
                                  ScriptedReply.tool_call("look", {"q": 1}).unstreamed()]],
                         indirect=True)
async def test_a_streamed_request_answered_with_json_still_streams(rig: Rig) -> None:
    sdk = rig.sdk()
    parts: list[str] = []
    usage = None
    async for chunk in await sdk.chat.completions.create(
            **CHAT, stream=True, stream_options={"include_usage": True}):
        parts += [c.delta.content or "" for c in chunk.choices]
        usage = chunk.usage or usage
    async with sdk.chat.completions.stream(**CHAT) as stream:
        final = await stream.get_final_completion()
    await sdk.close()
    assert "".join(parts) == "plain answer" and usage is not None
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "look" and json.loads(call.function.arguments) == {"q": 1}
    assert len(rig.model.requests) == 2 and all(r.stream for r in rig.model.requests)
    assert [c.error_type for c in rig.calls] == [None, None]
    assert rig.calls[0].parsed_response()["choices"][0]["message"]["content"] == "plain answer"


def test_stopping_a_threaded_server_ends_its_calls_in_flight() -> None:
    calls: list[ModelCall] = []
    with ScriptedModel(lambda req: ScriptedReply.hang()) as m:
        srv = InterceptionServer()
        srv.start_in_thread()
        client = ModelClient(attrs.evolve(m.endpoint, max_retries=0, timeout_s=600))
        route = srv.open_trace(client=client, on_call=calls.append)
        answers: list[httpx.Response] = []
        program = threading.Thread(target=lambda: answers.append(httpx.post(
            route.base_url + "/chat/completions", json=CHAT, timeout=None,
            headers={"authorization": f"Bearer {route.secret}"})))
        program.start()
        for _ in range(3000):
            if srv.inflight == 1 and len(m.requests) == 1:
                break
            threading.Event().wait(0.02)
        assert srv.inflight == 1
        srv.stop_thread()
        program.join()
        assert srv.inflight == 0 and srv._server._thread_loop is None
        for _ in range(3000):  # the hung upstream connection was closed by the cancel
            if m.abandoned == 1:
                break
            threading.Event().wait(0.02)
        assert m.abandoned == 1
    assert [(r.status_code, r.json()["error"]["code"]) for r in answers] == [
        (503, "server_stopping")]
    assert calls == []


@pytest.mark.parametrize("rig", [lambda req: ScriptedReply.hang()], indirect=True)
async def test_stopping_the_server_ends_its_calls_in_flight(rig: Rig) -> None:
    waiting = asyncio.create_task(rig.post("/v1/chat/completions", json.dumps(CHAT)))
    await until(lambda: rig.server.inflight == 1, "the call is in flight")
    await rig.server.stop()
    answer = await waiting
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, "server_stopping")
    assert rig.server.inflight == 0 and rig.calls == []


def test_logged_paths_mask_the_trace_secret() -> None:
    from interplay.interception.server import _masked

    assert _masked("/t/s3cret/v1/chat/completions") == "/t/***/v1/chat/completions"
    assert _masked("/t/s3cret") == "/t/***"
    assert _masked("/v1/responses") == "/v1/responses"
