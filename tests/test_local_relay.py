"""One user-sim relay on the embedded model: both seats are real llama.cpp completions.

The 135M model's answers are not judged here; what is checked is that a real model drives the
whole exchange (two sessions, masked prompt, turn cap) and that the episode is recorded whole.
"""

from __future__ import annotations

import importlib.util

import pytest

from interplay.builtin_envs.steps import RelayConfig
from interplay.config.endpoint import Endpoint
from interplay.run.episode import RunResources, run_episode
from interplay.run.loader import env_class

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama_cpp is not installed (run: bash .ci/setup)"),
]


async def test_relay_on_the_embedded_model() -> None:
    env_cls = env_class("user-sim")
    env = env_cls(env_cls.Config(relay=RelayConfig(max_turns=2)))
    env.check()
    task = next(iter(env.tasks()))
    short = {"sampling": {"max_tokens": 24, "temperature": 0.0}}
    resources = RunResources(endpoint=Endpoint(base_url=None),
                             seats={"assistant": short, "user": short})
    try:
        episode = await run_episode(env, task, resources=resources, seed=1)
    finally:
        await resources.aclose()
    assert episode.error is None, episode.error
    assistant, user = episode.trace("assistant"), episode.trace("user")
    assert 1 <= episode.results["relay"]["turns"] <= 2
    assert assistant.stop_condition in {"user_done", "max_turns"}
    assert all(c.error_type is None and c.usage and c.usage.completion_tokens > 0
               for c in assistant.model_calls + user.model_calls)
    # The assistant never saw the scenario (its prompt was masked); the user's model did.
    scenario = str(task.prompt)
    assert not any(scenario in str(c.request) for c in assistant.model_calls)
    assert scenario in str(user.model_calls[0].request)
    assert episode.reward is not None
