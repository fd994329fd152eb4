"""Both seats of a Kuhn poker match in Claude Code: the real CLI on the scripted model, each
seat's own session resumed hand after hand, refereed and paid out by the host as any seats
are."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from interplay.testing import ScriptedModel, run_interplay
from interplay_kuhn_poker import strategies
from interplay_kuhn_poker.scripted import handler, playing

pytestmark = pytest.mark.slow


def test_a_match_between_two_claude_code_seats(tmp_path: Path) -> None:
    if (shutil.which("claude", path=str(Path(sys.executable).parent))
            or shutil.which("claude")) is None:
        pytest.skip("the Claude Code CLI is not installed (bash .ci/setup --test installs it)")
    players = {"player0": playing(strategies.nash(), seed=1),
               "player1": playing(strategies.always_bet)}
    out_dir = tmp_path / "run"
    with ScriptedModel(handler(players)) as model:
        out = run_interplay("eval", "kuhn-poker", "-n", "1", "--base-url", model.base_url,
                            "-o", str(out_dir), "--no-report", "--set", "env.hands=3",
                            "--set", 'seats.player0.harness="claude-code"',
                            "--set", 'seats.player1.harness="claude-code"', timeout=600)
    assert out.returncode == 0, out.stderr
    episode = json.loads((out_dir / "episodes.jsonl").read_text())
    assert episode["error"] is None
    payoffs = episode["results"]["payoffs"]
    assert sum(payoffs.values()) == 0 and set(payoffs) == {"player0", "player1"}
    for trace in episode["traces"]:
        assert (trace["harness"], trace["stop_condition"]) == ("claude-code", "match_over")
        info = trace["info"]["claude_code"]
        # One session per seat, resumed for every later decision.
        commands = [s["command"] for s in info["segments"]]
        assert commands[0] == "launch" and set(commands[1:]) <= {"resume"}
        assert len(commands) >= 2
        decisions = [m for m in trace["messages"] if m["role"] == "user"]
        assert len(decisions) == len(commands)
