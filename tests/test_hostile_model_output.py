"""What a model endpoint may send that the run must survive: a reply with a lone UTF-16
surrogate (valid JSON, ``"\\ud800"``, but no UTF-8) is recorded as sent, written to
episodes.jsonl, read back, and shown in the report, never a traceback that ends the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

pytestmark = pytest.mark.slow  # real evals in subprocesses

ScriptedFactory = Callable[..., ScriptedModel]


def lone_surrogate(request: ScriptedRequest) -> ScriptedReply:
    word = request.last_user_text().rsplit(" ", 1)[-1]
    return ScriptedReply.text(f"{word} \ud800 and \udfff")


def test_a_reply_with_a_lone_surrogate_is_kept_and_the_run_goes_on(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(lone_surrogate)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "interplay.cli", "eval", "echo", "-n", "3", "--base-url",
         model.base_url, "-o", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = (out / "episodes.jsonl").read_bytes().splitlines()
    assert len(lines) == 3
    records = [json.loads(line) for line in lines]  # valid UTF-8 JSON lines
    texts = [r["traces"][0]["messages"][-1]["content"] for r in records]
    assert all(t.endswith(" \ud800 and \udfff") for t in texts)  # as the model sent it
    assert all(r["reward"] == 1.0 for r in records)
    assert (out / "report.html").read_text(encoding="utf-8").count(" ? and ?") == 3

    again = subprocess.run(
        [sys.executable, "-m", "interplay.cli", "eval", "--resume", str(out), "--quiet",
         "--no-report"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})
    assert again.returncode == 0, again.stderr
