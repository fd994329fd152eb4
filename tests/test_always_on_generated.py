"""Generated always_on scenarios: a scenario kind makes a task from a seed (the same bytes for
the same seed), its world and person load and run, each goal kind is met by an agent that does
the right thing and missed by one that makes the goal's mistake (early purchase, a message at
03:00, news passed on late, ...), scored from the records alone; and `interplay generate`, the
`always-on-generated` env and a plugin's own kind, through the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from interplay import cli, hookimpl
from interplay.builtin_envs.always_on.errands import Errands, ErrandsConfig
from interplay.builtin_envs.always_on.reference import ReferenceAgent, reference_model
from interplay.builtin_envs.user_sim_step import UserSimStep
from interplay.builtin_verifiers.goals import matches
from interplay.contracts.scenario import ScenarioKind, generate_tasks, task_line
from interplay.errors import InterplayError
from interplay.run.loader import load_env
from interplay.testing import ScriptedModel, run_scripted
from interplay.values.records import Episode, Task
from interplay.world import Schedule, times
from interplay.world.scenario import scenario_from


def lines(kind: ScenarioKind, count: int, seed: int = 0) -> list[str]:
    return [task_line(t) for t in generate_tasks(kind, seed=seed, count=count)]


def test_the_same_seed_gives_the_same_bytes_and_each_seed_its_own() -> None:
    first = lines(Errands(), 100)
    assert first == lines(Errands(), 100)
    assert len(set(first)) == 100
    assert [json.loads(x)["idx"] for x in first] == list(range(100))
    # Task i is seed + i: a taskset from seed 40 is the same tasks, numbered from 0.
    assert [json.loads(x)["info"] for x in lines(Errands(), 10, seed=40)] == \
        [json.loads(x)["info"] for x in first[40:50]]
    # A knob changes its part alone: more events, the same person and the same errands.
    calm, busy = (next(generate_tasks(Errands(ErrandsConfig(events=n)), seed=7))
                  for n in (0, 200))
    assert calm.info["goals"] == busy.info["goals"] and calm.info["user"] == busy.info["user"]
    assert len(busy.info["world"]["triggers"]) > len(calm.info["world"]["triggers"]) + 100


def test_the_command_writes_the_same_bytes_in_another_process(tmp_path: Path) -> None:
    # Another process hashes strings with another seed: nothing drawn may depend on it.
    path = tmp_path / "a.jsonl"
    done = subprocess.run([sys.executable, "-m", "interplay.cli", "generate", "errands",
                           "-n", "25", "-s", "3", "-o", str(path), "--set", "days=3"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "wrote 25 errands tasks (seeds 3-27)" in done.stderr
    expected = lines(Errands(ErrandsConfig(days=3)), 25, seed=3)
    assert path.read_text().splitlines() == expected
    # Made as a run's files are, under the umask (not a temporary file's 0600).
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["a.jsonl"]


@pytest.mark.parametrize(("knobs", "why"), [
    ({"days": 0}, "days must be 1 to 60"), ({"difficulty": 4}, "difficulty must be 1, 2 or 3"),
    ({"contacts": 9}, "contacts must be 1 to 6"), ({"dayz": 3}, "dayz")])
def test_knobs_that_make_no_scenario_are_refused_in_one_line(
        knobs: dict[str, Any], why: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [f"--set={k}={v}" for k, v in knobs.items()]
    assert cli.main(["generate", "errands", "-n", "2", "-o", "-", *args]) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1
    with pytest.raises(InterplayError, match=why):
        load_env("always-on-generated", {"knobs": knobs}).check()


@pytest.mark.parametrize("knobs", [
    {"difficulty": 1, "days": 1}, {"difficulty": 2, "days": 2}, {"difficulty": 3},
    {"difficulty": 3, "days": 28, "events": 300, "contacts": 6}])
def test_every_generated_world_and_person_load(knobs: dict[str, Any]) -> None:
    kinds: set[str] = set()
    for task in generate_tasks(Errands(ErrandsConfig(**knobs)), seed=100, count=25):
        info = task.info
        scenario = scenario_from({**info["world"], "user": info["user"]}, source="generated")
        assert scenario.timezone == info["user"]["timezone"]
        user = UserSimStep({"user_sim": "llm"}).record(task)
        assert (user["name"], user["awake"]) == (info["user"]["name"], info["user"]["awake"])
        kinds |= {g["kind"] for g in info["goals"]}
        # Her errands are in her request; the news comes inside the run.
        assert info["goals"][0]["kind"] == "relayed_within"
        end = scenario.end_time
        assert end is not None
        for trigger in scenario.triggers:
            if trigger.at:
                assert scenario.start_time < times.parse_instant(trigger.at,
                                                                 scenario.timezone) < end
    expected = {"relayed_within", "approved_first", "acted_on_reply", "quiet_hours",
                "no_collateral"}
    if knobs["difficulty"] >= 2:
        expected.add("app_state")
    assert kinds == expected


# -- the goals: right and wrong -------------------------------------------------------------


def night_task(days: int = 7) -> Task:
    """A task whose news comes while she sleeps."""
    for task in generate_tasks(Errands(ErrandsConfig(days=days, difficulty=2)), count=200):
        world, user = task.info["world"], task.info["user"]
        news = next(t for t in world["triggers"] if t["name"] == "news")
        when = times.parse_instant(news["at"], world["timezone"])
        if Schedule.from_plain(user).state_at(when) == "asleep" and any(
                g["id"] == "urgent" for g in task.info["goals"]):
            return task
    raise AssertionError("no seed of 200 brings the news at night")


async def play(task: Task, *mistakes: str) -> Episode:
    env = load_env("always-on-generated", {"count": 1})
    env.check()
    result = await run_scripted(env, task, ReferenceAgent(task, mistakes), seed=0)
    assert result.episode.error is None, result.episode.error
    return result.episode


def scores(episode: Episode) -> dict[str, float]:
    return {r.info["goal"]: r.value for r in episode.rewards}


async def test_an_agent_that_does_the_right_thing_meets_every_goal() -> None:
    task = night_task()
    episode = await play(task)
    assert scores(episode) == {g["id"]: 1.0 for g in task.info["goals"]}
    assert episode.reward == 1.0
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "end_time" and ao["summary"]["counts"]["late_events"] == 0
    # The news came in her night: a check at her waking passed it on.
    relay = next(r for r in episode.rewards if r.info["goal"] == "relay")
    assert "after she was up" in (relay.reason or "")
    assert ao["summary"]["counts"]["checks_due"] >= 1


@pytest.mark.parametrize(("mistake", "missed"), [
    ("early_purchase", {"purchase"}),        # bought before she said yes
    ("message_at_night", {"quiet", "relay"}),  # the news said at once, in her night: it
    #                                            woke her, and is not passed on once she is up
    ("relay_late", {"relay"}),               # passed on past the minutes she allowed
    ("ignore_contact", {"contact"}),         # the visit never put in her calendar
    ("skip_keep", {"keep"}),                 # the appointment kept, or the note never made
    ("ignore_urgent", {"urgent"}),           # the alarm left for the morning
])
async def test_each_goal_fails_when_the_agent_makes_its_mistake(mistake: str,
                                                                missed: set[str]) -> None:
    task = night_task()
    got = scores(await play(task, mistake))
    assert {goal for goal, value in got.items() if value == 0.0} == missed
    assert all(value == 1.0 for goal, value in got.items() if goal not in missed)


@pytest.mark.parametrize("reply", ["No, please don't buy that.", "Ok... no, wait, not now."])
async def test_a_purchase_after_she_said_no_is_not_approved(reply: str) -> None:
    # The agent asks, she declines, and it buys anyway: a reply is not a go-ahead unless it
    # says yes, nor when it also says no.
    task = night_task()
    agent = ReferenceAgent(task)

    def declining(request: Any) -> Any:
        if "role-playing a user" in str(request.messages[0]["content"]):
            return reply
        return agent(request)

    env = load_env("always-on-generated", {"count": 1})
    episode = (await run_scripted(env, task, declining, seed=0)).episode
    assert episode.error is None, episode.error
    purchase = next(r for r in episode.rewards if r.info["goal"] == "purchase")
    assert purchase.value == 0.0 and purchase.info["replies_not_agreeing"] >= 1
    assert "said yes" in (purchase.reason or "")


async def test_a_message_at_night_about_urgent_news_keeps_her_nights_quiet() -> None:
    task = night_task()
    episode = await play(task)
    quiet = next(r for r in episode.rewards if r.info["goal"] == "quiet")
    assert quiet.value == 1.0 and quiet.info["sent_asleep"]  # the alarm, at once
    assert quiet.info["woke_her"] == []


def test_goal_fields_match_date_times_as_instants_and_text_with_wildcards() -> None:
    tz = "Europe/Berlin"
    assert matches({"start": "2025-06-05T10:00:00+02:00"}, {"start": "2025-06-05T10:00"}, tz)
    assert not matches({"start": "2025-06-05T11:00"}, {"start": "2025-06-05T10:00"}, tz)
    assert matches({"text": "Wifi: Maple-412 (guest)"}, {"text": "*maple-412*"}, tz)
    assert matches({"sku": "tea-100", "quantity": 1}, {"sku": "tea-100"}, tz)
    assert not matches({"sku": "tea-20"}, {"sku": "tea-100"}, tz)


@pytest.mark.parametrize(("goal", "says"), [
    ({"trigger": "news", "text": "4821", "minutse": 5}, "minutse"),
    ({"trigger": "news", "text": "4821", "minutes": -3}, "minutes must be more than 0, got -3")])
async def test_a_task_names_a_goal_no_verifier_takes_in_one_line(goal: dict[str, Any],
                                                                  says: str) -> None:
    task = night_task()
    bad = attrs.evolve(task, info={**task.info, "goals": [{"kind": "relayed_within", "id": "x",
                                                           **goal}]})
    env = load_env("always-on-generated", {"count": 1})
    result = await run_scripted(env, bad, ReferenceAgent(task), seed=0)
    # A verifier that cannot score: the episode is not scored, and says which goal and why.
    assert result.episode.error_type == "verifier_error" and result.episode.reward is None
    error = result.episode.error or ""
    assert error.count(f"task {task.idx} info.goals[0] (x)") == 1 and says in error


# -- her person and her world from the task -------------------------------------------------


def test_a_task_says_who_she_is_but_not_who_plays_her() -> None:
    task = next(generate_tasks(Errands(), count=1))
    step = UserSimStep({"user_sim": "llm", "seat": "user"})
    assert step.record(task)["timezone"] == task.info["user"]["timezone"]
    for key in ("user_sim", "seat", "tools"):
        bad = attrs.evolve(task, info={**task.info, "user": {**task.info["user"], key: "x"}})
        with pytest.raises(InterplayError, match=rf"task 0 info\.user\.{key}: who plays her"):
            step.record(bad)
    odd = attrs.evolve(task, info={**task.info, "user": {**task.info["user"],
                                                         "awake": ["07:00", "07:00"]}})
    with pytest.raises(InterplayError, match=r"task 0 info\.user: awake"):
        step.record(odd)


async def test_a_task_whose_world_does_not_load_ends_as_a_config_error() -> None:
    task = next(generate_tasks(Errands(), count=1))
    world = {**task.info["world"], "end": "P0D"}
    env = load_env("always-on-generated", {"count": 1})
    bad = attrs.evolve(task, info={**task.info, "world": world})
    result = await run_scripted(env, bad, ReferenceAgent(task), seed=0)
    assert result.episode.error_type == "config_error"
    assert "task 0 info.world: end: must come after the start" in (result.episode.error or "")
    # What sets up the env around a world is the env's, never a task's.
    bad = attrs.evolve(task, info={**task.info, "world": {**task.info["world"],
                                                          "always_on": {"max_wakes": 1}}})
    result = await run_scripted(env, bad, ReferenceAgent(task), seed=0)
    assert "task 0 info.world.always_on: the env sets it" in (result.episode.error or "")


# -- the command and the env ----------------------------------------------------------------


def test_eval_runs_generated_weeks_scored_by_code(
        tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> None:
    tasks = list(generate_tasks(Errands(), count=3))
    model = scripted_model(reference_model(tasks))
    out = tmp_path / "run"
    assert cli.main(["eval", "always-on-generated", "-n", "3", "-c", "3", "--base-url",
                     model.base_url, "-o", str(out), "--quiet", "--no-report"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reward_mean"] == 1.0 and summary["scored"] == 3
    assert summary["metrics"]["late_events"] == 0.0 and summary["truncated"] == 0
    records = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert {r["info"]["task_idx"] for r in records} == {0, 1, 2}
    # The same tasks from a file `interplay generate` wrote.
    path = tmp_path / "tasks.jsonl"
    assert cli.main(["generate", "errands", "-n", "3", "-o", str(path)]) == 0
    env = load_env("always-on-generated", {"taskset": str(path)})
    assert [task_line(t) for t in env.tasks()] == [task_line(t) for t in tasks]


class Picnic(ScenarioKind):
    """A picnic in the park: one errand, a note of the time."""

    name = "picnic"

    def generate(self, seed: int) -> Task:
        task = next(generate_tasks(Errands(ErrandsConfig(days=1, difficulty=1, events=0)),
                                   seed=seed))
        return attrs.evolve(task, prompt=f"Picnic {seed}! {task.prompt}")


def test_hook_register_scenario_kinds(register_plugin: Any, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    register_plugin(types.SimpleNamespace(register_scenario_kinds=hookimpl(
        lambda register: register(Picnic))), "picnic-kind")
    assert cli.main(["list", "scenario-kinds"]) == 0
    listed = capsys.readouterr().out
    assert "A picnic in the park" in listed and "[local]" in listed
    path = tmp_path / "picnic.jsonl"
    assert cli.main(["generate", "picnic", "-n", "2", "-s", "5", "-o", str(path)]) == 0
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["prompt"].split("!")[0] for r in rows] == ["Picnic 5", "Picnic 6"]
    env = load_env("always-on-generated", {"kind": "picnic", "count": 2, "seed": 5})
    env.check()
    assert [t.prompt for t in env.tasks()] == [r["prompt"] for r in rows]


def test_the_goal_verifiers_as_the_page_writes_them_are_what_the_code_takes() -> None:
    import re
    import tomllib

    from interplay.run.loader import build

    page = (Path(__file__).resolve().parents[1] / "docs" / "always_on.md").read_text()
    [block] = [b for b in re.findall(r"```toml\n(.*?)```", page, re.S)
               if b.startswith("[[verifiers]]\nkind = \"relayed_within\"")]
    rows = tomllib.loads(block)["verifiers"]
    assert [r["kind"] for r in rows] == ["relayed_within", "approved_first", "quiet_hours",
                                         "acted_on_reply", "app_state", "no_collateral"]
    for i, row in enumerate(rows):
        verifier = build("verifiers", row["kind"], {k: v for k, v in row.items()
                                                    if k != "kind"}, f"verifiers[{i}]")
        assert verifier.check([type("S", (), {"writes": {"always_on"}, "name": "a"})()]) == []
