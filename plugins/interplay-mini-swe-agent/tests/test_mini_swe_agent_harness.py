"""The mini-swe-agent harness on this machine (no sandbox), against the real ``mini``, the real
interception server and the scripted model: its commands in the trace's folder without the
secret, and how its own limits, its time limits, a command's time limit and a model that
gives it no command end a segment in interplay's words."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

from interplay import (
    Env,
    EpisodeContext,
    SeatSpec,
    Step,
    Task,
    Tool,
    lookup,
    tool,
)
from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted
from interplay_mini_swe_agent import MiniSweAgentHarness

# Each test runs mini-swe-agent (a program of its own) against the scripted model.
pytestmark = pytest.mark.slow

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class OneShot(Step):
    name = "one_shot"

    async def run(self, ctx: EpisodeContext) -> None:
        await ctx.agent("assistant").run(ctx.task)


class Here(Env):
    """One task on this machine, no sandbox."""

    name = "here"
    seats: ClassVar = {"assistant": SeatSpec(harness="mini-swe-agent")}

    def tasks(self) -> list[Task]:
        return [Task(0, "Write the answer to answer.txt.", system_prompt="Be brief.")]

    def steps(self) -> list[Step]:
        return [OneShot()]


def bash(command: str) -> ScriptedReply:
    return ScriptedReply.tool_call("bash", {"command": command})


def outputs(request: ScriptedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


async def run(script: Any, **harness_config: Any) -> Any:
    env = Here()
    return await run_scripted(env, env.tasks()[0], script, seats={
        "assistant": {"harness": "mini-swe-agent", "harness_config": harness_config}})


def segment(trace: Any) -> dict[str, Any]:
    return trace.info["mini_swe_agent"]["segments"][-1]


async def test_on_this_machine_its_commands_run_in_the_workdir_without_the_secret(
        tmp_path: Path) -> None:
    work = tmp_path / "work"
    seen: list[str] = []

    def handler(request: ScriptedRequest) -> ScriptedReply:
        seen.append(str(request.messages[0].get("content")))
        if not outputs(request):
            return bash("echo 42 > answer.txt; pwd; env")
        return bash(f"{SUBMIT}; echo the answer is in answer.txt")

    done = await run(handler, workdir=str(work), state_dir=str(tmp_path / "state"))
    ep = done.episode
    trace = ep.trace("assistant")
    assert trace.error is None, trace.error
    assert (work / "answer.txt").read_text() == "42\n"
    out = next(m.text for m in trace.messages if m.role == "tool")
    assert str(work) in out
    assert "OPENAI_API_KEY" not in out and "MSWEA_CONFIGURED" in out
    row = segment(trace)
    assert (row["where"], row["commands_in"], row["exit_status"]) == ("host", "host",
                                                                      "Submitted")
    assert row["submission"] == "the answer is in answer.txt\n"
    assert [r.name for r in trace.tool_runs] == ["bash", "bash"]
    # The env's system prompt after mini-swe-agent's own.
    assert seen[0].startswith("You are a helpful assistant") and seen[0].endswith("Be brief.")
    # The trace's own folders go with the trace; the configured workdir stays.
    assert os.listdir(tmp_path / "state") == [] and work.is_dir()


async def test_its_step_limit_ends_the_segment_as_max_turns() -> None:
    done = await run(lambda r: bash("echo again"), step_limit=2)
    trace = done.episode.trace("assistant")
    assert (trace.stop_condition, trace.error_type) == ("max_turns", None)
    assert segment(trace)["exit_status"] == "LimitsExceeded"
    # The conversation as the model read it: its last answer's command ran, unread.
    assert len(done.requests) == 2 and trace.messages[-1].role == "assistant"


async def test_its_cost_limit_ends_the_segment_as_max_cost(tmp_path: Path) -> None:
    # A price for the seat's model, in litellm's registry format, read by mini-swe-agent.
    registry = tmp_path / "prices.json"
    done_model = "scripted"
    registry.write_text(json.dumps({f"openai/{done_model}": {
        "litellm_provider": "openai", "mode": "chat", "input_cost_per_token": 1.0,
        "output_cost_per_token": 1.0}}))
    done = await run(lambda r: bash("echo again"), cost_limit=0.5,
                     config=["mini.yaml", f"model.litellm_model_registry={registry}"])
    trace = done.episode.trace("assistant")
    assert (trace.stop_condition, trace.error_type) == ("max_cost", None), trace.error
    row = segment(trace)
    assert row["exit_status"] == "LimitsExceeded" and row["cost"] > 0.5
    assert len(done.requests) == 1


async def test_its_own_time_limit_is_a_timeout_naming_its_setting() -> None:
    done = await run(lambda r: bash("sleep 2"), wall_time_limit_s=1)
    trace = done.episode.trace("assistant")
    assert (trace.stop_condition, trace.error_type) == ("timeout", "timeout")
    assert trace.error == ("mini-swe-agent reached its own time limit of 1 s "
                           "(harness_config.wall_time_limit_s)")
    assert segment(trace)["exit_status"] == "TimeExceeded"


async def test_timeout_s_kills_it_mid_command_and_says_so() -> None:
    done = await run(lambda r: bash("sleep 60"), timeout_s=4)
    trace = done.episode.trace("assistant")
    assert (trace.stop_condition, trace.error_type) == ("timeout", "timeout")
    assert trace.error == "mini-swe-agent exceeded 4 s (harness_config.timeout_s)"
    assert segment(trace)["timed_out"] is True


async def test_a_command_past_its_time_limit_is_stopped_and_the_model_reads_so() -> None:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        return bash(SUBMIT) if outputs(request) else bash("echo started; sleep 30")

    done = await run(handler, command_timeout_s=1)
    trace = done.episode.trace("assistant")
    assert trace.error is None, trace.error
    said = outputs(done.requests[-1])[0]
    assert "timed out after 1 seconds" in said and "started" in said
    assert [r.error_type for r in trace.tool_runs] == ["timeout", None]


async def test_a_model_that_never_gives_a_command_fails_the_segment_saying_why() -> None:
    done = await run(["Just text.", "Still text.", "Text again."])
    trace = done.episode.trace("assistant")
    assert (trace.stop_condition, trace.error_type) == ("error", "mini_swe_agent_failed")
    assert "without one command several times in a row" in (trace.error or "")
    assert segment(trace)["exit_status"] == "RepeatedFormatError"


async def test_env_tools_are_refused_in_one_line() -> None:
    @tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return order_id

    class WithTools(Here):
        def tools(self, seat: str, ctx: EpisodeContext) -> list[Tool]:
            return [lookup_order]

    env = WithTools()
    done = await run_scripted(env, env.tasks()[0], [bash(SUBMIT)])
    assert done.episode.error_type == "config_error"
    assert "has its bash tool alone" in done.episode.error
    assert "lookup_order" in done.episode.error and done.requests == []


def test_a_config_spec_that_is_not_found_is_one_line_at_check(tmp_path: Path) -> None:
    harness = lookup("harnesses", "mini-swe-agent")(
        {"config": ["mini.yaml", str(tmp_path / "missing.yaml")]})
    assert isinstance(harness, MiniSweAgentHarness)
    [problem] = harness.check()
    assert "missing.yaml" in problem and "harness_config.config" in problem
    assert harness.sandbox_needs().mounts == () and harness.can_resume()
