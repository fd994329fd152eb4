"""The rubric verifier over real HTTP with a scripted judge: a good verdict, a malformed one
then a good one, malformed twice (a recorded failure), a separate judge endpoint, the user's
side of a relay; and subclasses recognized by name, also from stored configs."""

from __future__ import annotations

import json
import re
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import interplay
from interplay.builtin_envs.steps import OneShot
from interplay.builtin_verifiers.rubric import (
    JUDGE_SYSTEM,
    Criterion,
    Rubric,
    RubricConfig,
    VerdictError,
    is_rubric,
    parse_verdict,
)
from interplay.config.endpoint import Endpoint
from interplay.config.loading import structure
from interplay.contracts.env import Env, SeatSpec
from interplay.errors import InterplayError
from interplay.run.episode import RunResources, run_episode
from interplay.run.loader import env_from_toml
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, run_scripted
from interplay.values.records import Episode, Task

CRITERIA = [Criterion("correct", "The answer names the capital of France.", weight=3.0),
            Criterion("concise", "The answer is one short sentence.", weight=1.0)]
TASK = Task(idx=0, prompt="What is the capital of France?", answer="Paris")
GOOD = json.dumps({"criteria": [{"name": "correct", "score": 1, "reason": "says Paris"},
                                {"name": "concise", "score": 0.5, "reason": "a bit long"}]})


def rubric_env(**settings: Any) -> Env:
    config = RubricConfig(criteria=list(CRITERIA), **settings)

    class Judged(Env):
        name = "judged"
        seats = {"assistant": SeatSpec(harness="null")}

        def steps(self) -> list[Any]:
            return [OneShot()]

        def verifiers(self) -> list[Any]:
            return [Rubric(config)]

    env = Judged()
    env.check()
    return env


def is_judge(req: ScriptedRequest) -> bool:
    return bool(req.messages) and req.messages[0].get("content") == JUDGE_SYSTEM


async def judged(judge_script: Sequence[str | ScriptedReply], **settings: Any
                 ) -> tuple[Episode, list[ScriptedRequest]]:
    replies = ["The capital of France is Paris, a lovely city.", *judge_script]
    env = rubric_env(**settings)
    run = await run_scripted(env, TASK, replies)
    return run.episode, run.requests


async def test_good_verdict_gives_the_weighted_score_with_reasons() -> None:
    episode, requests = await judged([f"```json\n{GOOD}\n```"])
    assert episode.error is None
    assert episode.reward == pytest.approx((3 * 1 + 1 * 0.5) / 4)
    reward = episode.rewards[0]
    assert reward.name == "rubric"
    assert "correct 1.00: says Paris" in (reward.reason or "")
    assert reward.info["criteria"]["concise"] == {"score": 0.5, "weight": 1.0,
                                                  "reason": "a bit long"}
    assert reward.info["attempts"] == 1
    # The judge read the assistant's transcript, the criteria and the reference answer.
    judge_prompt = requests[1].messages[1]["content"]
    assert "lovely city" in judge_prompt and "Reference answer: Paris" in judge_prompt
    assert "correct: The answer names the capital of France." in judge_prompt
    assert requests[1].body.get("temperature") == 0.0
    # Its call is on the episode, apart from the traces, and counts in the usage.
    assert len(episode.judge_calls) == 1
    assert episode.judge_calls[0].error is None
    assert episode.usage.total_tokens > episode.trace("assistant").usage.total_tokens


async def test_malformed_then_good_verdict_retries_once() -> None:
    prose = f"Sure! Here is my verdict: {GOOD} Hope this helps."
    episode, requests = await judged(["The answer is great, 10/10.", prose])
    assert episode.error is None
    assert episode.reward == pytest.approx(0.875)
    assert episode.rewards[0].info["attempts"] == 2
    assert len(episode.judge_calls) == 2
    retry = requests[2].messages
    assert retry[-2] == {"role": "assistant", "content": "The answer is great, 10/10."}
    assert "could not be used" in retry[-1]["content"]


async def test_malformed_twice_is_a_recorded_failure_not_a_score() -> None:
    episode, _ = await judged(["no json here", '{"criteria": [{"name": "correct", "score": 7}]}'])
    assert episode.reward is None
    assert episode.rewards == []
    assert episode.error_type == "verifier_error"
    assert "no usable verdict in 2 attempt(s)" in (episode.error or "")
    assert episode.metrics["rubric_error"] == 1.0
    assert len(episode.judge_calls) == 2


async def test_a_failed_judge_call_is_not_asked_again_by_the_rubric() -> None:
    """Transport failures are retried by the endpoint's policy alone: the rubric's retries
    are for unreadable verdicts."""
    episode, requests = await judged([ScriptedReply.fault(400), GOOD], retries=1)
    assert episode.error_type == "verifier_error" and episode.reward is None
    assert "the judge call failed (bad_request) after 1 attempt(s)" in (episode.error or "")
    assert len(episode.judge_calls) == 1 and len([r for r in requests if is_judge(r)]) == 1


async def test_retries_are_configurable_and_a_failed_judge_call_is_recorded() -> None:
    episode, _ = await judged([ScriptedReply.fault(400)], retries=0)
    assert episode.error_type == "verifier_error"
    assert "judge call failed (bad_request)" in (episode.error or "")
    assert len(episode.judge_calls) == 1
    assert episode.judge_calls[0].error_type == "bad_request"


async def test_a_separate_judge_endpoint() -> None:
    async with ScriptedModel([GOOD], model="judge-model") as judge:
        episode, requests = await judged([], judge=judge.endpoint)
        assert len(judge.requests) == 1 and is_judge(judge.requests[0])
    assert [is_judge(r) for r in requests] == [False]
    assert episode.reward == pytest.approx(0.875)
    assert episode.judge_calls[0].model == "judge-model"
    assert episode.rewards[0].info["judge_model"] == "judge-model"


async def test_a_judge_table_naming_only_its_model_keeps_the_runs_server() -> None:
    """`judge = {model = "judge-model"}` (a config table) is laid over the run's endpoint key
    by key, as a seat's model table is: the judge is asked on the run's server with the
    run's sampling, under its own model name (not the embedded model, an Endpoint's default
    server), and the run's own calls are left as they were."""
    judge = structure({"model": "judge-model"}, Endpoint, path="judge")
    episode, requests = await judged([GOOD], judge=judge)
    judged_requests = [r for r in requests if is_judge(r)]
    assert len(judged_requests) == 1 and judged_requests[0].body["model"] == "judge-model"
    assert [r.body["model"] for r in requests if not is_judge(r)] == ["scripted"]
    assert episode.reward == pytest.approx(0.875)
    assert episode.judge_calls[0].model == "judge-model"


def test_an_endpoint_table_is_laid_over_the_runs_key_by_key() -> None:
    run = structure({"base_url": "https://api.example/v1", "model": "big", "api_key_var": "KEY",
                     "timeout_s": 300, "sampling": {"temperature": 0.5}}, Endpoint)
    own = structure({"model": "small", "sampling": {"top_p": 0.9}}, Endpoint).over(run)
    assert (own.base_url, own.model, own.api_key_var, own.timeout_s) == (
        "https://api.example/v1", "small", "KEY", 300)
    assert own.sampling == {"temperature": 0.5, "top_p": 0.9}
    # Another server keeps none of the run's credentials; the embedded model is one too.
    elsewhere = structure({"base_url": "http://127.0.0.1:8000/v1"}, Endpoint).over(run)
    assert (elsewhere.model, elsewhere.api_key_var, elsewhere.timeout_s) == ("big", None, 300)
    embedded = structure({"base_url": None}, Endpoint).over(run)
    assert embedded.base_url is None and embedded.api_key_var is None
    # Made in code, an endpoint means every field as it is.
    assert Endpoint(model="x").over(run) == Endpoint(model="x")


async def test_the_judge_can_read_the_users_side_of_a_relay() -> None:
    def handler(req: ScriptedRequest) -> str:
        if is_judge(req):
            assert "role-playing a user" in req.messages[1]["content"]
            return json.dumps({"criteria": [{"name": "polite", "score": 0.25, "reason": "curt"}]})
        if "role-playing a user" in req.messages[0]["content"]:
            return "###DONE###" if len(req.messages) > 3 else "When do you open?"
        return "At 10."

    class Relayed(Env):
        name = "relayed"
        seats = {"assistant": SeatSpec(harness="null"),
                 "user": SeatSpec(harness="null", trainable=False)}

        def steps(self) -> list[Any]:
            from interplay.builtin_envs.steps import Relay

            return [Relay()]

        def verifiers(self) -> list[Any]:
            return [Rubric(RubricConfig(criteria=[Criterion("polite", "The user is polite.")],
                                        seat="user", include_answer=False))]

    env = Relayed()
    env.check()
    async with ScriptedModel(handler) as model:
        resources = RunResources(endpoint=model.endpoint)
        try:
            episode = await run_episode(env, Task(idx=0, prompt="Ask the opening hours."),
                                        resources=resources)
        finally:
            await resources.aclose()
    assert episode.error is None
    assert episode.reward == 0.25


def test_verdict_parsing_accepts_the_common_shapes() -> None:
    names = ["correct", "concise"]
    assert parse_verdict(GOOD, names) == {"correct": (1.0, "says Paris"),
                                          "concise": (0.5, "a bit long")}
    mapping = '{"Correct": {"score": "0.9", "reason": "ok"}, "concise": 1}'
    assert parse_verdict(f"Verdict:\n```\n{mapping}\n```", names) == {
        "correct": (0.9, "ok"), "concise": (1.0, "")}
    assert parse_verdict('{"score": 0.3, "reason": "meh"}', ["only"]) == {"only": (0.3, "meh")}
    for bad, why in [("", "empty"), ("{}", "missing"), ('{"correct": 1, "concise": 2}',
                                                       "outside [0, 1]"),
                     ('{"correct": true, "concise": 1}', "not a number"),
                     ("no braces", "no JSON")]:
        with pytest.raises(VerdictError, match=re.escape(why)):
            parse_verdict(bad, names)


@pytest.mark.parametrize(("config", "why"), [
    (RubricConfig(criteria=[CRITERIA[0], CRITERIA[0]]), "criterion names must be unique"),
    (RubricConfig(criteria=[Criterion("a", "x", weight=0.0)]), "positive sum"),
    (RubricConfig(criteria=list(CRITERIA), retries=-1), "retries must be 0 or more"),
    (RubricConfig(criteria=list(CRITERIA), seat="user"), "no step opens seat 'user'"),
    (RubricConfig(criteria=list(CRITERIA), max_transcript_chars=1),
     "max_transcript_chars must be 2 or more, got 1"),
])
def test_rubric_config_problems_are_refused_at_load(config: RubricConfig, why: str) -> None:
    class Judged(Env):
        name = "judged"

        def steps(self) -> list[Any]:
            return [OneShot()]

        def verifiers(self) -> list[Any]:
            return [Rubric(config)]

    with pytest.raises(InterplayError, match=re.escape(why)):
        Judged().check()


# -- the override point ----------------------------------------------------------------------

#: What a plain rubric sent its judge before subclasses could add sections: byte for byte.
PLAIN_JUDGE_REQUEST = [
    {"role": "system", "content": (
        "You are a careful, impartial grader. You read the transcript of a conversation "
        "and score it against each criterion you are given, from 0 (not met at all) to 1 "
        "(fully met). Judge only what the transcript shows. Reply with only a JSON object.")},
    {"role": "user", "content": (
        "Grade it.\n\nCriteria:\n- correct: The answer names the capital of France.\n- "
        "concise: The answer is one short sentence.\n\nReference answer: Paris\n\n"
        "Transcript (the conversation as the 'assistant' seat saw it; its own messages are "
        "marked ASSISTANT):\n<transcript>\n[USER] What is the capital of France?\n"
        "[ASSISTANT] The capital of France is Paris, a lovely city.\n</transcript>\n\n"
        "Reply with only a JSON object with one entry per criterion:\n{\"criteria\": "
        "[{\"name\": \"<criterion name>\", \"score\": <number from 0 to 1>, \"reason\": "
        "\"<one sentence>\"}]}")},
]


async def test_a_plain_rubric_sends_its_judge_exactly_what_it_always_did() -> None:
    _, requests = await judged([GOOD], instructions="Grade it.")
    (judge,) = [r for r in requests if is_judge(r)]
    assert json.dumps(judge.messages) == json.dumps(PLAIN_JUDGE_REQUEST)


class SummingJudge(Rubric):
    """Adds the run's own summary to what the judge reads."""

    name = "summing_judge"

    def judge_prompt_sections(self, episode: Episode, ctx: Any) -> list[str]:
        where = "in a run" if ctx is not None else "outside a run"
        return [f"Summary ({where}): {len(episode.traces)} trace(s).", "Second section."]


async def test_a_subclass_adds_sections_after_the_transcript() -> None:
    env = rubric_env()
    env.verifiers = lambda: [SummingJudge(RubricConfig(criteria=list(CRITERIA)))]  # type: ignore
    run = await run_scripted(env, TASK, ["The capital is Paris.", GOOD])
    assert run.episode.error is None and run.episode.reward == pytest.approx(3.5 / 4)
    (judge,) = [r for r in run.requests if is_judge(r)]
    text = judge.messages[1]["content"]
    assert "</transcript>\n\nSummary (in a run): 1 trace(s).\n\nSecond section.\n\nReply " \
           "with only a JSON object" in text
    # Built outside a run (a preview), the hook is asked with no context.
    judge_messages = SummingJudge(RubricConfig(criteria=list(CRITERIA))).judge_messages(
        run.episode)
    assert "Summary (outside a run): 1 trace(s)." in judge_messages[1].text


# -- subclasses are recognized -------------------------------------------------------------


class HouseJudge(Rubric):
    """A rubric with a house style; registered under its own name."""

    name = "house_judge"


def test_subclass_registered_under_another_name_is_a_rubric(register_plugin: Any,
                                                            tmp_path: Path) -> None:
    module = types.ModuleType("house_judge_plugin")

    @interplay.hookimpl
    def register_verifiers(register: Any) -> None:
        register(HouseJudge)

    module.register_verifiers = register_verifiers  # type: ignore[attr-defined]
    register_plugin(module)

    assert is_rubric("house_judge") and is_rubric("rubric")
    assert is_rubric(HouseJudge) and is_rubric(HouseJudge(RubricConfig()))
    assert not is_rubric("exact") and not is_rubric("payoff")

    # A stored config (a TOML env file, or a JSON record of one) names it only by kind.
    (tmp_path / "t.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "env.toml").write_text(
        'taskset = "t.jsonl"\n[[steps]]\nkind = "one_shot"\n'
        '[[verifiers]]\nkind = "house_judge"\n'
        '[[verifiers.criteria]]\nname = "kind"\ndescription = "The reply is kind."\n')
    env = env_from_toml(tmp_path / "env.toml")()
    env.check()
    (verifier,) = env.verifiers()
    assert isinstance(verifier, HouseJudge) and is_rubric(verifier)
    stored = json.loads(json.dumps({"verifiers": [{"kind": "house_judge"},
                                                  {"kind": "contains"}]}))
    assert [is_rubric(v["kind"]) for v in stored["verifiers"]] == [True, False]


def test_unknown_name_is_a_one_line_error() -> None:
    with pytest.raises(InterplayError, match="unknown verifier 'nope'"):
        is_rubric("nope")


def test_endpoint_in_toml_config(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "env.toml").write_text(
        'taskset = "t.jsonl"\n[[steps]]\nkind = "one_shot"\n'
        '[[verifiers]]\nkind = "rubric"\nretries = 2\n'
        '[verifiers.judge]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "judge"\n'
        '[[verifiers.criteria]]\nname = "kind"\ndescription = "The reply is kind."\n'
        'weight = 2\n')
    (verifier,) = env_from_toml(tmp_path / "env.toml")().verifiers()
    assert isinstance(verifier.config.judge, Endpoint)
    assert verifier.config.judge.model == "judge" and verifier.config.retries == 2
    assert verifier.config.criteria[0].weight == 2.0
