"""codex on the embedded model (SmolLM2-135M on llama.cpp), as the README says: its own prompt
and tools outgrow the model's 8,192-token window, so the first request is refused and the
error says what to change. Skipped only when llama_cpp is not installed (.ci/setup installs
it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from interplay.testing import needs_local_model, run_interplay

pytestmark = [*needs_local_model, pytest.mark.slow]


def test_codex_on_the_embedded_model_says_its_window_is_too_small(codex_bin: str,
                                                                   tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    out = run_interplay("eval", "echo", "-n", "1", "-o", str(out_dir), "--no-report",
                        "--set", 'seats.assistant.harness="codex"',
                        "--set", "seats.assistant.harness_config.state_dir="
                                 f"{json.dumps(str(tmp_path))}", timeout=600)
    assert out.returncode == 1, out.stderr
    (line,) = (out_dir / "episodes.jsonl").read_text().splitlines()
    episode = json.loads(line)
    assert episode["error_type"] == "bad_request"
    found = re.search(r"Requested tokens \((\d+)\) exceed context window of 8192",
                      episode["error"])
    assert found is not None, episode["error"]
    # The README's figure: codex 0.169.0's first request, before the task says a word.
    assert 10_000 < int(found[1]) < 10_700
    assert "give the seat a model with a larger one" in episode["error"]
    assert "give the seat a model with a larger one" in out.stderr
    assert list(tmp_path.iterdir()) == [out_dir]  # codex's per-trace dirs are gone
