"""An always_on week graded by the judge, then regraded from its stored chat and timeline with
the same judge (`interplay regrade`, a real subprocess against the scripted model): the judge
is sent the very prompt it was sent at run time, and the score is the same."""

from __future__ import annotations

import json
from pathlib import Path

from aov_week import CRITERIA, SENTINEL, Week

from interplay.run import whole_record
from interplay.testing import ScriptedModel, run_interplay

CHOSEN = ('env.verifiers=[{kind = "always_on_agent_verifier", latency = {}, '
          'silence = {weight = 0.5}}]')


def test_a_week_regraded_by_the_same_judge_scores_as_at_run_time(tmp_path: Path) -> None:
    run, again = tmp_path / "run", tmp_path / "again"
    handler = Week()
    with ScriptedModel(handler) as model:
        out = run_interplay("eval", "always-on-week", "--set", CHOSEN, "--set",
                            "env.own_verifiers=false", "-n", "1",
                            "--base-url", model.base_url, "-o", str(run))
        assert out.returncode == 0, out.stderr
        asked = len(model.requests)
        # The judge is the run's endpoint, as at run time; the agent is not called again.
        regraded = run_interplay("regrade", str(run), "-o", str(again))
        assert regraded.returncode == 0, regraded.stderr
        assert len(model.requests) == asked + 1
    # A week's line keeps its transcripts, judge calls and timeline in a side file.
    (episode,) = [whole_record(json.loads(x), run)
                  for x in (run / "episodes.jsonl").read_text().splitlines()]
    (redone,) = [whole_record(json.loads(x), again)
                 for x in (again / "episodes.jsonl").read_text().splitlines()]
    first, second = handler.judge
    assert second.messages == first.messages
    assert SENTINEL not in json.dumps(second.messages)
    (reward,) = redone["rewards"]
    assert reward == episode["rewards"][0]
    assert list(reward["info"]["criteria"]) == [*CRITERIA, "reply_latency", "silence"]
    assert redone["reward"] == episode["reward"] is not None
    assert len(redone["judge_calls"]) == 1
    summary = json.loads((again / "summary.json").read_text())
    assert summary["criteria"] == json.loads((run / "summary.json").read_text())["criteria"]
    assert json.loads((again / "config.json").read_text())["regrade"]["from"] == \
        str(run.resolve())
