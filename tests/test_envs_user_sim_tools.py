"""user-sim-tools end to end over real HTTP: a modeled user, a tool-using assistant, a tool call
crossing mid-conversation, and a reward read from the tools' effect on the world."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from interplay.builtin_envs.shop import InitState, InitStateConfig
from interplay.builtin_verifiers.state import StateMatch, StateMatchConfig, differences
from interplay.contracts.env import Env
from interplay.errors import InterplayError
from interplay.plugins import host as plugins
from interplay.run.episode import RunResources, run_episode
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, run_scripted
from interplay.values.records import Episode

Script = Sequence[str | ScriptedReply]


async def converse(user: Script, assistant: Script, *, task_idx: int = 0
                   ) -> tuple[Episode, list[ScriptedRequest]]:
    """Run one episode; the user sim's and the assistant's requests get their own scripts
    (the assistant's requests are the ones that offer tools)."""
    queues = {"user": list(user), "assistant": list(assistant)}

    def handler(req: ScriptedRequest) -> str | ScriptedReply:
        side = "assistant" if req.body.get("tools") else "user"
        assert queues[side], f"the {side} script ran out"
        return queues[side].pop(0)

    env: Env = plugins.get("envs", "user-sim-tools")()
    env.check()
    task = list(env.tasks())[task_idx]
    run = await run_scripted(env, task, handler, seed=1)
    assert queues == {"user": [], "assistant": []}, "every scripted line was used"
    return run.episode, run.requests


WIN_USER = ["Hi, please cancel my order #1042, I ordered it by mistake.", "Yes, go ahead.",
            "###DONE###"]
WIN_ASSISTANT = [
    ScriptedReply.tool_call("find_order", {"order_id": "1042"}),
    "I found order #1042 (a desk lamp and bulbs), still pending. Shall I cancel it as "
    "ordered by mistake?",
    ScriptedReply.tool_call("cancel_order", {"order_id": "#1042", "reason": "ordered by mistake"}),
    "Done: order #1042 is cancelled.",
]


async def test_winning_conversation_cancels_the_order_and_scores_the_world() -> None:
    episode, requests = await converse(WIN_USER, WIN_ASSISTANT)
    assert episode.error is None
    assert episode.reward == 1.0
    assert episode.rewards[0].name == "state_match"
    orders = episode.results["world"]["orders"]
    assert orders["1042"]["status"] == "cancelled"
    assert orders["1042"]["cancel_reason"] == "ordered by mistake"
    assert orders["2077"]["status"] == "processing"  # nothing else was touched

    assistant = episode.trace("assistant")
    roles = [m.role for m in assistant.messages]
    # The tool calls cross in the middle of the exchange, inside the assistant's turns.
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant",
                     "tool", "assistant"]
    looked_up = json.loads(assistant.messages[3].text)
    assert looked_up["status"] == "pending"
    assert [r.name for r in assistant.tool_runs] == ["find_order", "cancel_order"]
    assert all(r.error_type is None for r in assistant.tool_runs)
    assert assistant.reward == 1.0

    # The modeled user never sees the tools or their results; the assistant never sees the
    # scenario (its prompt is masked: the user brings it).
    user = episode.trace("user")
    assert not user.trainable and user.reward is None
    assert all(m.role != "tool" for m in user.messages)
    scenario = episode.task.prompt
    assert isinstance(scenario, str)
    for req in requests:
        text = json.dumps(req.messages)
        if req.body.get("tools"):
            assert scenario not in text
            assert {t["function"]["name"] for t in req.body["tools"]} == {
                "find_order", "cancel_order", "change_address"}
        else:
            assert "tool" not in {m["role"] for m in req.messages}
    assert episode.results["relay"]["ended_by"] == "user_done"


async def test_a_reply_that_only_claims_success_scores_zero() -> None:
    episode, _ = await converse(
        ["Cancel order #1042 please, I ordered it by mistake.", "###DONE###"],
        ["Sure, order #1042 is cancelled!"])
    assert episode.error is None
    assert episode.reward == 0.0
    reward = episode.rewards[0]
    assert "world.orders.1042.status" in (reward.reason or "")
    assert "world.orders.1042.cancel_reason (missing)" in reward.info["differences"]


async def test_acting_on_the_wrong_order_scores_zero() -> None:
    episode, _ = await converse(
        ["Cancel order #1042 please, I ordered it by mistake.", "###DONE###"],
        [ScriptedReply.tool_call("change_address", {"order_id": "1042",
                                                     "address": "1 Wrong Way"}),
         "Updated."])
    assert episode.reward == 0.0
    assert episode.results["world"]["orders"]["1042"]["address"] == "1 Wrong Way"


async def test_policy_refusal_by_the_tool_goes_back_to_the_model_and_keeps_the_world() -> None:
    # Task 2: the order has shipped; the right outcome is an unchanged world.
    episode, _ = await converse(
        ["Cancel order #3090, I no longer need it.", "Oh well, thanks.", "###DONE###"],
        [ScriptedReply.tool_call("cancel_order", {"order_id": "3090",
                                                   "reason": "no longer needed"}),
         "Sorry, order #3090 has already shipped, so it cannot be cancelled.",
         "You are welcome."],
        task_idx=2)
    assert episode.error is None
    assert episode.reward == 1.0
    assistant = episode.trace("assistant")
    assert assistant.tool_runs[0].error_type == "tool_error"
    tool_msg = next(m for m in assistant.messages if m.role == "tool")
    assert "cannot be cancelled" in tool_msg.text
    assert episode.results["world"]["orders"]["3090"]["status"] == "shipped"
    assert episode.metrics["turns"] == 2.0


async def test_each_episode_starts_from_a_fresh_world() -> None:
    first, _ = await converse(WIN_USER, WIN_ASSISTANT)
    second, _ = await converse(["Never mind, bye.", "###DONE###"], ["Goodbye!"])
    assert first.results["world"]["orders"]["1042"]["status"] == "cancelled"
    assert second.results["world"]["orders"]["1042"]["status"] == "pending"
    env = plugins.get("envs", "user-sim-tools")()
    assert next(iter(env.tasks())).info["world"]["orders"]["1042"]["status"] == "pending"


def test_state_match_is_refused_when_no_step_writes_the_state() -> None:
    from interplay.builtin_envs.steps import OneShot

    class NoWorld(Env):
        name = "no-world"

        def steps(self) -> list[Any]:
            return [OneShot()]

        def verifiers(self) -> list[Any]:
            return [StateMatch(StateMatchConfig(key="world"))]

    with pytest.raises(InterplayError) as err:
        NoWorld().check()
    assert "no step writes it" in str(err.value) and "\n" not in str(err.value)

    class WithWorld(NoWorld):
        def steps(self) -> list[Any]:
            return [InitState(InitStateConfig(key="world")), OneShot()]

    WithWorld().check()


def test_differences_name_the_paths() -> None:
    assert differences({"a": {"b": 1, "c": [1, 2]}}, {"a": {"b": 1, "c": [1, 2]}}) == []
    assert differences({"a": {"b": 2}}, {"a": {"b": 1, "x": 0}}, path="s") == [
        "s.a.b", "s.a.x (missing)"]
    assert differences({"l": [1]}, {"l": [1, 2]}) == [".l (length 1, expected 2)"]


async def test_tools_without_the_world_step_are_a_clear_error() -> None:
    from interplay.builtin_envs.shop import UserSimToolsEnv

    class NoInit(UserSimToolsEnv):
        def steps(self) -> list[Any]:
            return super().steps()[1:]  # the relay alone

    env = NoInit()
    task = next(iter(env.tasks()))
    async with ScriptedModel(lambda req: "Hi, cancel #1042 please.") as model:
        resources = RunResources(endpoint=model.endpoint)
        try:
            episode = await run_episode(env, task, resources=resources, seed=1)
        finally:
            await resources.aclose()
    assert episode.error_type == "config_error"
    assert "run the init_state step before" in (episode.error or "")
