"""The embedded model's server ends a reply that only repeats itself (RepeatStop): checked on
token arrays, then on the real model asked to repeat a sentence."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from interplay.model.local_server import RepeatStop


def ids(*tokens: int) -> np.ndarray:
    return np.array(tokens, dtype=np.intc)


def test_a_span_found_whole_earlier_in_the_reply_is_a_repeat() -> None:
    stop = RepeatStop(eos=2, span=4)
    assert stop.repeats(ids(9, 1, 2, 3, 4, 5, 1, 2, 3, 4))
    assert not stop.repeats(ids(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
    # Overlapping the tail is not a repeat (a run of one token is left to max_tokens).
    assert not stop.repeats(ids(7, 7, 7, 7, 7, 7, 7))
    # Bytes that match across token boundaries are not tokens that match.
    assert not stop.repeats(ids(256, 1, 0, 0, 5, 6, 7, 8, 9, 10, 11))
    assert not stop.repeats(ids(1, 2, 3))


def test_it_leaves_only_the_end_of_turn_once_the_reply_repeats() -> None:
    stop = RepeatStop(eos=2, span=2)
    prompt = [50, 51, 52]
    scores = np.zeros(8, dtype=np.single)
    assert (stop(ids(*prompt), scores.copy()) == 0).all()  # the prompt: nothing generated yet
    assert (stop(ids(*prompt, 3, 4, 5), scores.copy()) == 0).all()
    ended = stop(ids(*prompt, 3, 4, 5, 3, 4), scores.copy())
    assert ended[2] == 0 and np.isneginf(np.delete(ended, 2)).all()
    # Once ended, it stays ended.
    assert np.isneginf(stop(ids(*prompt, 3, 4, 5, 3, 4, 9), scores.copy())[0])


@pytest.mark.local_model
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                    reason="the embedded model is not installed (bash .ci/setup)")
async def test_the_real_model_stops_repeating_itself_before_max_tokens() -> None:
    from interplay.config.endpoint import Endpoint
    from interplay.model.client import ModelClient, Models
    from interplay.model.wire import assistant_message
    from interplay.values.records import Message

    models = Models()
    try:
        client: ModelClient = models.client(Endpoint())
        call = await client.chat([Message("user", "Write the sentence 'I like green apples "
                                           "very much.' one hundred times, nothing else.")],
                                 max_tokens=400, temperature=0)
    finally:
        await models.aclose()
    assert call.error is None, call.error
    message = assistant_message(call)
    assert message is not None and message.text
    assert call.usage is not None and call.usage.completion_tokens < 400
    assert call.finish_reason == "stop"
