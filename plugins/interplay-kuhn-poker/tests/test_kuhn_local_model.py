"""`interplay eval kuhn-poker` on the embedded model (SmolLM2-135M on llama.cpp): both seats
real completions through the command a user types. Skipped only when llama_cpp is not
installed (.ci/setup installs it).

The tiny model's play is not judged; it mostly answers without one clean bracketed action. What
is checked is that the match is refereed to the end whatever it says: every call answered, the
hand settled (played out or forfeited), payoffs zero-sum and on each seat's trace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interplay.run import whole_record
from interplay.testing import needs_local_model, run_interplay

pytestmark = [*needs_local_model, pytest.mark.slow]


def test_interplay_eval_on_the_embedded_model(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    settings = ["env.invalid_retries=0", "model.timeout_s=900"]
    for seat in ("player0", "player1"):
        settings += [f"seats.{seat}.sampling.max_tokens=24", f"seats.{seat}.sampling.temperature=0"]
    out = run_interplay(
        "eval", "kuhn-poker", "-n", "1", "-o", str(out_dir), "-q", "--no-report",
        *[arg for s in settings for arg in ("--set", s)], timeout=3600)
    assert out.returncode == 0, out.stderr
    # A long episode's transcripts are in its side file: read the record whole.
    (episode,) = [whole_record(json.loads(line), out_dir) for line in
                  (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert episode["error"] is None, episode["error"]
    metrics, results = episode["metrics"], episode["results"]
    assert metrics["hands"] == 1.0 and metrics["hands/aborted"] == 0.0
    assert results["payoffs"]["player0"] == -results["payoffs"]["player1"] != 0
    (hand,) = results["kuhn_poker"]["hands"]
    assert hand["outcome"] in {"showdown", "fold", "forfeit"}
    # With no retries every decision is one call; a forfeit ends the hand at the first
    # invalid reply.
    calls = [c for t in episode["traces"] for c in t["model_calls"]]
    assert len(calls) == len(hand["actions"]) >= 1
    assert all(c["error_type"] is None and c["usage"]["completion_tokens"] > 0 for c in calls)
    assert metrics["forfeits"] == float(hand["outcome"] == "forfeit")
    for trace in episode["traces"]:
        assert [r["value"] for r in trace["rewards"]] == [results["payoffs"][trace["seat"]]]
    assert "kuhn-poker" in out.stdout
