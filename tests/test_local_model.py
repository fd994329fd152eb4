"""The embedded model: a real chat completion, streamed and not, straight and through the
interception server. Skipped only when llama_cpp is not installed."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import attrs
import httpx
import openai
import pytest

from interplay.config.endpoint import Endpoint
from interplay.errors import InterplayError
from interplay.interception import InterceptionServer
from interplay.model import local as local_model
from interplay.model.client import ModelClient, Models
from interplay.model.local import MODEL_NAME, LocalModel
from interplay.model.local_server import to_template_messages
from interplay.model.wire import assistant_message
from interplay.testing import captured_log, command_env, interplay_command, run_interplay
from interplay.values.records import ModelCall

needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                 reason="llama_cpp is not installed (run: bash .ci/setup)")
pytestmark = [pytest.mark.local_model, pytest.mark.slow, needs_llama]

ASK = [{"role": "system", "content": "You are terse."},
       {"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def local() -> AsyncIterator[LocalModel]:
    with LocalModel() as model:
        yield model


async def test_models_pool_starts_and_stops_the_local_model(local: LocalModel) -> None:
    models = Models()
    client = models.client(Endpoint(base_url=None))
    call = await client.chat(ASK, max_tokens=8, stream=True,
                             tools=[{"type": "function", "function": {"name": "t",
                                                                      "parameters": {}}}])
    await models.aclose()
    assert call.error_type is None, call.error
    # The resolved model's name, not "default", in the client, the request and the record.
    assert client.endpoint.model == MODEL_NAME and client.endpoint.base_url is None
    assert call.request["model"] == MODEL_NAME and call.model == MODEL_NAME
    # With tools and no tool_choice (auto) the model answers in text or calls the tool.
    reply = assistant_message(call)
    assert reply.text or [c.name for c in reply.tool_calls] == ["t"]
    assert call.usage.completion_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_through_interception(local: LocalModel, stream: bool) -> None:
    models = Models()
    calls: list[ModelCall] = []
    async with InterceptionServer() as srv:
        route = srv.open_trace(client=models.client(local.endpoint), on_call=calls.append)
        sdk = openai.AsyncOpenAI(base_url=route.base_url, api_key=route.secret, max_retries=0)
        if stream:
            text = ""
            async for chunk in await sdk.chat.completions.create(
                    model="any", messages=ASK, max_tokens=8, stream=True):
                text += "".join(c.delta.content or "" for c in chunk.choices)
        else:
            r = await sdk.chat.completions.create(model="any", messages=ASK, max_tokens=8)
            text = r.choices[0].message.content
        out = await sdk.responses.create(model="any", input="Name a fruit.",
                                         max_output_tokens=8)
        await sdk.close()
    await models.aclose()
    assert text and out.output_text
    assert len(calls) == 2 and all(c.error_type is None for c in calls)
    assert calls[0].model == MODEL_NAME and calls[0].usage.completion_tokens > 0


MESSAGE_USER = {"type": "function", "function": {
    "name": "message_user", "description": "Send the user a message.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 60}},
                   "required": ["text"], "additionalProperties": False}}}
GET_TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The current time.",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}}
WAKE = [{"role": "system", "content": "You are Dana's assistant. Reach her with message_user."},
        {"role": "user", "content": "[Mon 09:00] Dana wrote: Is the venue free on Saturday?"}]


async def test_tool_calls_through_the_grammar_constrained_handler(local: LocalModel) -> None:
    client = ModelClient(local.endpoint)
    try:
        forced = await client.chat(WAKE, tools=[MESSAGE_USER, GET_TIME], max_tokens=64,
                                   temperature=0.0, tool_choice={
                                       "type": "function", "function": {"name": "message_user"}})
        required = await client.chat(WAKE, tools=[MESSAGE_USER, GET_TIME], max_tokens=64,
                                     temperature=0.0, tool_choice="required", stream=True)
        unknown = await client.chat(WAKE, tools=[GET_TIME], tool_choice={
            "type": "function", "function": {"name": "fly"}})
    finally:
        await client.aclose()
    # A forced tool: always a valid call of it, its arguments JSON that fits the schema.
    [call] = assistant_message(forced).tool_calls
    assert call.name == "message_user" and forced.finish_reason == "tool_calls"
    assert isinstance(json.loads(call.arguments)["text"], str)
    # required: a call of one of the tools (answered whole though streaming was asked).
    names = [c.name for c in assistant_message(required).tool_calls]
    assert names and set(names) <= {"message_user", "get_time"}
    assert (unknown.status, unknown.error_type) == (400, "bad_request")


async def test_a_tool_request_without_a_system_message_shows_the_model_its_tools(
        local: LocalModel) -> None:
    client = ModelClient(local.endpoint)
    forced = {"type": "function", "function": {"name": "message_user"}}
    try:
        bare = await client.chat(WAKE[1:], tools=[MESSAGE_USER, GET_TIME], max_tokens=8,
                                 temperature=0.0, tool_choice=forced)
        empty = await client.chat([{"role": "system", "content": ""}, *WAKE[1:]],
                                  tools=[MESSAGE_USER, GET_TIME], max_tokens=8,
                                  temperature=0.0, tool_choice=forced)
        plain = await client.chat(WAKE[1:], max_tokens=8, temperature=0.0)
    finally:
        await client.aclose()
    # The tools are listed as they are under an (empty) system message of the request's own.
    assert bare.usage.prompt_tokens == empty.usage.prompt_tokens
    assert bare.usage.prompt_tokens > plain.usage.prompt_tokens + 40


async def test_count_tokens_on_the_embedded_model_counts_what_its_answers_read(
        local: LocalModel) -> None:
    """A Messages client's count_tokens on the default model: the embedded server serves
    vLLM's /tokenize, and its count is the prompt a completion of the same request reads,
    without tools and with them (the tool handler's template; as vLLM counts, the
    conversation with the answer's turn opened, before a forced call is begun in it)."""
    models = Models()
    calls: list[ModelCall] = []
    system = "You are Dana's assistant. Reach her with message_user."
    said = [{"role": "user", "content": WAKE[1]["content"]}]
    tool = {"name": "message_user", "description": "Send the user a message.",
            "input_schema": MESSAGE_USER["function"]["parameters"]}
    root = local.endpoint.base_url.removesuffix("/v1")
    try:
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=models.client(local.endpoint), on_call=calls.append)
            forced: Any = {"type": "tool", "name": "message_user"}
            async with anthropic.AsyncAnthropic(base_url=srv.root_url, api_key=route.secret,
                                                max_retries=0) as sdk:
                plain = await sdk.messages.count_tokens(model="m", system=system,
                                                        messages=said)
                tools = await sdk.messages.count_tokens(model="m", system=system,
                                                        messages=said, tools=[tool],
                                                        tool_choice=forced)
                counted = len(calls)
                answered = await sdk.messages.create(model="m", system=system, messages=said,
                                                     max_tokens=1)
                called = await sdk.messages.create(model="m", system=system, messages=said,
                                                   max_tokens=24, tools=[tool],
                                                   tool_choice=forced)
        async with httpx.AsyncClient() as http:
            raw = await http.post(root + "/tokenize", json={"model": "m", "prompt": "Hello"})
            # What a forced call's prompt has after the conversation: the call begun.
            begun = await http.post(root + "/tokenize", json={
                "model": "m", "prompt": "functions.message_user:\n",
                "add_special_tokens": False})
            bad = await http.post(root + "/tokenize", json={"model": "m", "messages": "hi"})
    finally:
        await models.aclose()

    def read(usage: Any) -> int:
        return usage.input_tokens + (usage.cache_read_input_tokens or 0)

    assert counted == 0  # counting is no turn
    assert plain.input_tokens == read(answered.usage) > 20
    assert [b.type for b in called.content] == ["tool_use"]
    assert tools.input_tokens + begun.json()["count"] == read(called.usage)
    assert tools.input_tokens > plain.input_tokens + 40
    # vLLM's answer: the ids, their count, the model's window.
    answer = raw.json()
    assert answer["count"] == len(answer["tokens"]) > 0 and answer["max_model_len"] > 0
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]


def test_the_tool_handlers_own_completions_keep_to_the_requests_max_tokens() -> None:
    """Left to choose (auto), llama-cpp-python's tool handler asks the completions that write a
    call's arguments for no limit (up to the window), whatever the request's max_tokens: a
    135M model's message_user text ran for minutes in an always_on month, until the next
    completion was refused for a full context. The server holds each one to max_tokens."""
    from interplay.model.local import model_path
    from interplay.model.local_server import LocalServer

    server = LocalServer(model_path(), threads=1)
    counts: list[int] = []

    def handler(*, llama: Any, messages: Any, tools: Any, tool_choice: Any, **kw: Any) -> Any:
        # As the handler's auto path writes arguments: max_tokens=None.
        out = llama.create_completion(prompt="Count from one to a hundred: one, two,",
                                      max_tokens=None, temperature=0.0)
        counts.append(out["usage"]["completion_tokens"])
        return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}}]}

    # In place of llama-cpp-python's handler, one that asks as its auto path asks.
    server.tool_handler = handler
    body = {"model": "m", "max_tokens": 7, "tools": [{"type": "function", "function": {
        "name": "t", "parameters": {"type": "object", "properties": {}}}}],
        "messages": [{"role": "user", "content": "hi"}]}
    result = server._with_tools(body, server._kwargs(body), "auto")
    assert 0 < counts[0] <= 7 and result["choices"][0]["finish_reason"] == "tool_calls"
    assert server.llm.completion_cap is None  # only while the request runs
    free = server.llm.create_completion(prompt="Count from one to a hundred: one, two,",
                                        max_tokens=20, temperature=0.0)
    assert free["usage"]["completion_tokens"] == 20


def test_template_messages_keep_tool_calls_for_the_tool_handler() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs = to_template_messages([{"role": "assistant", "content": None, "tool_calls": [call]}],
                                keep_calls=True)
    assert msgs == [{"role": "assistant", "content": None, "tool_calls": [call]}]


def test_template_messages_flatten_tools() -> None:
    msgs = to_template_messages([
        {"role": "developer", "content": "rules"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "ok"}]}])
    assert [m["role"] for m in msgs] == ["system", "assistant", "user"]
    assert msgs[2]["content"] == "Tool result: ok"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_bad_sampling_type_is_a_bad_request_not_retried(local: LocalModel,
                                                                stream: bool) -> None:
    client = ModelClient(attrs.evolve(local.endpoint, max_retries=3))
    hot = await client.chat(ASK, max_tokens=4, stream=stream, temperature="hot")
    stop = await client.chat(ASK, max_tokens=4, stream=stream, stop=5)
    ok = await client.chat(ASK, max_tokens=4, stream=stream, stop="\n", seed=3)
    await client.aclose()
    assert (hot.status, hot.error_type, hot.attempts) == (400, "bad_request", 1)
    assert "temperature" in hot.error
    assert (stop.status, stop.error_type, stop.attempts) == (400, "bad_request", 1)
    assert ok.error_type is None, ok.error


async def test_a_pool_release_leaves_the_shared_model_to_a_client_outside_pools() -> None:
    held = await local_model.acquire_shared()
    try:
        endpoint = await local_model.shared_local_endpoint()  # a client outside any pool
        assert endpoint.base_url == held.base_url
        await local_model.release_shared()  # the pool's last reference goes
        client = ModelClient(endpoint)
        call = await client.chat(ASK, max_tokens=4)
        await client.aclose()
        assert call.error_type is None, call.error  # still up: pinned by the outside client
    finally:
        await asyncio.to_thread(local_model._stop_shared)
    again = await local_model.acquire_shared()  # a fresh one after a full stop
    await local_model.release_shared()
    assert again is not held and again.proc is None  # the last release stopped it


async def test_a_call_to_an_embedded_model_that_died_says_why_and_is_not_retried() -> None:
    """Its server dies of SIGILL, as a llama.cpp built for instructions the machine cannot run
    does on its first prompt: the next call names the cause and what to do, at once, rather
    than five refused connections."""
    core = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, core[1]))  # the server leaves no core file
    models = Models()
    client = models.client(Endpoint(base_url=None, max_retries=4))
    try:
        first = await client.chat(ASK, max_tokens=4)
        assert first.error_type is None, first.error
        server = local_model._shared
        assert server is not None and server.proc is not None
        assert server.exit_reason() is None  # running
        os.kill(server.proc.pid, signal.SIGILL)
        await asyncio.to_thread(server.proc.wait, 10)
        calls = [await client.chat(ASK, max_tokens=4, stream=stream) for stream in (False, True)]
    finally:
        await models.aclose()
        resource.setrlimit(resource.RLIMIT_CORE, core)
    for call in calls:
        assert (call.error_type, call.attempts) == ("connection_error", 1)
        assert call.error is not None and "died of SIGILL" in call.error
        assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in call.error
    assert local_model._shared is None  # the pool's release stopped what was left of it


@pytest.mark.parametrize(("code", "says"), [
    (-signal.SIGKILL, "the embedded model's server was killed by SIGKILL"),
    (3, "the embedded model's server exited with code 3 (run `interplay serve-local`"),
])
def test_other_ends_of_the_embedded_model_are_named(code: int, says: str) -> None:
    assert local_model.exit_reason(code).startswith(says)


def test_a_tool_request_answered_in_plain_text_counts_the_prompt_with_its_tools() -> None:
    from interplay.model.local_server import fallback_usage

    # The tool pass read 208 tokens (the tools in the prompt) and chose to answer; the plain
    # pass that wrote the answer read 28 (no tools) and wrote 9.
    tool_pass = {"prompt_tokens": 208, "completion_tokens": 2, "total_tokens": 210}
    plain = {"prompt_tokens": 28, "completion_tokens": 9, "total_tokens": 37}
    assert fallback_usage(tool_pass, plain) == {"prompt_tokens": 208, "completion_tokens": 9,
                                                "total_tokens": 217}
    assert fallback_usage(None, plain)["prompt_tokens"] == 28


def test_tool_arguments_become_strict_json() -> None:
    from interplay.model.local_server import _json_arguments

    assert json.loads(_json_arguments('{"text": "two\nlines"}')) == {"text": "two\nlines"}
    assert _json_arguments("not json") == "not json"


def _models_meta(base_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base_url}/models", timeout=30) as r:
        return json.loads(r.read())["data"][0]["meta"]


async def test_the_thread_setting_reaches_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> None:
    """INTERPLAY_LOCAL_THREADS, read by the server process a run starts, is what llama.cpp's
    context runs with (the server reads it back from the context for /v1/models); unset, the
    default for this machine's usable cores; the run's log says it."""
    monkeypatch.setenv(local_model.THREADS_VAR, "3")
    with captured_log("info") as logged, LocalModel() as model:
        assert model.base_url is not None
        assert _models_meta(model.base_url) == {"n_ctx": 8192, "n_threads": 3,
                                                "n_threads_batch": 3}
    [started] = [json.loads(x) for x in logged.getvalue().splitlines()
                 if json.loads(x)["event"] == "local_model.started"]
    assert started["threads"] == 3
    monkeypatch.delenv(local_model.THREADS_VAR)
    with LocalModel() as model:
        assert model.base_url is not None
        meta = _models_meta(model.base_url)
    assert meta["n_threads"] == meta["n_threads_batch"] == local_model.default_threads()


def test_serve_local_takes_threads_over_the_environment() -> None:
    """`interplay serve-local --threads N` wins over INTERPLAY_LOCAL_THREADS."""
    proc = subprocess.Popen([*interplay_command(), "serve-local", "--threads", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=command_env({local_model.THREADS_VAR: "3"}))
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        assert url.startswith("http://127.0.0.1:"), url
        assert _models_meta(url)["n_threads"] == 2
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]


@pytest.mark.parametrize(("args", "env", "says"), [
    (["--threads", "0"], {}, "--threads: 0 is not a number of threads"),
    ([], {"INTERPLAY_LOCAL_THREADS": "two"}, "INTERPLAY_LOCAL_THREADS: 'two' is not a number "
                                             "of threads"),
])
def test_a_thread_count_that_is_not_one_is_refused_in_one_line(
        args: list[str], env: dict[str, str], says: str) -> None:
    proc = run_interplay("serve-local", *args, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"interplay: error: {says}; give a whole number of 1 or more")
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_a_bad_thread_count_stops_a_run_before_the_server_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(local_model.THREADS_VAR, "-1")
    with pytest.raises(InterplayError, match="INTERPLAY_LOCAL_THREADS: '-1' is not a number"):
        LocalModel().start()


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (3, 2), (4, 2), (64, 2)])
def test_the_default_is_two_threads_but_never_every_core(cores: int, threads: int) -> None:
    assert local_model.default_threads(cores) == threads


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two cores")
def test_the_cores_counted_are_those_the_process_may_run_on() -> None:
    """A process limited to one core (a container's cpuset, `taskset -c 0`) counts one, not
    the machine's."""
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from interplay.model.local import usable_cores, default_threads; "
            "print(usable_cores(), default_threads(), os.cpu_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert out[:2] == ["1", "1"] and int(out[2]) >= 2
