"""The plugin as a user meets it: installed from its folder, found through its entry point by
the `interplay` command, and run by `interplay eval` against the scripted model (real
subprocesses, real HTTP)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from interplay.testing import ScriptedModel, run_interplay
from interplay_kuhn_poker import strategies
from interplay_kuhn_poker.scripted import Situation, handler, playing

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run() -> Run:
    return run_interplay


def test_it_registers_only_through_its_own_entry_point() -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="interplay")
           if ep.value.startswith("interplay_kuhn_poker")]
    assert [(ep.name, ep.value, ep.dist.name if ep.dist else None) for ep in eps] == [
        ("kuhn_poker", "interplay_kuhn_poker.plugin", "interplay-kuhn-poker")]
    # The kernel's own distribution neither ships nor names it.
    kernel = importlib.metadata.distribution("interplay")
    assert not [ep for ep in kernel.entry_points if "kuhn" in ep.value]
    assert not [f for f in kernel.files or () if "kuhn" in str(f)]


def test_the_kernel_never_imports_it() -> None:
    code = ("import sys; from interplay.plugins import host as plugins; "
            "plugins.reset(load_entry_points=False); plugins.registry(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'interplay_kuhn_poker'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_interplay_plugins_and_list_show_it(run: Run) -> None:
    out = run("plugins", "--json")
    assert out.returncode == 0, out.stderr
    (info,) = [i for i in json.loads(out.stdout) if i["name"] == "kuhn_poker"]
    assert info["package"] == "interplay-kuhn-poker" and not info["builtin"]
    assert info["error"] is None
    assert info["registered"] == {"envs": ["kuhn-poker"], "steps": ["kuhn_poker"]}
    assert sorted(info["hooks"]) == ["register_envs", "register_steps"]

    envs = run("list", "envs")
    assert envs.returncode == 0, envs.stderr
    line = next(x for x in envs.stdout.splitlines() if x.startswith("kuhn-poker "))
    assert "[interplay-kuhn-poker]" in line and "Kuhn poker self-play" in line

    blocked = run("list", "envs", env={"INTERPLAY_BLOCK_PLUGINS": "interplay-kuhn-poker"})
    assert blocked.returncode == 0, blocked.stderr
    assert "kuhn-poker" not in blocked.stdout


@pytest.mark.slow
def test_interplay_eval_runs_matches_on_the_scripted_model(run: Run, tmp_path: Path) -> None:
    nash = playing(strategies.nash(), seed=1)
    aggressive = playing(strategies.always_bet)
    out_dir = tmp_path / "run"
    with ScriptedModel(handler({"player0": nash, "player1": aggressive})) as m:
        out = run("eval", "kuhn-poker", "-n", "2", "--base-url", m.base_url, "-o", str(out_dir),
                  "--set", "env.hands=3", "-s", "4", "-q")
        requests = list(m.requests)
    assert out.returncode == 0, out.stderr
    assert "kuhn-poker" in out.stdout  # the summary table
    episodes = [json.loads(line) for line in
                (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["info"]["task_idx"] for e in episodes) == [0, 1]
    for e in episodes:
        assert e["error"] is None
        payoffs = e["results"]["payoffs"]
        assert set(payoffs) == {"player0", "player1"}
        assert payoffs["player0"] == -payoffs["player1"]
        hands = e["results"]["kuhn_poker"]["hands"]
        assert len(hands) == 3
        assert all(sum(h["payoffs"].values()) == 0 for h in hands)
        assert {t["seat"]: [r["value"] for r in t["rewards"]] for t in e["traces"]} == {
            seat: [value] for seat, value in payoffs.items()}
        assert e["metrics"]["hands"] == 3.0
    # Task 0 starts with player0 first, task 1 with player1 first.
    firsts = {e["info"]["task_idx"]: e["results"]["kuhn_poker"]["hands"][0]["first"]
              for e in episodes}
    assert firsts == {0: "player0", 1: "player1"}
    assert {Situation(r).seat for r in requests} == {"player0", "player1"}
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["complete"]
    assert (out_dir / "report.html").is_file()


@pytest.mark.slow
def test_a_negative_invalid_retries_is_refused_by_the_command(run: Run, tmp_path: Path) -> None:
    out = run("eval", "kuhn-poker", "-n", "1", "--base-url", "http://127.0.0.1:9/v1",
              "-o", str(tmp_path / "run"), "--set", "env.invalid_retries=-1", "-q")
    assert out.returncode == 2
    assert "invalid_retries must be 0 or more, got -1" in out.stderr
    assert "Traceback" not in out.stderr
