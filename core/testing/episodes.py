"""One episode of an env against the scripted model, for tests of envs, steps and verifiers.

It owns only the set-up and tear-down every such test repeats: start a :class:`ScriptedModel`,
run the episode through the real runner pieces (``RunResources``, ``run_episode``), close them,
and hand back the episode with the requests the model received.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from interplay.env import Env
from interplay.episode import RunResources, run_episode
from interplay.records import Episode, Task
from interplay.testing.scripted import Script, ScriptedModel, ScriptedRequest


@attrs.define
class ScriptedRun:
    episode: Episode
    requests: list[ScriptedRequest]


async def run_scripted(env: Env, task: Task, script: Script, *, seed: int | None = 0,
                       rollout: int = 0,
                       seats: Mapping[str, Mapping[str, Any]] | None = None) -> ScriptedRun:
    """Run ``task`` through ``env`` with every seat answered by ``script`` (a list of replies
    or a handler, as for :class:`ScriptedModel`); ``seats`` overrides seat settings as
    ``--set seats.<seat>...`` does."""
    async with ScriptedModel(script) as model:
        resources = RunResources(endpoint=model.endpoint, seats=seats)
        try:
            episode = await run_episode(env, task, resources=resources, seed=seed,
                                        rollout=rollout)
        finally:
            await resources.aclose()
        return ScriptedRun(episode, list(model.requests))
