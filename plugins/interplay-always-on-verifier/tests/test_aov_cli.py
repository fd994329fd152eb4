"""The plugin as a user meets it: installed from its folder, found through its entry point by
the `interplay` command, and choosing the verifier of an `always-on-week` run with `--set`
(a real `interplay eval` subprocess against the scripted model over real HTTP); then the
results folder's summary and report, also read where the plugin is not loaded."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

from aov_week import CRITERIA, SENTINEL, Week

from interplay.run import whole_record
from interplay.testing import ScriptedModel, run_interplay

CHOSEN = ('env.verifiers=[{kind = "always_on_agent_verifier", latency = {}, '
          'silence = {weight = 0.5}}]')


def test_it_registers_only_through_its_own_entry_point() -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="interplay")
           if ep.value.startswith("interplay_always_on_verifier")]
    assert [(ep.name, ep.value, ep.dist.name if ep.dist else None) for ep in eps] == [
        ("always_on_verifier", "interplay_always_on_verifier.plugin",
         "interplay-always-on-verifier")]
    kernel = importlib.metadata.distribution("interplay")
    assert not [r for r in kernel.requires or () if "always-on-verifier" in r]


def test_interplay_plugins_and_list_show_it() -> None:
    out = run_interplay("plugins", "--json")
    assert out.returncode == 0, out.stderr
    (info,) = [i for i in json.loads(out.stdout) if i["name"] == "always_on_verifier"]
    assert info["package"] == "interplay-always-on-verifier" and info["error"] is None
    assert info["registered"] == {"verifiers": ["always_on_agent_verifier"]}
    listed = run_interplay("list", "verifiers").stdout.splitlines()
    line = next(x for x in listed if x.startswith("always_on_agent_verifier "))
    assert "[interplay-always-on-verifier]" in line


def test_a_week_graded_end_to_end_from_the_cli(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    handler = Week()
    with ScriptedModel(handler) as model:
        out = run_interplay("eval", "always-on-week", "--set", CHOSEN, "--set",
                            "env.own_verifiers=false", "-n", "1",
                            "--base-url", model.base_url, "-o", str(out_dir))
    assert out.returncode == 0, out.stderr
    (line,) = [json.loads(x) for x in (out_dir / "episodes.jsonl").read_text().splitlines()]
    # A week's line keeps its bulk (the judge's call, the timeline) in its side file.
    episode = whole_record(line, out_dir)
    assert episode["error"] is None
    (reward,) = episode["rewards"]
    assert reward["name"] == "always_on_agent_verifier"
    assert list(reward["info"]["criteria"]) == [*CRITERIA, "reply_latency", "silence"]
    assert len(episode["judge_calls"]) == 1 and len(handler.judge) == 1
    assert SENTINEL not in handler.judge_text()
    assert SENTINEL in json.dumps(episode["results"]["always_on"]["timeline"])

    stored = json.loads((out_dir / "config.json").read_text())
    assert stored["verifiers"] == [{"name": "always_on_agent_verifier",
                                    "is": ["always_on_agent_verifier", "rubric"]}]
    summary = json.loads((out_dir / "summary.json").read_text())
    criteria = summary["criteria"]["always_on_agent_verifier"]
    assert criteria["outcome"] == {"mean": 1.0, "n": 1}
    assert criteria["kept_informed"] == {"mean": 0.5, "n": 1}
    assert criteria["silence"] == {"mean": 0.6, "n": 1}
    assert summary["reward_mean"] == reward["value"]
    assert "criterion always_on_agent_verifier.kept_informed 0.5 (n=1)" in [
        " ".join(line.split()) for line in out.stdout.splitlines()]

    page = (out_dir / "report.html").read_text()
    assert "judge criteria (mean)" in page
    assert "always_on_agent_verifier.asked_first" in page
    assert "<td>· kept_informed</td><td class=num>0.5</td>" in page

    # Where the plugin is not loaded, the results folder still says which rewards a judge
    # gave: the report keeps its criteria.
    (out_dir / "report.html").unlink()
    (out_dir / "summary.json").unlink()
    blocked = run_interplay("report", str(out_dir),
                            env={"INTERPLAY_BLOCK_PLUGINS": "always_on_verifier"})
    assert blocked.returncode == 0, blocked.stderr
    page = (out_dir / "report.html").read_text()
    assert "always_on_agent_verifier.asked_first" in page
    assert "<td>· kept_informed</td><td class=num>0.5</td>" in page


def test_a_plain_rubric_chosen_for_the_week_is_refused_before_any_call(tmp_path: Path) -> None:
    out = run_interplay("eval", "always-on-week", "--set",
                        'env.verifiers=[{kind = "rubric", criteria = [{name = "kind", '
                        'description = "It was kind."}]}]', "-n", "1",
                        "--base-url", "http://127.0.0.1:9/v1", "-o", str(tmp_path / "run"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.endswith("use kind = \"always_on_agent_verifier\" (pip install "
                         "interplay-always-on-verifier)")
    assert not (tmp_path / "run" / "episodes.jsonl").exists()
