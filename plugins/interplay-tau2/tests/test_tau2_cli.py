"""The plugin as a user meets it: installed from its folder, found through its entry point by
the `interplay` command, run by `interplay eval` against the scripted model (real
subprocesses, real HTTP), and exported as tau2's results file that tau2 loads and scores again
to the same rewards."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tau2_scripts import mock_pair

from interplay.testing import ScriptedModel, run_interplay
from interplay_tau2 import domains

pytestmark = pytest.mark.slow  # each `interplay` process imports tau2 (seconds of CPU)


def test_it_registers_only_through_its_own_entry_point() -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="interplay")
           if ep.value.startswith("interplay_tau2")]
    assert [(ep.name, ep.value, ep.dist.name if ep.dist else None) for ep in eps] == [
        ("tau2", "interplay_tau2.plugin", "interplay-tau2")]
    kernel = importlib.metadata.distribution("interplay")
    assert not [r for r in kernel.requires or () if "tau2" in r]


def test_registering_and_listing_never_import_tau2() -> None:
    code = ("import sys; from interplay.plugins import host as plugins; "
            "plugins.reset(); plugins.registry(); "
            "assert plugins.get('envs', 'tau2-retail'); "
            "assert plugins.get('export-formats', 'tau2'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tau2', 'litellm')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_interplay_plugins_and_list_show_it() -> None:
    out = run_interplay("plugins", "--json")
    assert out.returncode == 0, out.stderr
    (info,) = [i for i in json.loads(out.stdout) if i["name"] == "tau2"]
    assert info["package"] == "interplay-tau2" and info["error"] is None
    assert info["registered"] == {
        "envs": ["tau2-mock", "tau2-airline", "tau2-retail", "tau2-telecom"],
        "user-sims": ["tau2"], "steps": ["tau2"], "verifiers": ["tau2"],
        "export-formats": ["tau2"]}
    formats = run_interplay("list", "export-formats")
    assert re.search(r"^tau2 +tau2-bench's results file", formats.stdout, re.M)


def test_a_missing_tau2_is_one_line_saying_how_to_install_it(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['tau2'] = None; from interplay import cli; "
            "sys.exit(cli.main(['eval', 'tau2-mock', '-n', '1', '--base-url', "
            "'http://127.0.0.1:9/v1', '-o', sys.argv[1], '-q']))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert "tau2-bench is not installed: pip install interplay-tau2" in line


def test_describe_shows_the_domain_each_env_fixes_and_its_seats() -> None:
    out = run_interplay("describe", "envs", "tau2-retail", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    settings = {s["name"]: s for s in info["settings"]}
    assert settings["domain"]["default"] == "retail"
    # The chat harness's cap on one reply is the conversation's own limit.
    assert info["seats"]["assistant"]["harness_config"] == {"max_turns": 100}
    assert {s["name"] for s in info["options"]} == {"user_sim", "user_sim_settings",
                                                     "verifiers", "own_verifiers"}


def test_a_bad_input_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    out = run_interplay("eval", "tau2-airline", "--set", "env.split=dev", "-o",
                        str(tmp_path / "run"), "-q")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert "env.split='dev' is not a split of airline; choose one of train, test, base" in line


def test_eval_then_export_gives_tau2_a_results_file_it_scores_to_the_same_rewards(
        tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    with ScriptedModel(mock_pair) as model:
        out = run_interplay(
            "eval", "tau2-mock", "--set",
            'env.task_ids=["create_task_1", "update_task_1", "impossible_task_1"]',
            "-r", "2", "--base-url", model.base_url, "-o", str(out_dir), "-q",
            "--set", "model.api_key_var=SECRET_KEY_VAR",
            env={"SECRET_KEY_VAR": "sk-not-to-be-written"})
    assert out.returncode == 0, out.stderr
    episodes = [json.loads(line) for line in
                (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 6 and all(e["error"] is None for e in episodes)
    rewards = {(e["results"]["tau2"]["task_id"], e["info"]["rollout"]): e["reward"]
               for e in episodes}
    # The scripted agent makes the expected call on two tasks; on the impossible one it
    # never transfers, so tau2's action check fails it.
    assert rewards == {("create_task_1", 0): 1.0, ("create_task_1", 1): 1.0,
                       ("update_task_1", 0): 1.0, ("update_task_1", 1): 1.0,
                       ("impossible_task_1", 0): 0.0, ("impossible_task_1", 1): 0.0}
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["complete"]

    exported = run_interplay("export", str(out_dir), "--format", "tau2",
                             env={"SECRET_KEY_VAR": "sk-not-to-be-written"})
    assert exported.returncode == 0, exported.stderr
    assert "exported 6 episodes" in exported.stdout
    text = (out_dir / "tau2-results.json").read_text()
    assert "api_key" not in text and "SECRET_KEY_VAR" not in text
    assert "sk-not-to-be-written" not in text
    tau = domains.tau2()
    results = tau.simulation.Results.model_validate_json(text)
    assert sorted(t.id for t in results.tasks) == sorted(
        ["create_task_1", "update_task_1", "impossible_task_1"])
    assert results.info.max_steps == 100 and results.info.num_trials == 2
    # The sampling each side's requests carried (the envs' reply caps), who played the user,
    # and a cost tau2's tools add up (0: interplay knows no price), never null.
    assert results.info.agent_info.llm_args["max_tokens"] == 512
    assert results.info.user_info.llm_args["max_tokens"] == 256
    assert results.info.user_info.implementation == "interplay user sim tau2"
    assert results.info.user_info.global_simulation_guidelines.startswith(
        "# User Simulation Guidelines")
    assert {(s.agent_cost, s.user_cost) for s in results.simulations} == {(0.0, 0.0)}
    # Written with the mode of every other export.
    assert (out_dir / "tau2-results.json").stat().st_mode & 0o777 == \
        (out_dir / "summary.json").stat().st_mode & 0o777
    tasks = {t.id: t for t in results.tasks}
    for sim in results.simulations:
        again = tau.evaluator.evaluate_simulation(
            simulation=sim, task=tasks[sim.task_id], solo_mode=False, domain="mock",
            evaluation_type=tau.evaluator.EvaluationType.ALL)
        assert again.reward == sim.reward_info.reward == rewards[(sim.task_id, sim.trial)]
    # tau2's own command line reads and scores it too.
    scored = subprocess.run([str(Path(sys.executable).parent / "tau2"), "evaluate-trajs",
                             str(out_dir / "tau2-results.json"), "-o", str(tmp_path / "re")],
                            capture_output=True, text=True, timeout=300,
                            env={**__import__("os").environ, **domains.OFFLINE})
    assert scored.returncode == 0, scored.stderr[-2000:]


def test_a_tau2_env_runs_end_to_end_on_the_scripted_book_served_from_the_command_line(
        tmp_path: Path) -> None:
    """The README's no-GPU run: `python -m interplay_tau2.scripted` serves the expected-actions
    book, and `interplay eval` runs retail task 2 (11 tool calls in one reply) against it with
    the env's defaults."""
    server = subprocess.Popen([sys.executable, "-m", "interplay_tau2.scripted", "--domain",
                               "retail", "--task-ids", "2"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1"), (
            base_url, server.stderr.read() if server.poll() is not None else "")
        out = run_interplay("eval", "tau2-retail", "--set", 'env.task_ids=["2"]',
                            "--base-url", base_url, "-o", str(tmp_path / "run"), "-q")
        assert out.returncode == 0, out.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert server.returncode == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["completed"], summary["reward_mean"]) == (1, 1.0)
