"""Token capture on the embedded model: it samples the tokens itself, so the ids it returns
decode, with the model's own tokenizer, to the text it answered; on both paths (the direct
client and the interception server), streamed and not. Skipped only when llama_cpp is not
installed."""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import openai
import pytest

from interplay.interception import InterceptionServer
from interplay.model import LocalTokenizer, local_tokenizer
from interplay.model.client import ModelClient
from interplay.model.local import LocalModel
from interplay.model.wire import assistant_message
from interplay.testing import needs_local_model
from interplay.values.records import ModelCall

pytestmark = [*needs_local_model, pytest.mark.slow]

ASK = [{"role": "system", "content": "You are terse."},
       {"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def local() -> Iterator[LocalModel]:
    with LocalModel() as model:
        yield model


@pytest.fixture(scope="module")
def vocab() -> LocalTokenizer:
    """The model's tokenizer alone (no weights), as a trainer holds it: the documented
    helper."""
    return local_tokenizer()


def check_call(call: ModelCall, text: str, vocab: LocalTokenizer, eos: int) -> None:
    t = call.tokens
    assert call.error is None, call.error
    assert t is not None and t.missing == [] and t.warnings == [], t
    assert len(t.completion_ids) == len(t.logprobs) == call.usage.completion_tokens
    assert len(t.prompt_ids) == call.usage.prompt_tokens
    assert all(lp <= 0 for lp in t.logprobs)
    # The ids are what was sampled: they decode to the text the call recorded, and a reply
    # that ended by itself ends with the end-of-turn token.
    assert vocab.decode(t.completion_ids) == text
    if call.finish_reason == "stop":
        assert t.completion_ids[-1] == eos
    prompt = vocab.decode(t.prompt_ids, special=True)
    assert "Name a colour." in prompt and prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("stream", [False, True])
async def test_the_client_captures_what_the_embedded_model_sampled(
        local: LocalModel, vocab: LocalTokenizer, stream: bool) -> None:
    client = ModelClient(local.endpoint)
    call = await client.chat(ASK, stream=stream, capture=True, max_tokens=12, seed=7)
    again = await client.chat(ASK, stream=not stream, capture=True, max_tokens=12, seed=7)
    await client.aclose()
    check_call(call, assistant_message(call).text, vocab, vocab.llama.token_eos())
    # The same seed samples the same ids, streamed or not.
    assert again.tokens.completion_ids == call.tokens.completion_ids
    assert again.tokens.logprobs == pytest.approx(call.tokens.logprobs, abs=1e-4)


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("stream", [False, True])
async def test_capture_through_interception(local: LocalModel, vocab: LocalTokenizer, api: str,
                                            stream: bool) -> None:
    client = ModelClient(local.endpoint)
    calls: list[ModelCall] = []
    async with InterceptionServer() as srv:
        route = srv.open_trace(client=client, on_call=calls.append, capture=True,
                               sampling={"seed": 3})
        sdk = openai.AsyncOpenAI(base_url=route.base_url, api_key=route.secret, max_retries=0)
        if api == "chat" and stream:
            chunks = [c async for c in await sdk.chat.completions.create(
                model="any", messages=ASK, max_tokens=10, stream=True)]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert all("token_ids" not in ch.model_extra for c in chunks for ch in c.choices)
        elif api == "chat":
            answer = await sdk.chat.completions.create(model="any", messages=ASK,
                                                       max_tokens=10)
            text = answer.choices[0].message.content
            assert answer.choices[0].logprobs is None
        elif stream:
            async with sdk.responses.stream(model="any", input=ASK,
                                            max_output_tokens=10) as s:
                text = (await s.get_final_response()).output_text
        else:
            text = (await sdk.responses.create(model="any", input=ASK,
                                               max_output_tokens=10)).output_text
        await sdk.close()
    await client.aclose()
    (call,) = calls
    check_call(call, text, vocab, vocab.llama.token_eos())


async def test_top_logprobs_rank_the_alternatives(local: LocalModel) -> None:
    client = ModelClient(local.endpoint)
    call = await client.chat(ASK, logprobs=True, top_logprobs=3, max_tokens=6, seed=1)
    await client.aclose()
    entries = call.parsed_response()["choices"][0]["logprobs"]["content"]
    assert len(entries) == call.usage.completion_tokens
    for entry in entries:
        tops = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert entry["logprob"] <= tops[0] + 1e-6


async def test_a_tool_answer_comes_without_tokens_and_is_recorded_so(local: LocalModel) -> None:
    client = ModelClient(local.endpoint)
    tool = {"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"colour": {"type": "string"}}}}}
    call = await client.chat(ASK, tools=[tool], capture=True, max_tokens=24,
                             tool_choice={"type": "function", "function": {"name": "pick"}})
    await client.aclose()
    assert call.error is None and assistant_message(call).tool_calls
    assert call.tokens.missing == ["prompt_ids", "completion_ids", "logprobs"]


def test_the_local_tokenizer_encodes_and_decodes_offline() -> None:
    vocab = local_tokenizer()
    ids = vocab.encode("Name a colour.")
    assert ids and vocab.decode(ids) == "Name a colour."
    assert vocab.decode(vocab.encode("<|im_start|>", special=True), special=True) == \
        "<|im_start|>"


async def test_a_call_continues_from_the_ids_its_trace_sampled(local: LocalModel,
                                                               vocab: LocalTokenizer) -> None:
    """The server reads the previous call's ids as they are: a reply given split otherwise
    than its text tokenizes (a character at a time) stays so in the next prompt."""
    client = ModelClient(local.endpoint)
    first = await client.chat(ASK, capture=True, max_tokens=8, seed=5)
    reply = assistant_message(first).text
    assert reply
    split = [i for ch in reply for i in vocab.encode(ch)]
    assert split != vocab.encode(reply)  # a split of its own
    prefix = [*first.tokens.prompt_ids, *split, vocab.llama.token_eos()]
    turn = [*ASK, {"role": "assistant", "content": reply},
            {"role": "user", "content": "Another."}]
    call = await client.chat(turn, capture=True, prefix=prefix, max_tokens=8, seed=5)
    assert call.error is None and call.tokens.diverged_at is None
    assert list(call.tokens.prompt_ids[:len(prefix)]) == prefix
    assert vocab.decode(call.tokens.prompt_ids, special=True).endswith(
        "Another.<|im_end|>\n<|im_start|>assistant\n")
    # A prefix whose text the conversation does not hold (the reply was changed) is not
    # continued: the prompt is the conversation tokenized, and the call says where it left it.
    changed = [*turn[:2], {"role": "assistant", "content": reply + " Changed."}, turn[3]]
    other = await client.chat(changed, capture=True, prefix=prefix, max_tokens=8, seed=5)
    at = other.tokens.diverged_at
    assert at is not None and len(first.tokens.prompt_ids) <= at < len(prefix)
    # With continue_tokens off nothing is sent, and the re-tokenized prompt says where.
    off = ModelClient(attrs.evolve(local.endpoint, continue_tokens=False))
    plain = await off.chat(turn, capture=True, prefix=prefix, max_tokens=8, seed=5)
    assert "required_prefix_token_ids" not in plain.request
    at = plain.tokens.diverged_at
    assert at is not None and len(first.tokens.prompt_ids) <= at < len(prefix)
    await client.aclose()
    await off.aclose()
