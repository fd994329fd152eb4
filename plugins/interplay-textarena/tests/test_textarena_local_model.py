"""`interplay eval textarena` on the embedded model (SmolLM2-135M on llama.cpp): real
completions for both seats of TicTacToe through the command a user types. Skipped only when
llama_cpp is not installed (.ci/setup installs it).

The tiny model's play is not judged (it mostly repeats the board back, which the game rules
invalid). What is checked is that the game referees to the end whatever it says: every call
answered, the game over by its own rules, its rewards zero-sum on each seat's trace.
"""

from __future__ import annotations

import json
from pathlib import Path

from interplay.run import whole_record
from interplay.testing import needs_local_model, run_interplay

pytestmark = [*needs_local_model]


def test_interplay_eval_textarena_on_the_embedded_model(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    settings = ["env.game=TicTacToe-v0", "model.timeout_s=900"]
    for seat in ("player0", "player1"):
        settings += [f"seats.{seat}.sampling.max_tokens=24", f"seats.{seat}.sampling.temperature=0"]
    out = run_interplay(
        "eval", "textarena", "-n", "1", "-o", str(out_dir), "-q", "--no-report",
        *[arg for s in settings for arg in ("--set", s)], timeout=3600)
    assert out.returncode == 0, out.stderr
    # A long episode's transcripts are in its side file: read the record whole.
    (episode,) = [whole_record(json.loads(line), out_dir) for line in
                  (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert episode["error"] is None, episode["error"]
    record = episode["results"]["textarena"]
    assert record["ended_by"] in {"game_over", "forfeit"}
    rewards = record["rewards"]
    assert sorted(rewards) == ["player0", "player1"]
    assert rewards["player0"] == -rewards["player1"]
    calls = [c for t in episode["traces"] for c in t["model_calls"]]
    assert len(calls) == sum(m["asks"] for m in record["moves"]) >= 1
    assert all(c["error_type"] is None and c["usage"]["completion_tokens"] > 0 for c in calls)
    for trace in episode["traces"]:
        assert [r["value"] for r in trace["rewards"]] == [rewards[trace["seat"]]]
    assert "textarena" in out.stdout
