"""The ``tests`` verifier: a command run in the episode's sandbox after the agent, its reward the
exit status or a reward file (reward.json: an object of numbers, ``reward`` the reward, each
other a metric; else reward.txt: one number); a reward file that is malformed, not finite or
without a reward leaves the episode unscored with the reason; tests past their time limit score
0; the output kept bounded as the reason; a reward file the agent left is never read; the
task's held-back test files written first; no sandbox, no command and a regrade (the sandbox is
gone) each say so in one line. The rules run on the local backend (the same contract) and once
on docker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from interplay import Endpoint, Env, EpisodeContext, SeatSpec, Step, Task, Verifier, Workspace
from interplay.builtin_verifiers.tests import Tests, TestsConfig, plan, read_reward
from interplay.errors import InterplayError
from interplay.run import RunResources, run_episode
from interplay.testing import ScriptedModel
from interplay.values.records import Episode


class Idle(Step):
    """The agent's part, done: nothing changes in the workspace."""

    name = "idle"

    async def run(self, ctx: EpisodeContext) -> None:
        return None


class Graded(Env):
    name = "graded"
    needs_sandbox = True
    seats: ClassVar = {"assistant": SeatSpec(harness="null")}
    config_tests: ClassVar[dict[str, Any]] = {}

    def tasks(self) -> list[Task]:
        return []

    def steps(self) -> list[Step]:
        return [Idle()]

    def verifiers(self) -> list[Verifier]:
        return [Tests(TestsConfig(**self.config_tests))]


async def grade(tests: Any, *, files: dict[str, str] | None = None, setup: list[str] | None = None,
                kind: str = "local", **config: Any) -> Episode:
    """One episode of an env whose task's info.tests is ``tests``, scored by ``tests`` with
    ``config``."""
    env = Graded()
    env.config_tests = config
    task = Task(0, "work", info={"tests": tests} if tests is not None else {},
                workspace=Workspace(files=files or {"README": "a task\n"}, setup=setup or []))
    resources = RunResources(endpoint=Endpoint(base_url="http://127.0.0.1:9/v1"),
                             sandbox={"kind": kind})
    try:
        return await run_episode(env, task, resources=resources)
    finally:
        await resources.aclose()


def write(name: str, text: str) -> str:
    """A shell line that writes ``text`` to the reward file ``name``."""
    return f"printf %s {json.dumps(text)} > \"$INTERPLAY_REWARD_DIR/{name}\""


# -- the exit status ------------------------------------------------------------------------------


async def test_exit_status_0_is_1_and_any_other_0() -> None:
    ep = await grade("echo all good")
    assert ep.error is None, ep.error
    assert ep.reward == 1.0
    [reward] = ep.rewards
    assert reward.reason == "tests exit code 0\nall good\n"
    assert reward.info["exit_code"] == 0 and reward.info["timed_out"] is False
    ep = await grade("echo 'FAILED (failures=2)'; exit 3")
    assert ep.reward == 0.0
    assert ep.rewards[0].reason == "tests exit code 3\nFAILED (failures=2)\n"


async def test_the_output_is_kept_bounded_as_the_reason() -> None:
    ep = await grade("head -c 100000 /dev/zero | tr '\\0' x; echo; echo LAST LINE; exit 1",
                     output_bytes=1024)
    reason = ep.rewards[0].reason
    assert reason.startswith("tests exit code 1\n") and reason.rstrip().endswith("LAST LINE")
    assert "bytes left out" in reason and len(reason.encode()) < 1024 + 100
    assert ep.rewards[0].info["output_cut"] > 98000


async def test_tests_past_their_limit_score_0_saying_so() -> None:
    ep = await grade({"command": "echo begun; sleep 600", "timeout_s": 1})
    assert ep.error is None, ep.error
    assert ep.reward == 0.0
    assert ep.rewards[0].reason.startswith("tests ran past their 1 s limit\nbegun")
    assert ep.rewards[0].info["timed_out"] is True


# -- the reward file ------------------------------------------------------------------------------


async def test_reward_json_gives_the_reward_and_each_other_number_a_metric() -> None:
    ep = await grade(write("reward.json", '{"reward": 0.25, "passed": 3, "failed": 9}')
                     + "; exit 1")
    assert ep.error is None, ep.error
    assert ep.reward == 0.25  # the file's, whatever the exit status; metrics do not count
    main, *metrics = ep.rewards
    assert main.name == "tests" and main.value == 0.25
    assert main.reason.startswith("tests reward.json (tests exit code 1)")
    assert main.info["metrics"] == {"passed": 3.0, "failed": 9.0}
    assert [(r.name, r.value, r.weight) for r in metrics] == [("tests.passed", 3.0, 0.0),
                                                             ("tests.failed", 9.0, 0.0)]
    assert ep.metrics["tests"] == 0.25 and ep.metrics["tests.failed"] == 9.0


async def test_reward_txt_is_read_when_there_is_no_reward_json() -> None:
    ep = await grade('echo 0.5 > "$INTERPLAY_REWARD_DIR/reward.txt"')
    assert ep.reward == 0.5 and ep.rewards[0].info["reward_file"] == "reward.txt"
    ep = await grade(write("reward.txt", "0.5") + "; " + write("reward.json", '{"reward": 1}'))
    assert ep.reward == 1.0 and ep.rewards[0].info["reward_file"] == "reward.json"


@pytest.mark.parametrize(("name", "text", "why"), [
    ("reward.json", "not json", "reward.json is not JSON"),
    ("reward.json", '{"passed": 3}', 'reward.json has no "reward" (it holds passed)'),
    ("reward.json", '[1]', "reward.json holds a list"),
    ("reward.json", '{"reward": NaN}', "reward.json's 'reward' is NaN, not a finite number"),
    ("reward.json", '{"reward": 1, "passed": "3"}', "reward.json's 'passed' is \"3\""),
    ("reward.json", '{"reward": true}', "reward.json's 'reward' is true"),
    ("reward.txt", "inf", "reward.txt holds 'inf', not a finite number"),
    ("reward.txt", "passed", "reward.txt holds 'passed', not a number"),
    ("reward.txt", "", "reward.txt holds '', not a number"),
])
async def test_a_reward_file_that_is_not_a_reward_leaves_the_episode_unscored(
        name: str, text: str, why: str) -> None:
    ep = await grade(write(name, text))
    assert ep.reward is None and ep.rewards == []
    assert ep.error_type == "verifier_error"
    assert ep.error.startswith("verifier tests: TestsError: ")
    assert why in ep.error
    assert "\n" not in ep.error


async def test_a_reward_file_the_agent_left_is_never_read(tmp_path: Path) -> None:
    # A fresh folder per scoring by default; a configured one is emptied of reward files first.
    planted = ["mkdir -p out && echo 1 > out/reward.txt && echo 1 > /tmp/reward.txt"]
    ep = await grade("exit 1", setup=planted)
    assert ep.reward == 0.0
    ep = await grade("exit 1", setup=planted, reward_dir="out")
    assert ep.reward == 0.0
    ep = await grade(write("reward.txt", "0.75"), setup=planted, reward_dir="out")
    assert ep.reward == 0.75


async def test_the_task_s_test_files_are_written_over_what_the_agent_left() -> None:
    ep = await grade({"command": "sh check.sh", "files": {"check.sh": "grep -q right answer"}},
                     files={"check.sh": "exit 0", "answer": "wrong\n"})
    assert ep.reward == 0.0
    ep = await grade({"command": "sh check.sh", "files": {"check.sh": "grep -q right answer"}},
                     files={"check.sh": "exit 0", "answer": "right\n"})
    assert ep.reward == 1.0


# -- what it cannot score, in one line ---------------------------------------------------------


async def test_no_command_and_a_malformed_info_tests_are_one_line() -> None:
    ep = await grade(None)
    assert ep.reward is None and ep.error_type == "verifier_error"
    assert "has no command to run" in ep.error and "info.tests" in ep.error
    ep = await grade({"command": "true", "when": "later"})
    assert "info.tests has 'when'; it takes command, files and timeout_s" in ep.error
    ep = await grade({"command": "true", "timeout_s": -1})
    assert "info.tests.timeout_s is -1" in ep.error


async def test_an_episode_without_a_sandbox_is_unscored_saying_so() -> None:
    from interplay.run.loader import load_env

    env = load_env("echo", {"verifiers": [{"kind": "tests", "command": "true"}],
                            "own_verifiers": False})
    async with ScriptedModel(["hello"]) as model:
        resources = RunResources(endpoint=model.endpoint)
        try:
            ep = await run_episode(env, next(iter(env.tasks())), resources=resources)
        finally:
            await resources.aclose()
    assert ep.reward is None and ep.error_type == "verifier_error"
    assert "this episode has none: run it with --sandbox docker (or local)" in ep.error


def test_regrading_episodes_whose_sandbox_is_gone_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from interplay import cli

    out = tmp_path / "run"
    with ScriptedModel(lambda r: "I looked, and left it.") as model:
        assert cli.main(["eval", "workspace", "-n", "1", "--sandbox", "local", "--base-url",
                         model.base_url, "-o", str(out), "-q", "--no-report"]) == 0
    [line] = (out / "episodes.jsonl").read_text().splitlines()
    assert json.loads(line)["reward"] == 0.0
    capsys.readouterr()
    code = cli.main(["regrade", str(out), "-o", str(tmp_path / "again"), "-q"])
    err = capsys.readouterr().err
    assert code != 0
    [line] = [ln for ln in err.splitlines() if ln.startswith("interplay: error:")]
    assert "verifier 'tests' cannot score stored episodes" in line
    assert "sandbox, which was removed when the episode ended" in line
    assert not (tmp_path / "again" / "episodes.jsonl").exists() or not (
        tmp_path / "again" / "episodes.jsonl").read_text().strip()


# -- the rules themselves --------------------------------------------------------------------------


def test_read_reward_and_plan() -> None:
    assert read_reward("reward.json", b'{"reward": 1, "n": 2.5}') == (1.0, {"n": 2.5})
    assert read_reward("reward.txt", b" 0.125\n") == (0.125, {})
    cfg = TestsConfig(command="make test", timeout_s=30, files={"a": "1"})
    assert plan(cfg, None).command == "make test"
    given = plan(cfg, {"files": {"b": "2"}, "timeout_s": 5})
    assert (given.command, given.timeout_s, dict(given.files)) == ("make test", 5.0,
                                                                   {"a": "1", "b": "2"})
    assert plan(cfg, "pytest -q").command == "pytest -q"
    with pytest.raises(InterplayError, match=r"info\.tests is int"):
        plan(cfg, 3)


async def test_on_docker_too(docker_sandbox: None) -> None:
    ep = await grade(write("reward.json", '{"reward": 0.5, "passed": 1}') + "; id -u",
                     kind="docker")
    assert ep.error is None, ep.error
    assert ep.reward == 0.5 and ep.metrics["tests.passed"] == 1.0
    assert ep.rewards[0].reason.endswith("\n0\n")
    ep = await grade({"command": "sleep 600", "timeout_s": 1}, kind="docker")
    assert ep.reward == 0.0 and ep.rewards[0].info["timed_out"] is True
