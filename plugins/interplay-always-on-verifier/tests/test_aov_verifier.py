"""always_on_agent_verifier on real always_on runs of `always-on-week` (the scripted model over
real HTTP answering the agent, the user sim, the contacts and the judge): what the judge reads
and never reads, the deterministic criteria weighed in, each refusal at load, the skip on a
failed turn, and the subclass recognized as a rubric."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from aov_week import CRITERIA, SENTINEL, Week, judge_prompt, verifier_row

from interplay import Env, InterplayError, Rubric, load_env, lookup
from interplay.plugins import describe_kinds, is_kind
from interplay.run import env_from_toml
from interplay.testing import isolated_plugins, run_scripted
from interplay_always_on_verifier.verifier import AlwaysOnAgentVerifier


def week(*rows: dict[str, Any]) -> Env:
    """The week scored by ``rows`` alone (not the scenario's own verifiers)."""
    env = load_env("always-on-week", {"verifiers": list(rows), "own_verifiers": False})
    env.check()
    return env


async def run_week(handler: Week, *rows: dict[str, Any]) -> Any:
    env = week(*rows)
    task = next(iter(env.tasks()))
    return (await run_scripted(env, task, handler)).episode


async def test_the_judge_reads_the_chat_context_and_wakes_but_no_private_note() -> None:
    handler = Week()
    episode = await run_week(handler, verifier_row())
    assert episode.error is None, episode.error
    record = episode.results["always_on"]
    # The agent did keep private notes, and they are in the run's records...
    notes = [w.get("private_note") or "" for w in record["timeline"] if w["kind"] == "wake"]
    assert any(SENTINEL in note for note in notes)
    assert any(SENTINEL in str(m.content) for m in episode.trace("assistant").messages)
    # ...but never in what the judge was sent.
    assert SENTINEL not in handler.judge_text()
    prompt = judge_prompt(handler)
    # The user's chat with its times.
    assert re.search(r"\[ASSISTANT message #1, 2025-06-02T08:00:00\+02:00, wake 1\] I asked "
                     r"the Lindenhof", prompt)
    assert "[USER opening, 2025-06-02T08:00:00+02:00] Hi! Sam turns 35" in prompt
    assert "Shall I book it?" in prompt and "Booked the Lindenhof for Saturday." in prompt
    # The run's context: the scenario (with what she was after) and the trigger log.
    assert "Scenario always-on-week" in prompt
    assert "What she was after (the assistant was not told this): You are planning" in prompt
    assert re.search(r"\] trigger lindenhof-answers fired \(#1\)", prompt)
    assert re.search(r"\] trigger deposit-charged fired \(#1\)", prompt)
    # The wake-by-wake summary: what woke it, what it sent, its calls, the world's changes.
    assert "Wake 1, 2025-06-02T08:00:00+02:00: woken by the run's rules; her opening request." \
        in prompt
    assert "Sent the user 1 message(s) (#1;" in prompt
    assert 'send_email({"body": "Is Saturday 7 June free for 25?"' in prompt
    assert "a contact's answer from Lindenhof: Thank you for your message!" in prompt
    assert re.search(r"App changes: bookings booked by assistant \{.*\"place\": "
                     r"\"Lindenhof\"", prompt)
    assert "Stayed quiet on purpose (stay_quiet)." in prompt
    assert f"The run ended: {record['end_reason']}. {record['end_note']}" in prompt
    assert "Pending at the end:" in prompt
    # Never a wake's trajectory: no tool results, no rules text meant for the agent.
    assert "[always_on]" not in prompt
    reward = episode.rewards[0]
    assert reward.name == "always_on_agent_verifier"
    assert reward.value == pytest.approx((2 * 1 + 0.5 + 1 + 1) / 5)
    assert list(reward.info["criteria"]) == list(CRITERIA)


async def test_named_context_parts_replace_the_default() -> None:
    handler = Week()
    await run_week(handler, verifier_row(context=["user", "phone"]))
    prompt = judge_prompt(handler)
    assert "Her day (Europe/Berlin): awake 07:00-23:00; busy: work 09:00-17:30 (weekdays); " \
           "choir 19:00-21:00 (thu)." in prompt
    assert "sms from Bank: Card payment: 150 EUR to Lindenhof." in prompt
    assert "Trigger log" not in prompt and "Scenario always-on-week" not in prompt
    assert "Wake 1," in prompt  # the wake-by-wake summary is always there


async def test_deterministic_criteria_are_weighed_in_beside_the_judges() -> None:
    handler = Week()
    episode = await run_week(handler, verifier_row(latency={"weight": 1.0},
                                                   silence={"weight": 1.0}))
    reward = episode.rewards[0]
    criteria = reward.info["criteria"]
    assert list(criteria) == [*CRITERIA, "reply_latency", "silence"]
    latency, silence = criteria["reply_latency"], criteria["silence"]
    # Her waits: the opening and her yes were answered at once (rate 0: turns take no task
    # time), her first reply in 110 minutes (08:10 to 10:00); her question on Wednesday at
    # 19:30 never was: 68.5 hours of her awake time (07:00-23:00) until Monday 08:00.
    figures = latency["measured"]
    assert figures["waits"] == 4 and figures["unanswered"] == 1
    assert figures["median_minutes"] == pytest.approx((0 + 109.886) / 2, abs=0.01)
    assert figures["worst_minutes"] == pytest.approx(68.5 * 60)
    assert latency["score"] == pytest.approx(((480 - figures["median_minutes"]) / 450 + 0) / 2)
    assert latency["reason"].endswith("the last question never answered")
    # It wrote in wakes 1, 3 and 4 (her opening, the venue's answer, her reply), all news;
    # it stayed quiet on her questions in wakes 7 and 9.
    assert silence["measured"] == {"wakes_counted": 5, "unwarranted_wakes": [],
                                   "quiet_on_question_wakes": [7, 9]}
    assert silence["score"] == pytest.approx(1 - 2 / 5)
    judge = (2 * 1 + 0.5 + 1 + 1) / 5
    assert reward.value == pytest.approx((judge * 5 + latency["score"] + silence["score"]) / 7)
    assert "silence 0.60: stayed quiet on a direct question in wake(s) 7, 9" in reward.reason
    assert episode.metrics["always_on_agent_verifier"] == reward.value


async def test_a_run_whose_turn_failed_is_skipped_before_any_judge_call() -> None:
    handler = Week(fail_after_tools=True)
    episode = await run_week(handler, verifier_row(latency={}, silence={}))
    assert episode.results["always_on"]["error_type"] is not None
    assert episode.rewards == [] and episode.reward is None
    assert handler.judge == [] and episode.judge_calls == []
    assert "always_on_agent_verifier_error" not in episode.metrics


@pytest.mark.parametrize(("settings", "why"), [
    ({"use_trajectory": True}, "use_trajectory: an always_on run's wakes do not fit one judge "
                               "prompt"),
    ({"grade_up_to_turn": 3}, "grade_up_to_turn: an always_on run is graded whole"),
    ({"output_format": "per_criterion_screenshots"},
     "output_format 'per_criterion_screenshots': the verdict is a score and a reason per "
     "criterion, citing no per-criterion screenshots"),
    ({"seat": "user"}, "seat 'user' is not the agent of an always_on step; set seat = one of "
                       "['assistant']"),
    ({"context": ["scenario", "diary"]}, "context: unknown part diary"),
    ({"latency": {"good_minutes": 60, "bad_minutes": 30}}, "latency: good_minutes (60) must be "
                                                           "0 or more and below bad_minutes"),
    ({"silence": {"news": ["gossip"]}}, "silence.news: unknown wake source gossip"),
])
def test_what_cannot_grade_an_always_on_run_is_refused_at_load(settings: dict[str, Any],
                                                               why: str) -> None:
    with pytest.raises(InterplayError) as caught:
        week(verifier_row(**settings))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("env 'always-on-week' does not fit together: verifier "
                              "'always_on_agent_verifier': " + why), message


def test_a_plain_rubric_on_the_always_on_agent_is_refused_with_a_pointer() -> None:
    plain = {"kind": "rubric", "criteria": [{"name": "kind", "description": "It was kind."}]}
    with pytest.raises(InterplayError, match=re.escape(
            "verifier 'rubric': seat 'assistant' is an always_on step's agent, whose run a "
            "plain rubric cannot grade from one transcript; use kind = "
            "\"always_on_agent_verifier\" (pip install interplay-always-on-verifier)")):
        week(plain)
    week({**plain, "seat": "user"})  # the modeled user's side is one transcript


def test_the_verifier_without_an_always_on_step_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "env.toml").write_text('taskset = "t.jsonl"\n[[steps]]\nkind = "one_shot"\n'
                                       '[[verifiers]]\nkind = "always_on_agent_verifier"\n')
    with pytest.raises(InterplayError, match=re.escape(
            "verifier 'always_on_agent_verifier': the env has no always_on step, whose run this "
            "verifier grades; use kind = \"rubric\" for a conversation")):
        env_from_toml(tmp_path / "env.toml")().check()


def test_it_is_a_rubric_as_an_object_a_name_and_a_stored_config() -> None:
    verifier = AlwaysOnAgentVerifier()
    assert isinstance(verifier, Rubric)
    for it in (AlwaysOnAgentVerifier, verifier, "always_on_agent_verifier",
               {"kind": "always_on_agent_verifier", "criteria": []}):
        assert is_kind(it, "verifiers", "rubric"), it
    assert not is_kind("asked_before", "verifiers", "rubric")
    stored = describe_kinds(verifier, "verifiers")
    assert stored == {"name": "always_on_agent_verifier",
                      "is": ["always_on_agent_verifier", "rubric"]}
    # What a results folder keeps answers without this plugin installed.
    with isolated_plugins():
        assert is_kind(stored, "verifiers", "rubric")
        with pytest.raises(InterplayError, match="unknown verifier 'always_on_agent_verifier'"):
            is_kind("always_on_agent_verifier", "verifiers", "rubric")


def test_the_readme_example_loads_on_the_week(tmp_path: Path) -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    week = Path(lookup("envs", "always-on-week").source).read_text()
    path = tmp_path / "my_week.toml"
    path.write_text(week.split("[[verifiers]]", 1)[0] + block)
    env = env_from_toml(path)()
    env.check()
    (verifier,) = env.verifiers()
    assert isinstance(verifier, AlwaysOnAgentVerifier)
    cfg = verifier.config
    assert [c.name for c in cfg.criteria] == ["outcome", "asked_first"]
    assert cfg.context == ["scenario", "triggers", "phone"] and cfg.judge.model == "judge-model"
    assert cfg.latency.good_minutes == 30 and cfg.silence.weight == 0.5


async def test_a_stored_line_whose_records_are_in_its_side_file_is_refused_with_a_pointer(
        ) -> None:
    """A long episode's line keeps its timeline and chat in its side file: grading the line
    as it is would grade an empty run, so it is refused, naming how to load it whole."""
    handler = Week()
    episode = await run_week(handler, verifier_row())
    assert episode.reward is not None  # graded whole in the run
    record = episode.results["always_on"]
    episode.results["always_on"] = {
        **{k: v for k, v in record.items() if k not in ("timeline", "conversation")},
        "side_file": "episodes/0123abcd.json"}
    [verifier] = week(verifier_row()).run_verifiers()
    judged = len(handler.judge)
    with pytest.raises(RuntimeError, match=r"episodes/0123abcd\.json; load the episode with "
                                           r"interplay\.run\.whole_record"):
        await verifier.score(episode, None)  # type: ignore[arg-type]
    assert len(handler.judge) == judged  # no judge call spent on it
