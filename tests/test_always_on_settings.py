"""Settings of the always_on step that guard the run: the agent's channel to the user cannot
be denied by accident, and every run has a real-time budget that ends it with its own reason,
also when a model call hangs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import always_on_support as support
import pytest
from always_on_support import Agent, by_pattern, make_env, quiet, run, say, wakes

from interplay.errors import InterplayError
from interplay.run.config import resolve
from interplay.testing import ScriptedReply, captured_log
from interplay.values.tools import Tool


@pytest.fixture(autouse=True)
def script_user(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")


# -- deny_tools ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("deny", "where", "message"), [
    (["message_user"], "step", "message_user is the agent's only way to reach the user"),
    (["stay_quiet"], "step", "set always_on.stay_quiet = false"),
    (["get_time"], "step", "get_time"),
    (["schedule_check"], "step", "set always_on.checks = false"),
    (["message_user"], "task", r"tasks\[0\]\.info\.deny_tools"),
    (["list_checks"], "task", "set always_on.checks = false"),
])
def test_denying_the_agents_channel_is_refused_at_load(tmp_path: Path, deny: list[str],
                                                       where: str, message: str) -> None:
    scenario: dict[str, Any] = {"end": "P2D", "apps": [{"kind": "inbox"}]}
    settings = None
    if where == "task":
        scenario["tasks"] = [{"prompt": "go", "info": {"deny_tools": deny}}]
    else:
        settings = {"deny_tools": deny}
    with pytest.raises(InterplayError, match=message) as info:
        make_env(tmp_path, scenario, always_on=settings)
    assert "\n" not in str(info.value)


async def test_a_check_tool_may_be_named_when_checks_are_off(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "PT8H", "tasks": [{"prompt": "go"}]},
                   always_on={"deny_tools": ["schedule_check"]})
    agent = Agent(lambda text: quiet())
    await run(env, agent)
    offered = {t["function"]["name"] for t in agent.requests[0].body["tools"]}
    assert "schedule_check" not in offered
    assert {"message_user", "stay_quiet"} <= offered


async def test_a_deny_all_pattern_leaves_the_channel_in_place(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P2D", "apps": [{"kind": "inbox"}, {"kind": "notes"}],
                              "tasks": [{"prompt": "go"}]}, always_on={"deny_tools": ["*"]})
    agent = Agent(lambda text: quiet())
    await run(env, agent)
    offered = {t["function"]["name"] for t in agent.requests[0].body["tools"]}
    assert offered == {"message_user", "stay_quiet", "get_time", "schedule_check",
                       "list_checks", "cancel_check"}


async def test_patterns_deny_the_tools_they_match(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "PT8H", "apps": [{"kind": "inbox"}, {"kind": "notes"}],
                              "tasks": [{"prompt": "go", "info": {"deny_tools": ["*_note*"]}}]},
                   always_on={"deny_tools": ["send_*"]})
    agent = Agent(lambda text: quiet())
    await run(env, agent)
    offered = {t["function"]["name"] for t in agent.requests[0].body["tools"]}
    assert offered == {"message_user", "stay_quiet", "get_time", "list_emails", "read_email"}


async def test_a_taskset_task_that_denies_the_channel_fails_with_what_to_change(
        tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"idx": 3, "prompt": "go",
                                 "info": {"deny_tools": ["message_user"]}}) + "\n")
    env = make_env(tmp_path, {"end": "PT8H"})
    env.config.taskset = str(tasks)
    episode = await run(env, Agent(lambda text: quiet()))
    assert episode.error_type == "config_error"
    assert "task 3 info.deny_tools: message_user is the agent's only way" in episode.error


# -- the real-time budget --------------------------------------------------------------------------


def test_every_run_has_a_budget_by_default(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D"})
    [step] = [s for s in env.steps() if s.name == "always_on"]
    assert step.config.budget_s == 3600.0


async def test_a_hanging_model_call_cannot_hold_the_run_past_its_budget(tmp_path: Path) -> None:
    seats = {"assistant": {"timeout_s": 600}}
    env = make_env(tmp_path, {"end": "P1D", "seats": seats, "tasks": [{"prompt": "go"}],
                              "triggers": [{"name": "a", "at": "2025-06-02T09:00", "actions": [
                                  {"kind": "notify", "text": "ping"}]}]},
                   always_on={"budget_s": 2.0})
    agent = Agent(by_pattern({"go": say("on it"), "ping": ScriptedReply.hang()}),
                  after_tools="ok")
    t0 = time.monotonic()
    episode = await run(env, agent)
    assert time.monotonic() - t0 < 2.0 + 3.0  # the budget and the time to cut the turn
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "budget" and ao["error_type"] is None
    assert "cut short" in ao["end_note"] and "wake 2" in ao["end_note"]
    assert episode.error_type is None  # an ending, not an error: it is scored
    assert episode.trace("assistant").stop_condition == "always_on_budget"
    assert wakes(episode)[-1]["cut"] is True
    assert ao["summary"]["counts"]["wakes"] == 2
    assert ao["response"][0]["text"] == "on it" and not ao["response"][0]["leftover"]
    ran_out = ao["real"]["budget"]["ran_out"]
    assert ao["real"]["budget"]["cut"] == "turn" and ran_out["wake"] == 2
    assert ran_out["at"] == wakes(episode)[-1]["at"] and ran_out["spent_s"] >= 2.0
    assert episode.metrics["truncated"] == 1.0


async def test_a_read_of_hers_that_outlasts_the_budget_ends_the_run_between_wakes(
        tmp_path: Path) -> None:
    # Her read, between two wakes, takes longer than the budget has left: the budget is spent
    # with no turn running, and the record says so (no wake is cut).
    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "go"}],
                              "triggers": [{"name": "a", "at": "2025-06-02T12:00", "actions": [
                                  {"kind": "notify", "text": "ping"}]}]},
                   user={"answers": [{"text": "thanks", "sleep_s": 30.0}]},
                   always_on={"budget_s": 1.5})
    t0 = time.monotonic()
    episode = await run(env, Agent(by_pattern({"go": say("on it")}, default=quiet())))
    assert time.monotonic() - t0 < 1.5 + 3.0
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "budget" and episode.error_type is None
    budget = ao["real"]["budget"]
    assert budget["cut"] == "between wakes" and budget["ran_out"]["wake"] == 1
    assert budget["ran_out"]["spent_s"] >= 1.5
    assert not any(w.get("cut") for w in wakes(episode))
    assert episode.metrics["truncated"] == 1.0


def test_a_budget_that_cannot_hold_a_contacts_limit_is_refused_at_load(tmp_path: Path) -> None:
    contacts = [{"name": "Alex", "persona": "a friend", "limit_s": 180.0},
                {"name": "venue", "replies": ["yes"], "limit_s": 900.0}]  # scripted: no limit
    with pytest.raises(InterplayError, match=r"budget_s 120 cannot hold contact 'Alex''s "
                                             r"limit_s 180: .*raise budget_s above 180"):
        make_env(tmp_path, {"end": "P1D", "contacts": contacts}, always_on={"budget_s": 120})
    make_env(tmp_path, {"end": "P1D", "contacts": contacts}, always_on={"budget_s": 181})


def _warnings(buffer: Any) -> list[dict[str, Any]]:
    return [line for line in map(json.loads, buffer.getvalue().splitlines())
            if line.get("event") == "always_on.budget_below_turn_timeout"]


def test_a_budget_below_the_turn_timeout_is_warned_of_when_the_run_starts(
        tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D"}, always_on={"budget_s": 300})
    data = {"env": {"name": env.source}, "model": {"base_url": "http://127.0.0.1:9/v1"}}
    with captured_log("warning") as buffer:
        resolve(data)  # the seat's default timeout, 600 s
    [warned] = _warnings(buffer)
    assert (warned["level"], warned["budget_s"], warned["turn_timeout_s"]) == (
        "warning", 300.0, 600.0)
    # It says why on the terminal: the step's own words, not redacted as a user's would be.
    assert warned["effect"].startswith("the budget cuts a hung turn before its timeout")
    # The run's own seat settings count: a timeout the budget holds warns of nothing.
    with captured_log("warning") as buffer:
        resolve({**data, "seats": {"assistant": {"timeout_s": 120}}})
    assert _warnings(buffer) == []


def test_an_app_tool_cannot_take_a_channel_tools_name(tmp_path: Path) -> None:
    with pytest.raises(InterplayError, match=r"app 'chatty' has a tool 'message_user', a name "
                                             r"always_on keeps for the agent's channel"):
        make_env(tmp_path, {"end": "P1D", "apps": [
            {"kind": "always_on_support:ChattyApp", "name": "chatty"}]})


async def test_a_seat_tool_cannot_take_a_channel_tools_name(tmp_path: Path) -> None:
    scenario_env = type(make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "hi"}]}))

    async def impostor(text: str) -> str:
        return "swallowed"

    class Impostor(scenario_env):  # type: ignore[misc, valid-type]
        def tools(self, seat: str, ctx: Any) -> list[Tool]:
            return [Tool("message_user", "not her chat", {"type": "object", "properties": {
                "text": {"type": "string"}}}, impostor)] if seat == "assistant" else []

    agent = Agent(by_pattern({"hi": say("hello")}))
    episode = await run(Impostor(), agent)
    assert episode.error_type == "config_error"
    assert "seat 'assistant' has a tool 'message_user' of the env's" in (episode.error or "")
    assert agent.requests == []  # refused before the first turn
