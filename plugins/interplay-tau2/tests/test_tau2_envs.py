"""The tau2 envs in-process on the scripted model (real HTTP on 127.0.0.1, a real episode):
tau2's protocol, its environment per episode, its evaluator's reward, and each bad input's
one line."""

from __future__ import annotations

import asyncio
import json
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tau2_scripts import mock_pair

import interplay_tau2.plugin
from interplay import (
    Answer,
    Episode,
    EpisodeContext,
    InterplayError,
    Step,
    UserSim,
    hookimpl,
    load_env,
    lookup,
)
from interplay.contracts import Read
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    isolated_plugins,
    run_interplay,
    run_scripted,
)
from interplay_tau2 import domains, export, scripted


def env(env_domain: str = "mock", **settings: Any) -> Any:
    made = lookup("envs", f"tau2-{env_domain}")(settings)
    made.check()
    return made


def task_of(made: Any, task_id: str) -> Any:
    return next(t for t in made.tasks() if t.info["tau2"]["task_id"] == task_id)


def tau2_record(episode: Episode) -> dict[str, Any]:
    assert episode.error is None, episode.error
    return episode.results["tau2"]


async def test_mock_create_task_is_played_as_tau2_plays_it_and_scored_by_its_evaluator(
        ) -> None:
    made = env(task_ids=["create_task_1"])
    run = await run_scripted(made, task_of(made, "create_task_1"), mock_pair, seed=7)
    record = tau2_record(run.episode)
    roles = [(m["role"], bool(m.get("tool_calls"))) for m in record["messages"]]
    # The fixed greeting (no model call), the user, the agent's call, tau2's answer, the
    # agent's text, the user's stop.
    assert roles == [("assistant", False), ("user", False), ("assistant", True),
                     ("tool", False), ("assistant", False), ("user", False)]
    greeting, *_ = record["messages"]
    assert greeting["content"] == "Hi! How can I help you today?"
    assert record["termination_reason"] == "user_stop"
    call = record["messages"][2]["tool_calls"][0]
    tool = record["messages"][3]
    # The tool message is tau2's: its id is the model's call id, its content tau2's JSON.
    assert tool["id"] == call["id"] and tool["requestor"] == "assistant" and not tool["error"]
    assert '"title": "Important Meeting"' in tool["content"]
    assert run.episode.reward == 1.0
    assert record["reward_info"]["reward"] == 1.0
    parts = run.episode.rewards[0].info
    assert parts["actions"] == [{"name": "create_task", "requestor": "assistant",
                                 "matched": True}]
    assert {r.name: r.value for r in run.episode.rewards} == {
        "tau2": 1.0, "tau2_db": 1.0, "tau2_communicate": 1.0}
    # The user seat played tau2's user simulator prompt; the agent tau2's policy prompt, with
    # the greeting before the user's first message, and tau2's tool schemas.
    user_req = next(r for r in run.requests if "<scenario>" in r.messages[0]["content"])
    assert user_req.messages[1] == {"role": "user", "content": greeting["content"]}
    agent_req = next(r for r in run.requests if "<policy>" in r.messages[0]["content"])
    assert [m["role"] for m in agent_req.messages[:3]] == ["system", "assistant", "user"]
    tau = domains.tau2()
    schemas = [t.openai_schema for t in tau.registry.get_env_constructor("mock")().get_tools()]
    assert agent_req.body["tools"] == schemas


async def test_every_request_of_both_seats_carries_the_episodes_seed() -> None:
    made = env(task_ids=["update_task_1"])
    task = task_of(made, "update_task_1")
    first = await run_scripted(made, task, mock_pair, seed=7)
    again = await run_scripted(made, task, mock_pair, seed=7)
    other = await run_scripted(made, task, mock_pair, seed=8)
    seeds = {r.body.get("seed") for r in first.requests}
    assert len(seeds) == 1 and None not in seeds
    assert seeds == {r.body.get("seed") for r in again.requests}
    assert seeds != {r.body.get("seed") for r in other.requests}
    assert tau2_record(first.episode)["seed"] == seeds.pop()


async def test_each_episode_gets_a_fresh_database() -> None:
    made = env(task_ids=["create_task_1"])
    task = task_of(made, "create_task_1")
    runs = [await run_scripted(made, task, mock_pair, rollout=i) for i in range(2)]
    # The same call made in two episodes creates the same new task id: neither saw the other's.
    contents = [tau2_record(r.episode)["messages"][3]["content"] for r in runs]
    assert contents[0] == contents[1] and '"task_id": "task_2"' in contents[0]
    assert tau2_record(runs[0].episode)["db_hash"] == tau2_record(runs[1].episode)["db_hash"]


async def test_episodes_at_once_each_play_on_their_own_environment() -> None:
    """The step keeps its tau2 environment in the episode's store, where Env.tools finds it:
    two tasks played at once each change their own database, as when played one by one."""
    made = env(task_ids=["create_task_1", "update_task_1"])
    tasks = [task_of(made, "create_task_1"), task_of(made, "update_task_1")]
    alone = [tau2_record((await run_scripted(made, t, mock_pair)).episode) for t in tasks]
    together = await asyncio.gather(*(run_scripted(made, t, mock_pair) for t in tasks))
    for run, record in zip(together, alone, strict=True):
        assert run.episode.reward == 1.0
        assert tau2_record(run.episode)["db_hash"] == record["db_hash"]
    assert alone[0]["db_hash"] != alone[1]["db_hash"]


async def test_a_seat_opened_outside_the_tau2_step_is_one_line() -> None:
    """The seats' tools are the environment the tau2 step made in this episode: a step of
    another kind that opens a seat has none to get."""

    class Opener(Step):
        name = "opener"

        async def run(self, ctx: EpisodeContext) -> None:
            ctx.agent("assistant")

    made = env()
    made.steps = lambda: [Opener()]
    run = await run_scripted(made, next(iter(made.tasks())), mock_pair)
    assert run.episode.error_type is not None and run.requests == []
    assert "made by the tau2 step; open a seat only inside it" in str(run.episode.error)


async def test_a_tool_error_comes_back_as_tau2_returns_it_and_too_many_end_the_episode(
        ) -> None:
    def failing(request: ScriptedRequest) -> ScriptedReply | str:
        if "<scenario>" in request.messages[0]["content"]:
            return "Please mark task_1 as completed."
        return ScriptedReply.tool_call("update_task_status", {"task_id": "nope",
                                                              "status": "completed"})

    made = env(task_ids=["update_task_1"], max_errors=3)
    run = await run_scripted(made, task_of(made, "update_task_1"), failing)
    record = tau2_record(run.episode)
    tools = [m for m in record["messages"] if m["role"] == "tool"]
    assert len(tools) == 3 and all(m["error"] for m in tools)
    assert tools[0]["content"].startswith("Error: ")
    assert record["termination_reason"] == "too_many_errors"
    # A premature end scores 0 as tau2 scores it: scored, not an error episode.
    assert run.episode.reward == 0.0
    assert "terminated prematurely" in run.episode.rewards[0].info["note"]


async def test_max_steps_cuts_the_conversation_where_tau2_cuts_it() -> None:
    def chatty(request: ScriptedRequest) -> str:
        return "Tell me more." if "<scenario>" in request.messages[0]["content"] else "Sure?"

    made = env(task_ids=["create_task_1"], max_steps=5)
    run = await run_scripted(made, task_of(made, "create_task_1"), chatty)
    record = tau2_record(run.episode)
    assert record["termination_reason"] == "max_steps"
    assert len(record["messages"]) == 1 + 5  # the greeting is no step
    assert run.episode.reward == 0.0
    assert {t.seat: t.stop_condition for t in run.episode.traces} == {
        "assistant": "max_turns", "user": "max_turns"}


async def test_a_model_failure_is_an_unscored_error_episode() -> None:
    def broken(request: ScriptedRequest) -> ScriptedReply | str:
        if "<scenario>" in request.messages[0]["content"]:
            return "Please mark task_1 as completed."
        return ScriptedReply.fault(400)

    made = env(task_ids=["update_task_1"])
    run = await run_scripted(made, task_of(made, "update_task_1"), broken)
    assert run.episode.error_type is not None and run.episode.reward is None
    assert run.episode.results["tau2"]["termination_reason"] == "agent_error"


def test_a_split_and_a_subset_select_tau2s_tasks() -> None:
    test = [t.info["tau2"]["task_id"] for t in env("retail", split="test").tasks()]
    tau = domains.tau2()
    assert test == [t.id for t in tau.registry.get_tasks_loader("retail")("test")]
    assert len(test) == 40
    picked = [t.info["tau2"]["task_id"] for t in env("retail", task_ids=test[:2][::-1]).tasks()]
    assert picked == test[:2]  # tau2's order, as tau2's runner runs them


@pytest.mark.parametrize(("domain", "settings", "message"), [
    ("mock", {"domain": "bank"}, "tau2 domain 'bank' is unknown; choose one of mock, airline, "
                                 "retail, telecom"),
    ("airline", {"split": "dev"}, "env.split='dev' is not a split of airline; choose one of "
                                  "train, test, base"),
    ("mock", {"split": "test"}, "env.split='test': tau2's mock domain has no splits"),
    ("airline", {"policy": "workflow"}, "env.policy='workflow' is a telecom setting"),
    ("retail", {"task_set": "small"}, "env.task_set='small' is a telecom setting"),
    ("telecom", {"task_set": "tiny"}, "env.task_set='tiny' is not one of telecom's: full, "
                                      "small"),
])
def test_a_bad_setting_is_one_line_naming_the_choices(domain: str, settings: dict[str, Any],
                                                      message: str) -> None:
    with pytest.raises(InterplayError) as err:
        env(domain, **settings)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_task_id_is_one_line_naming_the_tasks() -> None:
    with pytest.raises(InterplayError) as err:
        list(env("mock", task_ids=["create_task_9"]).tasks())
    text = str(err.value)
    assert "'create_task_9' is not a task of mock; its tasks are create_task_1," in text
    assert "\n" not in text


async def test_telecom_user_acts_on_her_own_phone_and_tau2_checks_its_state() -> None:
    """Dual control: the user seat has tau2's user tools on her own device state; her calls
    are recorded as hers (requestor user) and tau2's env assertions read the phone."""

    def pair(request: ScriptedRequest) -> ScriptedReply | str:
        messages = request.messages
        last = messages[-1]
        if "<scenario>" in messages[0]["content"]:
            if not any(m["role"] == "assistant" for m in messages):
                return "My mobile data is not working."
            if last["role"] == "tool":
                return "I did both and it works now. ###STOP###"
            return ScriptedReply.calls([("toggle_data_saver_mode", {}),
                                        ("toggle_roaming", {})])
        return "Please turn off data saver mode and turn on roaming."

    made = env("telecom", split="test")
    (task,) = [t for t in made.tasks() if t.idx == 0]
    run = await run_scripted(made, task, pair)
    record = tau2_record(run.episode)
    roles = [(m["role"], [c["name"] for c in m.get("tool_calls") or []], m.get("requestor"))
             for m in record["messages"]]
    assert roles == [("assistant", [], None), ("user", [], None), ("assistant", [], None),
                     ("user", ["toggle_data_saver_mode", "toggle_roaming"], None),
                     ("tool", [], "user"), ("tool", [], "user"), ("user", [], None)]
    assert record["termination_reason"] == "user_stop"
    user_req = next(r for r in run.requests if "<scenario>" in r.messages[0]["content"])
    assert "toggle_roaming" in {t["function"]["name"] for t in user_req.body["tools"]}
    agent_req = next(r for r in run.requests if "<policy>" in r.messages[0]["content"])
    assert "toggle_roaming" not in {t["function"]["name"] for t in agent_req.body["tools"]}
    assert run.episode.reward == 1.0
    assert run.episode.rewards[0].info["reward_basis"] == ["ENV_ASSERTION"]


async def test_solo_mode_works_the_ticket_alone_and_done_ends_it() -> None:
    """tau2's solo mode: no user seat, the ticket in the system prompt, the first call forced
    to a tool, and a call of ``done`` recorded as tau2 records it (the stop token)."""

    def agent(request: ScriptedRequest) -> ScriptedReply | str:
        if any(m["role"] == "tool" for m in request.messages):
            return ScriptedReply.tool_call("done", {})
        return ScriptedReply.tool_call("create_task", {"user_id": "user_1",
                                                       "title": "Important Meeting"})

    made = env(solo=True)
    solo_ids = [t.info["tau2"]["task_id"] for t in made.tasks()]
    tau = domains.tau2()
    assert solo_ids == [t.id for t in tau.registry.get_tasks_loader("mock")()
                        if tau.llm_agent.LLMSoloAgent.check_valid_task(t)]
    run = await run_scripted(made, task_of(made, "create_task_1"), agent)
    record = tau2_record(run.episode)
    assert [(m["role"], m["content"], [c["name"] for c in m.get("tool_calls") or []])
            for m in record["messages"]][::2] == [("assistant", None, ["create_task"]),
                                                  ("assistant", "###STOP###", [])]
    assert record["termination_reason"] == "agent_stop" and record["solo"]
    (first, *_) = run.requests
    assert [m["role"] for m in first.messages] == ["system"]
    assert "<ticket>" in first.messages[0]["content"]
    assert first.body["tool_choice"] == "required"
    assert "done" in {t["function"]["name"] for t in first.body["tools"]}
    assert [t.seat for t in run.episode.traces] == ["assistant"]
    assert run.episode.reward == 1.0


def test_solo_mode_on_a_domain_without_tickets_is_one_line() -> None:
    with pytest.raises(InterplayError) as err:
        env("airline", solo=True)
    assert "env.solo: tau2's solo mode needs tasks with a ticket, which only mock and " \
           "telecom have" in str(err.value)


async def test_natural_language_assertions_are_judged_by_the_runs_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No shipped task scores natural-language assertions, so one is made to: its judge is
    the run's endpoint (here the scripted model), asked with tau2's judge prompt."""
    tau = domains.tau2()
    task = domains.task("mock", "create_task_1_nl_eval")
    monkeypatch.setattr(task.evaluation_criteria, "reward_basis",
                        [tau.tasks.RewardType.NL_ASSERTION])
    judged: list[ScriptedRequest] = []

    def pair_and_judge(request: ScriptedRequest) -> ScriptedReply | str:
        if "expectedOutcomes" in str(request.messages[-1].get("content")):
            judged.append(request)
            return json.dumps({"results": [
                {"expectedOutcome": "The task is created successfully", "reasoning": "yes",
                 "metExpectation": True},
                {"expectedOutcome": "The user is complimented", "reasoning": "no",
                 "metExpectation": False}]})
        return mock_pair(request)

    made = env(task_ids=["create_task_1_nl_eval"])
    run = await run_scripted(made, task_of(made, "create_task_1_nl_eval"), pair_and_judge)
    record = tau2_record(run.episode)
    assert record["termination_reason"] == "user_stop"
    assert len(judged) == 1 and len(run.episode.judge_calls) == 1
    assert run.episode.reward == 0.0
    assert run.episode.rewards[0].info["nl_assertions"] == [
        {"assertion": "The task is created successfully", "met": True},
        {"assertion": "The user is complimented", "met": False}]
    assert {r.name: r.value for r in run.episode.rewards} == {"tau2": 0.0,
                                                              "tau2_nl_assertion": 0.0}


# -- the user: any user sim; each seat's own stop ----------------------------------------------


class Terse(UserSim):
    """A user sim without a model: asks for the meeting, then says she is done (no token)."""

    name = "test_terse"

    async def answer(self, read: Read) -> Answer:
        if read.turn == 0:
            assert read.text == "Hi! How can I help you today?"
            return Answer(f"Please create 'Important Meeting'. ({self.person.description})")
        return Answer("Thanks, bye.", done=True)


class Broken(UserSim):
    """A user sim that raises on its second read."""

    name = "test_broken"

    async def answer(self, read: Read) -> Answer:
        if read.turn:
            return {}["no such key"]  # type: ignore[no-any-return]
        return Answer("Please create 'Important Meeting'.")


@pytest.fixture
def sims() -> Iterator[None]:
    def register_user_sims(register: Any) -> None:
        register(Terse)
        register(Broken)

    module = types.ModuleType("test_sims")
    module.register_user_sims = hookimpl(register_user_sims)  # type: ignore[attr-defined]
    with isolated_plugins(("tau2", interplay_tau2.plugin, "interplay-tau2"),
                          ("test_sims", module)):
        yield


async def test_any_user_sim_plays_the_customer_and_her_done_is_tau2s_stop(
        sims: None) -> None:
    made = load_env("tau2-mock", {"task_ids": ["create_task_1"], "user_sim": "test_terse"})
    made.check()
    assert made.steps()[0].seats() == {"assistant", "user"}  # her seat, not the sim's
    assert made.run_steps()[0].seats() == {"assistant"}      # a sim without a model: none
    run = await run_scripted(made, task_of(made, "create_task_1"), mock_pair, seed=7)
    record = tau2_record(run.episode)
    said = [m["content"] for m in record["messages"] if m["role"] == "user"]
    # Her persona reached her; her done is recorded with tau2's stop token, as tau2 ends.
    assert said[0].startswith("Please create 'Important Meeting'. (") and "Persona" not in said[0]
    assert said[-1] == "Thanks, bye. ###STOP###"
    assert record["termination_reason"] == "user_stop" and run.episode.reward == 1.0
    assert [t.seat for t in run.episode.traces] == ["assistant"]
    assert run.episode.trace("assistant").stop_condition == "user_done"


@pytest.mark.slow  # an `interplay` process imports tau2
def test_the_tau_user_sim_reads_the_tasks_instructions_section_by_section(
        tmp_path: Path) -> None:
    """interplay's own `tau` user sim (the interplay-user-sims plugin, found as a user's
    `interplay` finds it) on tau2-retail gets the task's instructions as tau2 structures them
    (reason for the call, what she knows, what she does not), each in its section of her
    prompt, not tau2's whole rendered scenario as her reason for calling."""
    with ScriptedModel(lambda request: ScriptedReply.text("###STOP###")) as model:
        done = run_interplay(
            "eval", "tau2-retail", "--set", 'env.task_ids=["0"]', "--set", "env.user_sim=tau",
            "--base-url", model.base_url, "-o", str(tmp_path / "run"), "-q", "--no-report",
            env=scripted.OFFLINE_ENVIRON)
        prompts = {str(r.messages[0]["content"]) for r in model.requests}
    assert done.returncode == 0, done.stderr
    (prompt,) = prompts
    reason = prompt.split("Reason for your call", 1)[1].split("What you know", 1)[0]
    assert "order #W2378156" in reason and "Yusuf Rossi" not in reason
    known = prompt.split("What you know", 1)[1].split("What you do not know", 1)[0]
    assert "You are Yusuf Rossi in zip code 19122." in known
    assert "You do not remember your email address." in prompt.split("What you do not know")[1]
    assert "Instructions:" not in prompt and "Domain: retail" not in prompt


async def test_a_user_sim_that_raises_is_a_user_error_at_its_own_line(sims: None) -> None:
    made = load_env("tau2-mock", {"task_ids": ["create_task_1"], "user_sim": "test_broken"})
    made.check()
    run = await run_scripted(made, task_of(made, "create_task_1"), mock_pair, seed=7)
    episode = run.episode
    assert episode.error_type == "user_error" and episode.reward is None
    line = Broken.answer.__code__.co_firstlineno + 2
    assert episode.error is not None and f"test_tau2_envs.py:{line}" in episode.error
    assert "user sim 'test_broken' failed in tau2 (turn 1)" in episode.error
    assert episode.results["tau2"]["termination_reason"] == "user_error"
    assert episode.trace("assistant").stop_condition == "user_error"


async def test_a_seat_whose_turn_failed_keeps_its_stop_and_the_other_says_whose() -> None:
    made = env(task_ids=["create_task_1"])
    run = await run_scripted(made, task_of(made, "create_task_1"), mock_pair, seed=7,
                             seats={"assistant": {"harness_config": {"max_turns": 1}}})
    assert run.episode.results["tau2"]["termination_reason"] == "agent_error"
    assert run.episode.reward == 0.0  # scored, as tau2 scores a premature end
    stops = {t.seat: t.stop_condition for t in run.episode.traces}
    assert stops == {"assistant": "max_turns", "user": "agent_error"}


def test_the_results_file_says_who_played_the_user_and_with_what(sims: None) -> None:
    """tau2-results.json's user_info: tau2's simulator with its guidelines and her seat's model
    and sampling; a user sim without a model with neither (her words were the sim's own)."""
    endpoint = {"model": "m", "base_url": "http://127.0.0.1:9/v1"}
    stored = {"config": {"model": endpoint, "rollouts": 1},
              "seats": {seat: {"model": endpoint, "sampling": {"max_tokens": n}}
                        for seat, n in (("assistant", 512), ("user", 256))}}
    tau = domains.tau2()
    own = export._info(tau, stored, {"domain": "mock"}).user_info
    assert (own.implementation, own.llm) == ("interplay user sim tau2", "m")
    assert own.llm_args == {"max_tokens": 256, "api_base": "http://127.0.0.1:9/v1"}
    assert own.global_simulation_guidelines
    terse = export._info(tau, stored, {"domain": "mock", "user_sim": "test_terse"}).user_info
    assert terse.implementation == "interplay user sim test_terse"
    assert (terse.llm, terse.llm_args, terse.global_simulation_guidelines) == (None, None, None)


def test_the_plugin_guides_example_subclasses_tau2s_verifier_inside_its_hook() -> None:
    """docs/plugins.md's example of building on another plugin's verifier, run as printed."""
    docs = Path(__file__).parents[3] / "docs" / "plugins.md"
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", docs.read_text(), re.S)
                if "tau2_brief" in b]
    module = types.ModuleType("docs_tau2_brief")
    exec(compile(block, str(docs), "exec"), module.__dict__)
    # The docs' plugin loads before tau2's: its lookup waits for tau2's hook.
    with isolated_plugins(("docs_tau2_brief", module),
                          ("tau2", interplay_tau2.plugin, "interplay-tau2")) as host:
        assert host.infos["docs_tau2_brief"].error is None
        brief = lookup("verifiers", "tau2_brief")
        assert issubclass(brief, interplay_tau2.Tau2Reward)
        assert brief.Config().max_user_turns == 2 and brief.Config().judge is None
