"""Every builtin step declares what it writes: a verifier's ``check(steps)`` reads a step's
``writes`` to know that the results key it scores will be there (docs/plugins.md), so a step
whose ``writes`` is short of what it writes gets its verifiers refused, and one that declares
more lets them through to a key that never comes. Each builtin env's steps are run here, one at
a time over real HTTP against the scripted model, and each step's ``writes`` is compared with
the keys it added to ``ctx.results``."""

from __future__ import annotations

import json

import pytest

from interplay.plugins import host as plugins
from interplay.run.episode import LiveEpisodeContext, RunResources
from interplay.run.loader import env_class
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values.records import EpisodeInfo

ENVS = ["echo", "echo-toml", "user-sim", "user-sim-tools", "alphabet-sort", "color-codeword",
        "wordle", "always-on-sitting"]


def answer(request: ScriptedRequest) -> ScriptedReply:
    system = json.dumps(request.messages[:1])
    if "role-playing a user" in system:
        return ScriptedReply.text("###DONE###")
    if "always-on assistant" in json.dumps(request.messages) and \
            request.messages[-1]["role"] != "tool":
        return ScriptedReply.tool_call("message_user", {"text": "On it."})
    return ScriptedReply.text("CRANE")


def test_every_builtin_step_is_covered() -> None:
    """The envs below run every builtin step (a new builtin step needs an env here)."""
    builtin = {name for info in plugins.host().plugin_infos() if info.builtin
               for name in info.registered.get("steps", ())}
    assert {"one_shot", "relay", "user_sim", "always_on"} <= builtin
    covered = {step.name for name in ENVS for step in env_class(name)().steps()}
    assert builtin <= covered, f"no env here runs {sorted(builtin - covered)}"


@pytest.mark.parametrize("env_name", ENVS)
async def test_each_steps_writes_are_the_keys_it_wrote(env_name: str) -> None:
    env = env_class(env_name)()
    env.check()
    task = next(iter(env.tasks()))
    async with ScriptedModel(answer) as model:
        resources = RunResources(endpoint=model.endpoint)
        ctx = LiveEpisodeContext(env=env, task=task, resources=resources,
                             info=EpisodeInfo(episode_id="writes", env=env.name,
                                              task_idx=task.idx))
        try:
            for step in env.steps():
                before = set(ctx.results)
                await step.run(ctx)
                wrote = set(ctx.results) - before
                assert wrote == set(step.writes), (
                    f"step {step.name!r} declares writes={sorted(step.writes)} but wrote "
                    f"{sorted(wrote)}")
        finally:
            ctx.release()
            await resources.aclose()
