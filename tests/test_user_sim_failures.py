"""A user sim that fails is named as the cause, in both steps that play one (always_on and the
relay): the episode is a ``user_error`` (never an env_error, never scored, its verifiers never
run), its error names the sim and where in the sim's code it failed, the step's record ends
with its own reason, and the log names the step and the sim (never the text). Scored or not,
an episode that ended in any error is never given to its verifiers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

import always_on_support as support
import attrs
import pytest
from always_on_support import Agent, by_pattern, make_env, quiet, say

from interplay import hookimpl
from interplay.builtin_envs.steps import Relay, RelayConfig
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.contracts.usersim import Answer, Read, UserSim
from interplay.contracts.verifier import Verifier
from interplay.plugins.hookspecs import Register
from interplay.run.episode import RunResources, run_episode
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.testing.logs import captured_log
from interplay.values.records import Episode, Reward, Task

#: Episodes each counting verifier was given.
SCORED: list[str] = []


@attrs.define
class RaisingConfig:
    #: The read (1-based) on which it raises.
    on_read: int = 1


class RaisingUser(UserSim):
    """Answers "fine" until its ``on_read``-th read, where its code raises."""

    name = "raising"
    Config: ClassVar[type] = RaisingConfig

    async def setup(self, person: Any, ctx: Any) -> None:
        await super().setup(person, ctx)
        self.reads = 0

    async def answer(self, read: Read) -> Answer:
        self.reads += 1
        if self.reads >= self.config.on_read:
            return self._broken(read)
        return Answer(text="fine" if self.reads > 1 or read.text is not None else "hello")

    def _broken(self, read: Read) -> Answer:
        table: dict[str, str] = {}
        return Answer(text=table["the sim's own bug"])  # raises KeyError here


class BrokenSetupUser(UserSim):
    name = "broken_setup"

    async def setup(self, person: Any, ctx: Any) -> None:
        raise RuntimeError("no such persona file")

    async def answer(self, read: Read) -> Answer:
        return Answer(text="never")


class Counting(Verifier):
    """Counts the episodes it is given; always 1."""

    name = "counting"

    async def score(self, episode: Episode, ctx: Any) -> Reward:
        SCORED.append(episode.info.episode_id)
        return Reward(name="counting", value=1.0)


@hookimpl
def register_user_sims(register: Register) -> None:
    register(RaisingUser)
    register(BrokenSetupUser)


@hookimpl
def register_verifiers(register: Register) -> None:
    register(Counting)


@pytest.fixture(autouse=True)
def plugins_here(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")
    register_plugin(__import__(__name__), "user-sim-failures")
    SCORED.clear()


def raising_line() -> int:
    source = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if 'table["the sim\'s own bug"]' in line)


# -- always_on -----------------------------------------------------------------------------------


def always_on_env(tmp_path: Path, user: dict[str, Any]) -> Env:
    return make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "go"}],
                               "triggers": [{"name": "later", "at": "2025-06-02T12:00",
                                             "actions": [{"kind": "notify", "text": "ping"}]}],
                               "verifiers": [{"kind": "counting"}]}, user=user)


async def test_a_raising_user_sim_in_always_on_is_a_user_error_naming_it(tmp_path: Path) -> None:
    env = always_on_env(tmp_path, {"user_sim": "raising"})
    with captured_log() as logged:
        episode = await support.run(env, Agent(by_pattern({"go": say("hi")}, default=quiet())))
    ao = episode.results["always_on"]
    assert episode.error_type == "user_error" and ao["end_reason"] == "user_error"
    assert ao["error_type"] == "user_error"
    where = f"test_user_sim_failures.py:{raising_line()}"
    assert "user sim 'raising'" in episode.error and where in episode.error
    assert "KeyError" in episode.error
    assert "The user simulator 'raising' could not answer" in ao["end_note"]
    assert where in ao["end_note"] and "agent's turn" not in ao["end_note"]
    assert episode.reward is None and SCORED == [] and episode.rewards == []
    assert episode.trace("assistant").stop_condition == "always_on_user_error"
    [line] = [json.loads(x) for x in logged.getvalue().splitlines()
              if json.loads(x)["event"] == "user_sim.failed"]
    assert (line["step"], line["user_sim"], line["code_path"]) == ("always_on", "raising", where)
    # The episode's error type, and the exception's class apart (docs/plugins.md, Logging).
    assert (line["error_type"], line["exception_type"], line["reason_code"]) == (
        "user_error", "KeyError", "raised")
    assert "the sim's own bug" not in logged.getvalue()  # no text of the failure is logged


async def test_a_scripted_sim_that_fails_mid_run_in_always_on(tmp_path: Path) -> None:
    env = always_on_env(tmp_path, {"answers": [{"text": "thanks"},
                                               {"error": "its model is down"}]})
    agent = Agent(by_pattern({"go": say("hi"), "thanks": say("anything else?")},
                             default=quiet()))
    episode = await support.run(env, agent)
    ao = episode.results["always_on"]
    assert episode.error_type == "user_error" and ao["end_reason"] == "user_error"
    assert "user sim 'script'" in episode.error and "its model is down" in episode.error
    assert "read 2" in ao["end_note"] and "'script'" in ao["end_note"]
    assert [r["outcome"] for r in ao["replies"]] == ["replied", "error"]
    assert len(support.wakes(episode)) == 2  # her first reply reached the agent
    assert SCORED == [] and episode.reward is None


async def test_a_sim_that_fails_to_set_up_is_a_user_error(tmp_path: Path) -> None:
    env = always_on_env(tmp_path, {"user_sim": "broken_setup"})
    episode = await support.run(env, Agent(lambda text: quiet()))
    assert episode.error_type == "user_error"
    assert "user sim 'broken_setup'" in episode.error and "set up" in episode.error
    assert re.search(r"test_user_sim_failures\.py:\d+", episode.error)
    assert episode.results["always_on"]["end_reason"] == "user_error"
    assert SCORED == []


# -- the relay -------------------------------------------------------------------------------------


class RelayEnv(Env):
    name = "relay-failures"
    seats = {"assistant": SeatSpec(harness="null"),
             "user": SeatSpec(harness="null", trainable=False)}

    def __init__(self, **cfg: Any) -> None:
        super().__init__()
        self.relay = Relay(RelayConfig(**cfg))

    def tasks(self) -> list[Task]:
        return []

    def steps(self) -> list[Step]:
        return [self.relay]

    def verifiers(self) -> list[Verifier]:
        return [Counting()]


async def relay(sim: str, settings: dict[str, Any]) -> Episode:
    def handle(request: ScriptedRequest) -> ScriptedReply:
        return ScriptedReply.text("assistant reply")

    async with ScriptedModel(handle) as model:
        resources = RunResources(endpoint=model.endpoint)
        try:
            return await run_episode(RelayEnv(user_sim=sim, user_sim_settings=settings),
                                     Task(0, prompt="need help"), resources=resources)
        finally:
            await resources.aclose()


async def test_a_raising_user_sim_in_the_relay_is_a_user_error_naming_it() -> None:
    with captured_log() as logged:
        episode = await relay("raising", {"on_read": 3})
    relay_record = episode.results["relay"]
    assert relay_record["ended_by"] == "user_error" and relay_record["turns"] == 2
    assert episode.error_type == "user_error"
    where = f"test_user_sim_failures.py:{raising_line()}"
    assert "user sim 'raising'" in episode.error and where in episode.error
    assert relay_record["error"] == episode.error
    assert SCORED == [] and episode.reward is None
    assert episode.trace("assistant").stop_condition == "user_error"
    [line] = [json.loads(x) for x in logged.getvalue().splitlines()
              if json.loads(x)["event"] == "user_sim.failed"]
    assert (line["step"], line["user_sim"], line["code_path"]) == ("relay", "raising", where)


async def test_a_scripted_sim_that_fails_mid_run_in_the_relay() -> None:
    with captured_log() as logged:
        episode = await relay("script", {"answers": [{"text": "hello"}, {"text": "more"},
                                                     {"error": "its model is down"}]})
    relay_record = episode.results["relay"]
    assert (relay_record["ended_by"], relay_record["turns"]) == ("user_error", 2)
    assert episode.error_type == "user_error" and "its model is down" in episode.error
    assert "user sim 'script'" in episode.error
    assert SCORED == [] and episode.reward is None
    [line] = [json.loads(x) for x in logged.getvalue().splitlines()
              if json.loads(x)["event"] == "user_sim.failed"]
    assert (line["error_type"], line["reason_code"]) == ("user_error", "answer_error")
    assert "exception_type" not in line and "its model is down" not in logged.getvalue()


# -- any error episode ----------------------------------------------------------------------------


class Failing(Step):
    name = "failing"

    async def run(self, ctx: Any) -> None:
        raise RuntimeError("the env broke")


class FailingEnv(RelayEnv):
    def steps(self) -> list[Step]:
        return [Failing()]


async def test_no_verifier_is_given_an_episode_that_ended_in_an_error() -> None:
    async with ScriptedModel(lambda r: ScriptedReply.text("x")) as model:
        resources = RunResources(endpoint=model.endpoint)
        try:
            episode = await run_episode(FailingEnv(), Task(0, prompt="p"), resources=resources)
        finally:
            await resources.aclose()
    assert episode.error_type == "env_error"
    assert SCORED == [] and episode.rewards == [] and episode.reward is None


def test_the_summary_counts_user_errors_apart() -> None:
    from interplay.run.summary import summarize

    records = [{"info": {"task_idx": 0, "rollout": 0}, "error_type": "user_error",
                "error": "user sim 'raising' failed", "reward": None},
               {"info": {"task_idx": 1, "rollout": 0}, "error_type": None, "reward": 1.0}]
    summary = summarize(records)
    assert summary["errors"] == {"user_error": 1} and summary["completed"] == 1


def test_the_clis_final_line_says_the_user_sim_failed(tmp_path: Path, capsys: Any,
                                                      scripted_model: Any) -> None:
    from interplay import cli

    env = always_on_env(tmp_path, {"user_sim": "raising"})
    agent = Agent(by_pattern({"go": say("hi")}, default=quiet()))
    model = scripted_model(agent)
    code = cli.main(["eval", str(env.source), "-n", "1", "--base-url", model.base_url,
                     "-o", str(tmp_path / "run"), "--quiet", "--no-report"])
    assert code == 1
    err = capsys.readouterr().err
    assert "no episode completed: all 1 ended in user_error: user sim 'raising'" in err
    assert "the user sim failed (its error names it and where in its code)" in err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["errors"] == {"user_error": 1}
