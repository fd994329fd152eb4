"""`interplay eval openenv` on the embedded model (SmolLM2-135M on llama.cpp): the demo
environment served for the run, real completions through the command a user types. Skipped
only when llama_cpp is not installed (.ci/setup installs it).

The tiny model's guesses are not judged (it rarely writes a bare number). What is checked is
that the episode runs to an end of its own whatever it says: every call answered, every reply
either stepped or told why not, the rewards summed, the server gone afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from interplay.run import whole_record
from interplay.testing import needs_local_model, run_interplay

pytestmark = [*needs_local_model]


def test_interplay_eval_openenv_on_the_embedded_model(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    settings = ["env.app=interplay_openenv.demo:app", "env.reask_budget=0", "env.max_steps=2",
                "model.timeout_s=900", "seats.assistant.sampling.max_tokens=16",
                "seats.assistant.sampling.temperature=0"]
    out = run_interplay(
        "eval", "openenv", "-n", "1", "-o", str(out_dir), "-q", "--no-report",
        *[arg for s in settings for arg in ("--set", s)], timeout=3600)
    assert out.returncode == 0, out.stderr
    # A long episode's transcripts are in its side file: read the record whole.
    (episode,) = [whole_record(json.loads(line), out_dir) for line in
                  (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert episode["error"] is None, episode["error"]
    record = episode["results"]["openenv"]
    assert record["ended_by"] in {"done", "no_action", "max_steps"}
    steps = record["steps"]
    calls = episode["traces"][0]["model_calls"]
    # With no re-asks, one call per step: stepped, or refused with the reason.
    assert len(calls) == len(steps) >= 1
    assert all(c["error_type"] is None and c["usage"]["completion_tokens"] > 0 for c in calls)
    assert all((s["action"] is None) == bool(s["refused"]) for s in steps)
    assert record["reward"] == sum(s["reward"] or 0.0 for s in steps)
    assert episode["reward"] == record["reward"]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{record['base_url']}/health", timeout=2)
