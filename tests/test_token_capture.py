"""Token capture against the scripted model over real HTTP: the direct client and the
interception server (Chat Completions, Responses translated and forwarded, Anthropic Messages
translated), streamed and not;
only trainable seats ask; what the endpoint did not return is recorded as missing, and what
does not fit as a warning."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import openai
import pytest

from interplay.builtin_envs.envs import UserSimEnv
from interplay.export import ExportOptions, export
from interplay.interception import InterceptionServer
from interplay.model import tokens
from interplay.model.client import ModelClient
from interplay.run import Rollouts
from interplay.run.episode import RunResources, run_episode
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values import records, splicing
from interplay.values.records import Episode, ModelCall, Task

ASK = [{"role": "user", "content": "Name a colour."}]


def decoded(model: ScriptedModel, call: ModelCall) -> str:
    assert call.tokens is not None and call.tokens.completion_ids is not None
    return model.tokenizer.decode(call.tokens.completion_ids)


def assert_complete(call: ModelCall) -> None:
    t = call.tokens
    assert t is not None and t.missing == [] and t.warnings == [], t
    assert t.prompt_ids and t.completion_ids and t.logprobs
    assert len(t.completion_ids) == len(t.logprobs)
    assert call.usage is not None and call.usage.completion_tokens == len(t.completion_ids)


@pytest.mark.parametrize("transport", ["aiohttp", "openai"])
@pytest.mark.parametrize("stream", [False, True])
async def test_the_client_records_ids_and_logprobs_and_keeps_them_out_of_the_response(
        stream: bool, transport: str) -> None:
    async with ScriptedModel(["red is a colour", "plain"]) as m:
        client = ModelClient(attrs.evolve(m.endpoint, transport=transport))
        call = await client.chat(ASK, stream=stream, capture=True)
        plain = await client.chat(ASK, stream=stream)
        await client.aclose()
    assert call.error is None and call.finish_reason == "stop"
    assert_complete(call)
    assert decoded(m, call) == "red is a colour"
    assert m.tokenizer.decode(call.tokens.prompt_ids, special=True) == \
        "<|user|>Name a colour.<|end|><|assistant|>"
    # The reply's last id is the end token, as a model's end-of-turn token is.
    assert m.tokenizer.decode(call.tokens.completion_ids[-1:], special=True) == "<|end|>"
    # vLLM's fields went out; what came back of them is on tokens, not in the response.
    sent = m.requests[0].body
    assert sent["return_token_ids"] is True and sent["logprobs"] is True
    assert call.request["return_token_ids"] is True
    response = call.parsed_response()
    assert "prompt_token_ids" not in response
    assert response["choices"][0].get("logprobs") is None
    assert "token_ids" not in response["choices"][0]
    # A call without capture asks for nothing and records no tokens.
    assert plain.tokens is None and "return_token_ids" not in m.requests[1].body


async def test_logprobs_name_the_ids_when_the_endpoint_returns_no_token_ids() -> None:
    """An older vLLM: no token_ids, but logprob tokens written token_id:N."""

    def handler(request: Any) -> ScriptedReply:
        request.body.pop("return_token_ids")  # as a server that does not know the field
        return ScriptedReply.text("blue and green")

    async with ScriptedModel(handler) as m:
        client = ModelClient(m.endpoint)
        call = await client.chat(ASK, capture=True)
        await client.aclose()
    t = call.tokens
    assert t.prompt_ids is None and t.missing == ["prompt_ids"]
    assert m.tokenizer.decode(t.completion_ids) == "blue and green"
    assert len(t.logprobs) == 4 and t.warnings == []  # three words and the end token


@pytest.mark.parametrize("stream", [False, True])
async def test_what_an_endpoint_does_not_return_is_recorded_never_invented(
        stream: bool) -> None:
    replies = [ScriptedReply.text("no tokens here").without_tokens(),
               ScriptedReply.text("ids only").with_tokens([7, 8], None),
               ScriptedReply.text("three ids").with_tokens([1, 2, 3], [-0.5, -0.25])]
    async with ScriptedModel(replies) as m:
        client = ModelClient(m.endpoint)
        none, ids_only, uneven = [await client.chat(ASK, stream=stream, capture=True)
                                  for _ in replies]
        await client.aclose()
    assert none.tokens == records.Tokens(missing=["prompt_ids", "completion_ids", "logprobs"])
    assert list(ids_only.tokens.completion_ids) == [7, 8] and ids_only.tokens.logprobs is None
    assert ids_only.tokens.missing == ["logprobs"]
    assert "completion ids without logprobs" in ids_only.tokens.warnings
    assert list(uneven.tokens.completion_ids) == [1, 2, 3]
    assert "2 logprobs for 3 completion ids" in uneven.tokens.warnings


async def test_an_endpoint_that_refuses_the_fields_says_what_to_change() -> None:
    refused = ScriptedReply(status=400, content="Unrecognized request argument supplied: "
                                                "return_token_ids")
    async with ScriptedModel([refused]) as m:
        client = ModelClient(attrs.evolve(m.endpoint, max_retries=0))
        call = await client.chat(ASK, capture=True)
        await client.aclose()
    assert call.error_type is not None and call.tokens is None
    assert "capture_tokens = false" in call.error and "return_token_ids" in call.error


def test_reading_checks_counts_against_usage_and_the_entry_ids() -> None:
    response = {"prompt_token_ids": [1, 2, 3], "choices": [{
        "index": 0, "token_ids": [5, 6],
        "logprobs": {"content": [{"token": "token_id:5", "logprob": -0.1234567891234},
                                 {"token": "token_id:9", "logprob": -2.0}]}}]}
    t = tokens.from_chat(response, records.Usage(4, 2, 6))
    assert list(t.logprobs) == [-0.123456789, -2.0]  # float32's digits
    assert "the logprob entries name other ids than token_ids" in t.warnings
    assert "usage counts 4 prompt tokens, the endpoint returned 3 ids" in t.warnings
    bad = tokens.from_chat({"choices": [{"token_ids": ["x"], "logprobs": {
        "content": [{"token": "a"}]}}]}, None)
    assert bad.completion_ids is None and bad.logprobs is None
    assert bad.missing == ["prompt_ids", "completion_ids", "logprobs"]
    assert len(bad.warnings) == 2


async def test_only_trainable_seats_ask_for_tokens() -> None:
    """The user-sim env: the assistant is trainable, the modeled user is not."""
    env = UserSimEnv()
    task = Task(idx=0, prompt="You want to know the capital of France.",
                system_prompt="You answer geography questions.", answer="Paris")
    async with ScriptedModel(lambda r: ScriptedReply.text("Paris, done")) as m:
        endpoint = attrs.evolve(m.endpoint, capture_tokens=True)
        resources = RunResources(endpoint=endpoint,
                                 seats={"user": {"sampling": {"max_tokens": 20}}})
        try:
            episode = await run_episode(env, task, resources=resources, seed=0)
        finally:
            await resources.aclose()
    assistant, user = episode.trace("assistant"), episode.trace("user")
    assert assistant.trainable and not user.trainable
    assert assistant.model_calls and all(c.tokens is not None and c.tokens.completion_ids
                                         for c in assistant.model_calls)
    assert user.model_calls and all(c.tokens is None for c in user.model_calls)
    assert all("return_token_ids" not in c.request for c in user.model_calls)
    # The episode line keeps them, as compact lists, and reads back the same.
    line = splicing.to_json_bytes(episode)
    assert b'"completion_ids":[' in line
    assert records.from_json(line, Episode) == episode


@attrs.define
class Through:
    model: ScriptedModel
    server: InterceptionServer
    calls: list[ModelCall]
    sdk: openai.AsyncOpenAI
    base_url: str
    secret: str


@pytest.fixture(params=["chat", "responses"])
async def through(request: pytest.FixtureRequest) -> AsyncIterator[Through]:
    """A capturing trace through the interception server, to an upstream that serves Chat
    Completions only (Responses translated) or the Responses API too (forwarded)."""
    async with ScriptedModel(lambda r: ScriptedReply.text("teal is a colour")) as m:
        client = ModelClient(attrs.evolve(m.endpoint, api=request.param))
        calls: list[ModelCall] = []
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=client, on_call=calls.append, capture=True)
            sdk = openai.AsyncOpenAI(base_url=route.base_url, api_key=route.secret,
                                     max_retries=0)
            yield Through(m, srv, calls, sdk, route.base_url, route.secret)
            await sdk.close()
        await client.aclose()


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_completions_through_interception(through: Through, stream: bool) -> None:
    if stream:
        chunks = [c async for c in await through.sdk.chat.completions.create(
            model="any", messages=ASK, stream=True)]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        extras = [c.model_extra for c in chunks] + [
            ch.model_extra for c in chunks for ch in c.choices]
        assert all(ch.logprobs is None for c in chunks for ch in c.choices)
    else:
        answer = await through.sdk.chat.completions.create(model="any", messages=ASK)
        text = answer.choices[0].message.content
        extras = [answer.model_extra, answer.choices[0].model_extra]
        assert answer.choices[0].logprobs is None
    # The program asked for no tokens and gets none; the trace has them.
    assert text == "teal is a colour"
    assert not any(k in e for e in extras for k in ("prompt_token_ids", "token_ids"))
    (call,) = through.calls
    assert_complete(call)
    assert decoded(through.model, call) == "teal is a colour"
    assert "return_token_ids" not in call.request  # the request as the program sent it


async def test_a_program_that_asks_for_logprobs_gets_them(through: Through) -> None:
    answer = await through.sdk.chat.completions.create(model="any", messages=ASK,
                                                       logprobs=True)
    assert [e.logprob for e in answer.choices[0].logprobs.content] == \
        list(through.calls[0].tokens.logprobs)
    assert "token_ids" not in answer.choices[0].model_extra


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_through_interception(through: Through, stream: bool) -> None:
    if stream:
        async with through.sdk.responses.stream(model="any", input="Name a colour.") as s:
            response = await s.get_final_response()
    else:
        response = await through.sdk.responses.create(model="any", input="Name a colour.")
    assert response.output_text == "teal is a colour"
    (call,) = through.calls
    assert call.api == "responses"
    assert_complete(call)
    assert decoded(through.model, call) == "teal is a colour"
    sent = through.model.requests[0]
    if through.model.requests[0].api == "responses":  # forwarded as it is: vLLM's fields
        assert sent.body["enable_response_messages"] is True
        assert "message.output_text.logprobs" in sent.body["include"]
        stored = call.parsed_response()
        assert "input_messages" not in stored and "output_messages" not in stored
    else:  # translated: Chat Completions upstream
        assert sent.body["return_token_ids"] is True


@pytest.mark.parametrize("stream", [False, True])
async def test_messages_through_interception(stream: bool) -> None:
    """An Anthropic Messages program's calls are captured as any other's: the ids and logprobs
    on the trace, none of them in what the program reads."""
    async with ScriptedModel(lambda r: ScriptedReply.text("teal is a colour")) as m:
        client = ModelClient(m.endpoint)
        calls: list[ModelCall] = []
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=client, on_call=calls.append, capture=True)
            async with httpx.AsyncClient() as http:
                r = await http.post(srv.root_url + "/v1/messages",
                                    headers={"x-api-key": route.secret},
                                    json={"model": "any", "max_tokens": 20, "messages": ASK,
                                          "stream": stream})
        await client.aclose()
    assert r.status_code == 200
    assert "token_ids" not in r.text and "logprobs" not in r.text
    (call,) = calls
    assert call.api == "messages"
    assert_complete(call)
    assert decoded(m, call) == "teal is a colour"
    assert m.requests[0].body["return_token_ids"] is True


async def test_a_trace_without_capture_asks_nothing_through_interception() -> None:
    async with ScriptedModel(["ok"]) as m:
        client = ModelClient(m.endpoint)
        calls: list[ModelCall] = []
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=client, on_call=calls.append)
            async with httpx.AsyncClient() as http:
                r = await http.post(route.base_url + "/chat/completions",
                                    headers={"authorization": f"Bearer {route.secret}"},
                                    content=json.dumps({"model": "x", "messages": ASK}))
        await client.aclose()
    assert r.status_code == 200 and calls[0].tokens is None
    assert "logprobs" not in m.requests[0].body


def test_the_embedded_models_generation_holds_back_what_may_begin_a_stop_string() -> None:
    from interplay.model import local_generation as lg

    assert lg._stop_at("Hello.\nUser: hi", ["\nUser:"]) == 6
    assert lg._stop_at("Hello", ["\nUser:"]) is None
    # "Hello\nUs" may be the start of "\nUser:": three characters wait for the next token.
    assert lg._held("Hello\nUs", ["\nUser:", "END"]) == 3
    assert lg._held("Hello", ["\nUser:"]) == 0
    assert lg.Asked.of({"logprobs": True, "top_logprobs": 2}) == lg.Asked(
        ids=False, logprobs=True, top_logprobs=2)
    for bad in ({"top_logprobs": 21}, {"logprobs": 3}, {"return_token_ids": "yes"}):
        with pytest.raises(ValueError):
            lg.Asked.of(bad)


def sorter(ids: tuple[int, ...] | None) -> Callable[[ScriptedRequest], ScriptedReply]:
    """alphabet-sort's answers: the names asked for, sorted; sampled as ``ids`` when given
    (a split the scripted tokenizer would not make of the text)."""

    def answer(request: ScriptedRequest) -> ScriptedReply:
        names = request.last_user_text().split(":")[-1]
        text = ", ".join(sorted(n.strip(" .") for n in names.split(",")))
        if ids is None:
            return ScriptedReply.text(text)
        return ScriptedReply(content=text, completion_ids=ids,
                             logprobs=tuple(-0.5 for _ in ids), tokens_given=True)

    return answer


@pytest.mark.parametrize("ignored", [False, True])
async def test_each_call_of_a_trace_sends_the_ids_it_continues_from(
        tmp_path: Path, ignored: bool) -> None:
    """alphabet-sort, three turns: each call after the first sends the previous call's prompt
    and completion ids. The scripted endpoint ignores them and re-tokenizes; where the
    sampled ids are not what re-tokenizing gives, each call says where it left them, and the
    trace is counted as re-tokenized by export rather than exported."""
    sampled = (900001, 900002) if ignored else None
    async with ScriptedModel(sorter(sampled)) as model:
        endpoint = attrs.evolve(model.endpoint, capture_tokens=True)
        async with Rollouts("alphabet-sort", model=endpoint, output=tmp_path) as runner:
            [group] = [g async for g in runner.groups(n=1)]
    calls = group.episodes[0].trace("assistant").model_calls
    assert len(calls) == 3 and all(c.error is None for c in calls)
    sent = [r.body.get(tokens.PREFIX_FIELD) for r in model.requests]
    assert sent[0] is None
    for before, now in zip(calls[:-1], sent[1:], strict=True):
        assert now == [*before.tokens.prompt_ids, *before.tokens.completion_ids]
    diverged = [c.tokens.diverged_at for c in calls]
    if ignored:
        assert diverged == [None, *(len(c.tokens.prompt_ids) for c in calls[:-1])]
    else:
        assert diverged == [None, None, None]
    result = export(tmp_path / "step-00000", tmp_path / "rows.jsonl",
                    ExportOptions(format="rl", unit="trace"))
    if ignored:
        assert result.rows == 0 and [n for r, n in result.skipped.items()
                                     if r.startswith("traces the endpoint re-tokenized")] == [1]
    else:
        assert result.rows == 1 and result.skipped == {}


async def test_an_intercepted_trace_sends_the_ids_it_continues_from() -> None:
    async with ScriptedModel(lambda r: ScriptedReply.text("teal")) as m:
        client = ModelClient(m.endpoint)
        calls: list[ModelCall] = []
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=client, on_call=calls.append, capture=True,
                                   prefix=lambda: tokens.continuation(calls))
            sdk = openai.AsyncOpenAI(base_url=route.base_url, api_key=route.secret,
                                     max_retries=0)
            await sdk.chat.completions.create(model="any", messages=ASK)
            await sdk.responses.create(model="any", input=[
                *ASK, {"role": "assistant", "content": "teal"},
                {"role": "user", "content": "Another."}])
            await sdk.close()
        await client.aclose()
    first, second = calls
    assert tokens.PREFIX_FIELD not in m.requests[0].body
    assert m.requests[1].body[tokens.PREFIX_FIELD] == [*first.tokens.prompt_ids,
                                                        *first.tokens.completion_ids]
    assert second.tokens.diverged_at is None
