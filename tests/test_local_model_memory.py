"""The embedded model's server holds its memory flat: the conversation states it keeps are
counted by every byte they hold and kept without llama-cpp-python's score buffer, one per
conversation; on the real model, its resident memory stays within a bound over a few hundred
calls while a conversation's next call still starts from its kept state."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                reason="llama_cpp is not installed (run: bash .ci/setup)")


def state(tokens: list[int], size: int) -> Any:
    from llama_cpp import LlamaState

    return LlamaState(input_ids=np.array(tokens, dtype=np.intc),
                      scores=np.zeros((0, 0), dtype=np.single), n_tokens=len(tokens),
                      llama_state=bytes(size), llama_state_size=size, seed=0)


def test_a_conversation_keeps_one_state_and_every_byte_is_counted() -> None:
    from interplay.model.local_states import StateCache

    cache = StateCache(capacity_bytes=10_000)
    cache[[1, 2, 3]] = state([1, 2, 3], 1000)
    cache[[1, 2, 3, 4, 5]] = state([1, 2, 3, 4, 5], 1000)  # the same conversation, later
    assert list(cache.states) == [(1, 2, 3, 4, 5)]
    assert cache.cache_size == 1000 + 5 * 4
    cache[[1, 2, 9]] = state([1, 2, 9], 1000)  # another one sharing a prefix: both kept
    assert cache[[1, 2, 3, 4, 5, 6]].n_tokens == 5
    assert cache[[1, 2, 9, 9]].n_tokens == 3
    with pytest.raises(KeyError):
        cache[[7, 8]]
    assert [7, 8] not in cache and [1, 2] in cache


def test_the_least_recently_used_states_go_once_their_bytes_pass_the_capacity() -> None:
    from interplay.model.local_states import StateCache

    cache = StateCache(capacity_bytes=3 * 1004)
    for first in (1, 2, 3):
        cache[[first]] = state([first], 1000)
    cache[[1]]  # used again: now the most recent
    cache[[4]] = state([4], 1000)
    assert sorted(cache.states) == [(1,), (3,), (4,)]
    assert cache.cache_size == 3 * 1004
    cache[[5]] = state([5], 5000)  # larger than the capacity alone: the latest but one stays
    assert list(cache.states) == [(4,), (5,)] and cache.cache_size == 1004 + 5004


def test_the_two_seats_states_stay_when_each_is_near_the_capacity() -> None:
    """An episode's two seats take turns: a long prompt's state (an agent's policy and tools)
    and the other seat's both stay, however large, so neither seat reads its prompt again."""
    from interplay.model.local_states import StateCache

    cache = StateCache(capacity_bytes=10_000)
    agent, user = [1] * 50, [2] * 10
    for _ in range(3):
        cache[agent] = state(agent, 9_000)
        cache[user] = state(user, 2_000)
        assert cache[[*agent, 3]].n_tokens == len(agent)  # the agent's next call finds its own
        agent, user = [*agent, 3, 4], [*user, 5]
    assert len(cache.states) == 2 and cache.cache_size > cache.capacity_bytes
    cache[[7]] = state([7], 100)  # a third conversation: the least recently used one goes
    assert sorted(len(k) for k in cache.states) == [1, len(agent) - 2]
    assert cache.cache_size == 9_000 + 4 * (len(agent) - 2) + 104


# -- on the real model ---------------------------------------------------------------------------

SYSTEM = ("You answer questions about a tea shop's orders, deliveries and refunds, briefly. "
          "Refunds: 30 days for unopened items. Deliveries: three to five working days. ") * 12


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def ask(client: httpx.Client, url: str, messages: list[dict[str, str]], way: str) -> str:
    body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": 6, "seed": 1}
    if way == "tokens":
        body.update(return_token_ids=True, logprobs=True)
    if way == "stream":
        body["stream"] = True
        with client.stream("POST", f"{url}/chat/completions", json=body) as r:
            r.raise_for_status()
            return "".join(r.iter_lines())[:40] or "..."
    r = client.post(f"{url}/chat/completions", json=body)
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"] or "..."


@pytest.mark.slow
@pytest.mark.local_model
def test_the_servers_memory_stays_flat_over_a_hundred_calls() -> None:
    """Conversations of some 600 tokens each, two at a time taking turns (as an episode's
    seats do), every way the server generates. Before the states were kept without the score
    buffer, each kept state held some 100 MB more than was counted: gigabytes within 50
    calls, so the 60 calls after the first 30 show it many times over the bound
    (benchmarks/bench_local_memory.py measures a long run)."""
    from interplay.model.local import LocalModel

    calls, settle, bound_mb = 90, 30, 150
    ways = itertools.cycle(["plain", "stream", "tokens"])
    with LocalModel() as model, httpx.Client(timeout=120) as client:
        assert model.proc is not None and model.base_url is not None
        pid, url = model.proc.pid, model.base_url
        after_settle = 0.0
        for n in range(calls):
            pair = n // 6  # two conversations of three turns each
            seat = n % 2
            history = [{"role": "system", "content": f"{SYSTEM} Case {pair}, seat {seat}."}]
            for turn in range(n % 6 // 2 + 1):
                history += [{"role": "user", "content": f"Question {turn} of case {pair}?"},
                            {"role": "assistant", "content": f"Answer {turn}."}]
            ask(client, url, history[:-1], next(ways))
            if n + 1 == settle:
                after_settle = rss_mb(pid)
        grown = rss_mb(pid) - after_settle
    assert grown < bound_mb, f"RSS grew {grown:.0f} MB from call {settle} to call {calls}"


@pytest.mark.slow
@pytest.mark.local_model
def test_a_kept_state_has_no_scores_and_answers_as_the_prompt_read_afresh() -> None:
    """What the states are kept for: a conversation's next request starts from its kept
    state (loaded back, the prompt's new part read) and samples what it would from scratch."""
    from interplay.model.local import model_path
    from interplay.model.local_states import StateCache, StateLlama

    llm = StateLlama(model_path=str(model_path()), n_ctx=2048, n_threads=1, verbose=False)
    llm.set_cache(StateCache())
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello?"}]
    reply = llm.create_chat_completion(first, max_tokens=8, temperature=0.0)
    (kept,) = llm.cache.states.values()
    assert kept.scores.size == 0 and kept.n_tokens == len(kept.input_ids)
    llm.create_chat_completion([{"role": "user", "content": "Another conversation."}],
                               max_tokens=4, temperature=0.0)  # the other seat's turn
    after = [*first, reply["choices"][0]["message"],
             {"role": "user", "content": "Where is my order?"}]
    loaded: list[Any] = []
    load = llm.load_state
    llm.load_state = lambda s: (loaded.append(s), load(s))[1]  # type: ignore[method-assign]
    resumed = llm.create_chat_completion(after, max_tokens=12, temperature=0.0)
    assert loaded == [kept]  # it went on from the kept state
    llm.set_cache(None)
    llm.reset()
    fresh = llm.create_chat_completion(after, max_tokens=12, temperature=0.0)
    assert resumed["choices"][0]["message"]["content"] == \
        fresh["choices"][0]["message"]["content"]
