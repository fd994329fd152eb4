"""tau2's results file as ``interplay export --format tau2`` writes it: the harness that played
the agent named in its ``agent_info``, every time in it the run's own (each simulation stamped
when its episode ended, the file with its first episode's start), so two exports of one run
are the same bytes."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from tau2_scripts import mock_pair

from interplay.testing import ScriptedModel, run_interplay
from interplay_tau2 import domains

pytestmark = pytest.mark.slow  # each `interplay` process imports tau2 (seconds of CPU)


def test_two_exports_of_a_run_are_the_same_bytes_and_name_the_agent_s_harness(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    with ScriptedModel(mock_pair) as model:
        done = run_interplay("eval", "tau2-mock", "--set",
                             'env.task_ids=["create_task_1", "update_task_1"]',
                             "--base-url", model.base_url, "-o", str(run), "-q", "--no-report")
    assert done.returncode == 0, done.stderr
    files = []
    for name in ("first.json", "second.json"):
        exported = run_interplay("export", str(run), "--format", "tau2",
                                 "-o", str(tmp_path / name))
        assert exported.returncode == 0, exported.stderr
        files.append((tmp_path / name).read_bytes())
    assert files[0] == files[1]

    results = domains.tau2().simulation.Results.model_validate_json(files[0])
    assert results.info.agent_info.implementation == "interplay harness chat"
    records = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    ended = {r["info"]["episode_id"]: r["results"]["tau2"]["end_time"] for r in records}
    assert len(results.simulations) == 2
    for sim in results.simulations:
        assert sim.timestamp == sim.end_time == ended[sim.id]
    first = min(r["started_at"] for r in records)
    assert results.timestamp == datetime.datetime.fromtimestamp(first).isoformat()
    assert results.timestamp <= min(s.start_time for s in results.simulations)


def test_the_agent_s_harness_is_the_one_the_run_gave_its_seat(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with ScriptedModel(mock_pair) as model:
        done = run_interplay("eval", "tau2-mock", "--set", 'env.task_ids=["create_task_1"]',
                             "--set", 'seats.assistant.harness="chat"',
                             "--set", "seats.assistant.harness_config.max_turns=50",
                             "--base-url", model.base_url, "-o", str(run), "-q", "--no-report")
    assert done.returncode == 0, done.stderr
    # An episode record that names another harness (as a seat given codex or Claude Code
    # records it) is what the file says played the agent.
    lines = (run / "episodes.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    for trace in record["traces"]:
        if trace["seat"] == "assistant":
            trace["harness"] = "claude-code"
    (run / "episodes.jsonl").write_text(json.dumps(record) + "\n")
    exported = run_interplay("export", str(run), "--format", "tau2", "-o", str(run / "t.json"))
    assert exported.returncode == 0, exported.stderr
    info = json.loads((run / "t.json").read_text())["info"]
    assert info["agent_info"]["implementation"] == "interplay harness claude-code"
