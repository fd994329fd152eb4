"""Harbor trials in real containers: the ten example tasks scored 1 by the oracle and 0 by nop
(each one's reward dict as its tests wrote it), a trial's record (timings as Harbor splits
them, the test output, the workspace's changes), the task's limits (its agent timeout stops
the agent and the tests still score; its verifier timeout leaves it unscored), a Dockerfile
that does not build, and reward files Harbor would not read; then the run exported as a
Harbor job folder."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interplay import Episode, load_env
from interplay.testing import run_scripted
from interplay_harbor.env import examples

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("docker_sandbox")]

#: What each example's tests write for the oracle's solution and for nothing done.
ORACLE = {name: {"reward": 1.0} for name in (
    "count-errors", "csv-total", "fix-add", "git-commit", "hello-file", "rename-photos",
    "service-port", "word-count-cli")}
ORACLE["json-config"] = {"reward": 1.0, "port": 1, "debug": 1, "kept": 1}
ORACLE["slugify"] = {"hello": 1, "spaces": 1, "digits": 1, "edges": 1, "reward": 1.0}
NOP = {name: {"reward": 0.0} for name in ORACLE}
NOP["json-config"] = {"reward": 0.0, "port": 0, "debug": 0, "kept": 1}
NOP["slugify"] = {"hello": 0, "spaces": 0, "digits": 0, "edges": 0, "reward": 0.0}


def no_model(request: Any) -> Any:
    raise AssertionError("oracle and nop never call a model")


async def trial(path: Path, harness: str = "oracle", **env: Any) -> Episode:
    harbor = load_env("harbor", {"path": str(path), **env})
    harbor.check()
    [task] = list(harbor.tasks())
    run = await run_scripted(harbor, task, no_model,
                             seats={"assistant": {"harness": harness}})
    return run.episode


def episodes(folder: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
    return {r["results"]["harbor"]["task_name"]: r for r in rows}


def interplay(*args: str) -> int:
    """The exit code of the ``interplay`` command, run as a user runs it."""
    return subprocess.run([sys.executable, "-m", "interplay.cli", *args], timeout=600).returncode


@pytest.mark.parametrize(("harness", "wanted"), [("oracle", ORACLE), ("nop", NOP)])
def test_oracle_solves_every_example_and_nop_none(tmp_path: Path, harness: str,
                                                  wanted: dict[str, Any]) -> None:
    out = tmp_path / harness
    assert interplay("eval", "harbor", "-c", "4", "-o", str(out), "--quiet", "--no-report",
                     "--set", f"seats.assistant.harness={harness}") in (0, 1)
    found = episodes(out)
    assert {name: e["results"]["harbor"]["verifier"]["rewards"]
            for name, e in found.items()} == wanted
    assert {e["reward"] for e in found.values()} == {1.0 if harness == "oracle" else 0.0}
    assert all(e["error"] is None for e in found.values())
    assert all(not e["traces"][0]["model_calls"] for e in found.values())
    # A job folder Harbor's tools read: the job's stats and one folder per trial.
    assert interplay("export", str(out), "--format", "harbor") == 0
    job = out / "harbor-job"
    result = json.loads((job / "result.json").read_text())
    stats = result["stats"]
    assert (result["n_total_trials"], stats["n_completed_trials"], stats["n_errored_trials"]) \
        == (10, 10, 0)
    [(key, evals)] = stats["evals"].items()
    assert key == f"{harness}__examples" and evals["n_trials"] == 10
    [metrics] = evals["metrics"]
    assert metrics["reward"] == (1.0 if harness == "oracle" else 0.0)
    assert metrics["kept"] == 0.1  # json-config's key, counted 0 in the nine trials without it
    trials = sorted(p for p in job.iterdir() if p.is_dir())
    assert [p.name.split("__")[0] for p in trials] == sorted(wanted)
    for folder in trials:
        trial_result = json.loads((folder / "result.json").read_text())
        assert trial_result["verifier_result"]["rewards"] == wanted[trial_result["task_name"]]
        assert trial_result["agent_info"]["name"] == harness
        assert {"environment_setup", "agent_execution", "verifier"} <= set(trial_result)
        assert (folder / "verifier" / "test-stdout.txt").is_file()
        assert (folder / "agent" / "oracle.txt").is_file() == (harness == "oracle")


async def test_a_trial_records_its_phases_its_tests_and_what_changed() -> None:
    ep = await trial(examples() / "fix-add")
    assert ep.error is None and ep.reward == 1.0
    harbor = ep.results["harbor"]
    assert list(harbor["timing"]) == ["environment_setup", "agent_execution", "verifier"]
    for timing in harbor["timing"].values():
        assert timing["started_at"] < timing["finished_at"] and timing["seconds"] > 0
    verifier = harbor["verifier"]
    assert verifier["rewards"] == {"reward": 1.0}
    assert "ok" in verifier["test_output"] and verifier["files"]["reward.txt"] == "1\n"
    [reward, *_] = ep.rewards
    assert reward.name == "harbor" and reward.reason == "ok"
    assert {c.path: c.status for c in ep.sandbox.changes.files} == {"calc.py": "modified"}
    assert "+    return a + b" in ep.sandbox.changes.diff
    oracle = ep.trace("assistant").info["oracle"]
    assert oracle["exit_code"] == 0 and "/solution/solve.sh" in oracle["command"]


async def test_the_agent_timeout_stops_the_agent_and_the_tests_still_score(
        task_copy: Callable[[str], Path]) -> None:
    task = task_copy("hello-file")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\ntimeout_sec = 120.0",
                                             "[agent]\ntimeout_sec = 3.0"))
    (task / "solution" / "solve.sh").write_text(
        "#!/bin/bash\necho 'Hello, world!' > /app/hello.txt\nsleep 60\n")
    ep = await trial(task)
    assert ep.error is None and ep.reward == 1.0
    harbor = ep.results["harbor"]
    assert harbor["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert harbor["timing"]["agent_execution"]["seconds"] < 20
    assert ep.trace("assistant").stop_condition == "agent_timeout"


async def test_tests_past_the_verifier_timeout_leave_it_unscored(
        task_copy: Callable[[str], Path]) -> None:
    task = task_copy("hello-file")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\ntimeout_sec = 60.0",
                                             "[verifier]\ntimeout_sec = 2.0"))
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
                                            "sleep 60\n")
    ep = await trial(task)
    assert ep.reward is None and ep.error_type == "verifier_error"
    assert "past the task's [verifier] timeout_sec of 2 s" in ep.error


@pytest.mark.parametrize(("test_sh", "said"), [
    ("echo nothing", "the tests wrote no reward: neither /logs/verifier/reward.json nor"),
    ("echo nan > /logs/verifier/reward.txt", "reward.txt holds nan, not finite"),
    ("echo > /logs/verifier/reward.txt; truncate -s0 /logs/verifier/reward.txt",
     "reward.txt is empty"),
    ("echo passed > /logs/verifier/reward.txt", "reward.txt holds 'passed', not a number"),
    ("echo '{\"reward\": \"1\"}' > /logs/verifier/reward.json", "reward is '1', not a number"),
    ("echo '{\"reward\": Infinity}' > /logs/verifier/reward.json", "not finite"),
])
async def test_a_reward_harbor_would_not_read_leaves_the_trial_unscored(
        task_copy: Callable[[str], Path], test_sh: str, said: str) -> None:
    task = task_copy("hello-file")
    (task / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test_sh}\n")
    ep = await trial(task, "nop")
    assert ep.reward is None and ep.error_type == "verifier_error", ep.error
    assert said in ep.error and "\n" not in ep.error


async def test_reward_json_wins_over_reward_txt_and_test_exit_codes_do_not_count(
        task_copy: Callable[[str], Path]) -> None:
    task = task_copy("hello-file")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
        "echo '{\"reward\": 0.25, \"style\": 1}' > /logs/verifier/reward.json\nexit 3\n")
    ep = await trial(task, "nop")
    assert ep.error is None and ep.reward == 0.25
    assert ep.metrics["harbor/style"] == 1.0
    assert ep.results["harbor"]["verifier"]["exit_code"] == 3


async def test_a_dockerfile_that_does_not_build_says_so_with_its_last_lines(
        task_copy: Callable[[str], Path]) -> None:
    task = task_copy("hello-file")
    (task / "environment" / "Dockerfile").write_text(
        "FROM interplay-base:bookworm\nRUN echo building && echo 'no such tool' >&2 && false\n")
    ep = await trial(task)
    assert ep.error_type == "sandbox_error" and ep.reward is None
    assert "no such tool" in ep.error, ep.error
    assert "\n" not in ep.error


async def test_a_build_past_the_tasks_build_timeout_ends_naming_it(
        task_copy: Callable[[str], Path]) -> None:
    task = task_copy("hello-file")
    toml = (task / "task.toml").read_text().replace("build_timeout_sec = 600.0",
                                                    "build_timeout_sec = 1.0")
    (task / "task.toml").write_text(toml)
    # Longer than the task allows (a build past its limit is cancelled: nothing is cached).
    (task / "environment" / "Dockerfile").write_text(
        "FROM interplay-base:bookworm\nRUN echo building && sleep 30\n")
    ep = await trial(task)
    assert ep.error_type == "sandbox_error" and ep.reward is None
    assert "did not build within 1 s (the task's workspace build_timeout_s)" in ep.error, \
        ep.error
