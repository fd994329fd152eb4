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
from textarena_players import first_free_cell

from interplay.testing import ScriptedModel, run_interplay

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run() -> Run:
    return run_interplay


def test_it_registers_only_through_its_own_entry_point() -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="interplay")
           if ep.value.startswith("interplay_textarena")]
    assert [(ep.name, ep.value, ep.dist.name if ep.dist else None) for ep in eps] == [
        ("textarena", "interplay_textarena.plugin", "interplay-textarena")]
    kernel = importlib.metadata.distribution("interplay")
    assert not [r for r in kernel.requires or () if "textarena" in r]


def test_neither_the_kernel_nor_registering_imports_textarena() -> None:
    code = ("import sys; from interplay.plugins import host as plugins; "
            "plugins.reset(); plugins.registry(); "
            "assert plugins.get('envs', 'textarena'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textarena'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_interplay_plugins_and_list_show_it(run: Run) -> None:
    out = run("plugins", "--json")
    assert out.returncode == 0, out.stderr
    (info,) = [i for i in json.loads(out.stdout) if i["name"] == "textarena"]
    assert info["package"] == "interplay-textarena" and not info["builtin"]
    assert info["error"] is None
    assert info["registered"] == {"envs": ["textarena"], "steps": ["textarena"],
                                  "verifiers": ["textarena"]}
    envs = run("list", "envs")
    line = next(x for x in envs.stdout.splitlines() if x.startswith("textarena "))
    assert "[interplay-textarena]" in line and "TextArena games (set env.game)" in line


def test_interplay_eval_plays_tictactoe_on_the_scripted_model(run: Run, tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    with ScriptedModel(first_free_cell) as model:
        out = run("eval", "textarena", "--set", "env.game=TicTacToe-v0", "-n", "2", "-r", "2",
                  "--base-url", model.base_url, "-o", str(out_dir), "-q")
    assert out.returncode == 0, out.stderr
    episodes = [json.loads(line) for line in
                (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 4
    for e in episodes:
        assert e["error"] is None
        record = e["results"]["textarena"]
        assert record["ended_by"] == "game_over"
        first = "player0" if e["info"]["task_idx"] == 0 else "player1"
        assert record["rewards"] == {first: 1.0, ("player1" if first == "player0"
                                                  else "player0"): -1.0}
        assert {t["seat"]: [r["value"] for r in t["rewards"]] for t in e["traces"]} == {
            seat: [value] for seat, value in record["rewards"].items()}
    assert json.loads((out_dir / "summary.json").read_text())["complete"]
    assert (out_dir / "report.html").is_file()


def test_the_same_seed_replays_a_run(run: Run, tmp_path: Path) -> None:
    def guesses(out_dir: Path) -> list[list[str]]:
        lines = (out_dir / "episodes.jsonl").read_text().splitlines()
        episodes = sorted((json.loads(line) for line in lines),
                          key=lambda e: (e["info"]["task_idx"], e["info"]["rollout"]))
        return [[m["action"] for m in e["results"]["textarena"]["moves"]] for e in episodes]

    outs = []
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        with ScriptedModel() as model:  # echo: plays the first bracketed number it was told
            out = run("eval", "textarena", "--set", "env.game=Mastermind-v0", "-n", "3",
                      "--seed", seed, "--base-url", model.base_url, "-o",
                      str(tmp_path / name), "-q", "--no-report")
        assert out.returncode in (0, 1), out.stderr
        outs.append(guesses(tmp_path / name))
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]


def _nltk_has_words() -> bool:
    try:
        import nltk

        nltk.data.find("corpora/words")
    except LookupError:
        return False
    return True


@pytest.mark.skipif(_nltk_has_words(), reason="nltk's words corpus is installed here")
def test_a_game_missing_its_data_is_refused_before_the_run(run: Run, tmp_path: Path) -> None:
    out = run("eval", "textarena", "--set", "env.game=Wordle-v0", "-n", "1",
              "--base-url", "http://127.0.0.1:9/v1", "-o", str(tmp_path / "run"), "-q")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("interplay: error: env.game: textarena game 'Wordle-v0' needs "
                           "nltk's 'words' data")
    assert not (tmp_path / "run" / "episodes.jsonl").exists()
