"""What the report shows of a run's records: each seat's harness in the header, where each
segment of a transcript begins, the episode table's turns, a tool result headed with its call
id as recorded, a call another process made with a trace's secret, the episode's sandbox and
what changed in its workspace, and a run's label."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from interplay import cli, report
from interplay.report.episodes import ROW_COLUMNS
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values.records import (
    CommandRecord,
    Episode,
    EpisodeInfo,
    FileChange,
    Message,
    ModelCall,
    SandboxRecord,
    Task,
    ToolCall,
    Trace,
    WorkspaceChanges,
    to_json,
)


def table_rows(page: str) -> list[list[object]]:
    data = re.search(r'<script type="application/json" id="table-data">(.*?)</script>', page,
                     re.S)
    assert data is not None
    return json.loads(data.group(1))["rows"]  # type: ignore[no-any-return]


def relay(req: ScriptedRequest) -> ScriptedReply:
    msgs = req.messages
    system = str(msgs[0].get("content")) if msgs and msgs[0].get("role") == "system" else ""
    asked = sum(1 for m in msgs if m.get("role") == "user")
    if "role-playing a user" in system:
        return ScriptedReply.text("###DONE###" if asked > 2 else f"question {asked}")
    return ScriptedReply.text(f"answer {asked}")


@pytest.fixture
def chat_run(tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> Path:
    """A real run of the user-sim relay: an assistant seat (chat harness) and a user seat
    (null harness) talking for three turns."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"prompt": "a question", "answer": "answer"}) + "\n")
    model = scripted_model(relay)
    out = tmp_path / "run"
    assert cli.main(["eval", "user-sim", "--base-url", model.base_url, "-o", str(out),
                     "--quiet", "--set", f"env.taskset={json.dumps(str(tasks))}",
                     "--set", "env.relay.max_turns=3"]) == 0
    return out


def test_the_header_names_each_seats_harness_and_a_transcript_marks_its_segments(
        chat_run: Path) -> None:
    page = (chat_run / "report.html").read_text()
    header = page.split("<main>")[0]
    assert "seat <b>assistant</b>: harness <b class=\"seat-harness\">chat</b>" in header
    assert "seat <b>user</b>: harness <b class=\"seat-harness\">null</b>" in header
    (record,) = [json.loads(x) for x in (chat_run / "episodes.jsonl").read_text().splitlines()]
    assistant = next(t for t in record["traces"] if t["seat"] == "assistant")
    starts = assistant["info"]["segment_starts"]
    # The launch at the prompt, then a resume at each of the user's later messages.
    assert starts[0] == 0 and len(starts) >= 2
    assert [assistant["messages"][at]["role"] for at in starts] == ["user"] * len(starts)
    section = page.split(f'data-episode="{record["info"]["episode_id"]}"')[1]
    trace = section.split('data-seat="assistant"')[1].split('class="trace"')[0]
    marks = re.findall(r'<div class="segment-start">(.*?)</div>', trace)
    assert marks == ["segment 1: launch"] + [f"segment {n}: resume"
                                             for n in range(2, len(starts) + 1)]
    assert f"{len(starts)} segments" in trace
    # The kernel's record of the segments is the marks, not harness info.
    assert "segment_starts" not in section
    # The table's turns: the relay's own count.
    (row,) = table_rows(page)
    assert row[ROW_COLUMNS.index("turns")] == record["metrics"]["turns"] == 2


@pytest.mark.parametrize(("metrics", "turns"), [({"turns": 7.0}, 7.0), ({}, 3)])
def test_the_table_s_turns_are_the_env_s_count_else_the_most_segments_of_a_seat(
        tmp_path: Path, metrics: dict[str, float], turns: float) -> None:
    info = EpisodeInfo(episode_id="ep", env="game", task_idx=0)
    traces = [Trace(agent=seat, episode=info, seat=seat, harness="chat",
                    messages=[Message("user", "go"), Message("assistant", "ok")] * count,
                    info={"segment_starts": list(range(0, 2 * count, 2))})
              for seat, count in (("assistant", 3), ("user", 2))]
    ep = Episode(info=info, task=Task(idx=0, prompt="go"), traces=traces, reward=1.0,
                 metrics=metrics)
    (tmp_path / "episodes.jsonl").write_text(to_json(ep) + "\n")
    (row,) = table_rows(report.write_report(tmp_path).read_text())
    assert row[ROW_COLUMNS.index("turns")] == turns


def _episode() -> Episode:
    info = EpisodeInfo(episode_id="ep1", env="repo", task_idx=0)
    call = ToolCall(id="toolu_01AbCdEf", name="bash", arguments=json.dumps({"command": "ls"}))
    trace = Trace(
        agent="assistant", episode=info, seat="assistant", harness="claude-code",
        stop_condition="agent_completed",
        messages=[Message("user", "fix it"), Message("assistant", None, tool_calls=(call,)),
                  Message("tool", "a.py", tool_call_id="toolu_01AbCdEf"),
                  Message("assistant", "fixed")],
        model_calls=[ModelCall(id="m1", model="m", caller="program"),
                     ModelCall(id="m2", model="m", caller="other"),
                     ModelCall(id="m3", model="m", caller="program")],
        info={"segment_starts": [0], "claudecode": {"segments": [{"command": "launch"}]}})
    sandbox = SandboxRecord(
        kind="docker", image="interplay-base:bookworm", workdir="/workspace", start_s=1.25,
        setup=[CommandRecord(command="pip install -e .", exit_code=0, output="ok <done>",
                             duration_s=2.0),
               CommandRecord(command="make check", exit_code=None, output="", output_cut=4096,
                             timed_out=True, duration_s=60.0)],
        setup_s=62.0,
        changes=WorkspaceChanges(
            files=[FileChange("src/a.py", "modified", 120), FileChange("new <f>.txt", "added", 3),
                   FileChange("old.txt", "deleted", 9)],
            files_cut=2, diff="--- a/src/a.py\n+++ b/src/a.py\n-x = 1\n+x = 2\n", diff_cut=5000),
        stop_s=0.5, info={"container": "abc123"})
    return Episode(info=info, task=Task(idx=0, prompt="fix it"), traces=[trace], reward=1.0,
                   sandbox=sandbox)


def test_a_tool_result_a_call_of_another_process_and_the_sandbox_are_shown(
        tmp_path: Path) -> None:
    (tmp_path / "episodes.jsonl").write_text(to_json(_episode()) + "\n")
    page = report.write_report(tmp_path).read_text()
    # The call id as recorded, in an element the heading's upper case does not reach.
    assert 'result of <span class="call-id">toolu_01AbCdEf</span>' in page
    assert re.search(r"\.msg \.who \.call-id\{text-transform:none", page)
    # The call made with the trace's secret by another process: marked, counted.
    assert page.count('<span class="other-label">another process</span>') == 1
    assert "1 made by another process" in page
    # The sandbox: which, its times, its setup commands as they ended, what changed.
    section = page.split('<section class="sandbox">')[1].split("</section>")[0]
    assert "<b>docker</b>" in section and "<code>interplay-base:bookworm</code>" in section
    assert "started in 1.25 s" in section and "removed in 0.5 s" in section
    assert "exit 0" in section and "timed out" in section
    assert "ok &lt;done&gt;" in section and "4,096 bytes of output left out" in section
    assert "1 added, 1 deleted, 1 modified" in section and "2 files left out" in section
    assert "<code>new &lt;f&gt;.txt</code>" in section
    assert "+x = 2" in section and "5,000 bytes of the diff left out" in section
    assert "abc123" in section


def test_a_sandbox_that_never_got_to_its_changes_says_so(tmp_path: Path) -> None:
    ep = _episode()
    assert ep.sandbox is not None
    ep.sandbox.changes = None
    ep.sandbox.error = "the sandbox could not be made ready: SandboxError: no image"
    ep.error_type, ep.error, ep.reward = "sandbox_error", "no image", None
    (tmp_path / "episodes.jsonl").write_text(to_json(ep) + "\n")
    section = report.write_report(tmp_path).read_text().split(
        '<section class="sandbox">')[1].split("</section>")[0]
    assert "could not be made ready: SandboxError: no image" in section
    assert "was not recorded" in section


def test_a_label_names_the_run_in_its_report(chat_run: Path) -> None:
    assert cli.main(["label", str(chat_run), "baseline\n<before> the fix"]) == 0
    assert (chat_run / "label.txt").read_text() == "baseline <before> the fix\n"
    page = report.write_report(chat_run).read_text()
    assert '<p class="run-label">baseline &lt;before&gt; the fix</p>' in page
    assert cli.main(["label", str(chat_run), "--clear"]) == 0
    assert not (chat_run / "label.txt").exists()
    assert 'class="run-label"' not in report.write_report(chat_run).read_text()


def test_a_label_is_refused_for_a_folder_that_is_not_a_run(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    assert cli.main(["label", str(tmp_path), "x"]) != 0
    assert "not a results folder" in capsys.readouterr().err
    assert not (tmp_path / "label.txt").exists()


def test_her_nights_are_the_spans_outside_her_awake_hours() -> None:
    from datetime import datetime as at

    from interplay.report.charts import nights

    monday, wednesday = at(2025, 6, 2, 12, 0), at(2025, 6, 4, 12, 0)
    assert nights(["07:00", "23:00"], monday, wednesday) == [
        (at(2025, 6, 2, 23, 0), at(2025, 6, 3, 7, 0)),
        (at(2025, 6, 3, 23, 0), at(2025, 6, 4, 7, 0))]
    # Awake past midnight: asleep from 02:00 to 10:00; the range cuts the first and last.
    assert nights(["10:00", "02:00"], at(2025, 6, 2, 5, 0), at(2025, 6, 3, 4, 0)) == [
        (at(2025, 6, 2, 5, 0), at(2025, 6, 2, 10, 0)),
        (at(2025, 6, 3, 2, 0), at(2025, 6, 3, 4, 0))]
    assert nights(None, monday, wednesday) == []
    assert nights(["7am", "11pm"], monday, wednesday) == []


def test_the_always_on_timeline_shades_her_nights(
        tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> None:
    from test_report_always_on import SCENARIO, handler

    pytest.importorskip("matplotlib")
    scenario = tmp_path / "week.json"
    scenario.write_text(json.dumps({**SCENARIO, "end": "P2D"}))
    model = scripted_model(handler)
    out = tmp_path / "run"
    assert cli.main(["eval", str(scenario), "--base-url", model.base_url, "-o", str(out),
                     "--quiet"]) == 0
    (record,) = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert record["results"]["user"]["awake"] == ["07:00", "23:00"]
    page = (out / "report.html").read_text()
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    (timeline,) = [svg for svg in svgs if "The run in her local time" in svg]
    assert "her night" in timeline
    # Two days from Monday 08:00: her nights of Monday and Tuesday, one shaded span each,
    # and the legend's key.
    assert len(re.findall(r'style="fill: #e4e7ec; opacity: 0\.7"', timeline)) == 2 + 1


@pytest.mark.slow
def test_a_real_sandboxed_episode_s_report_shows_what_changed_and_the_forged_call(
        tmp_path: Path) -> None:
    """A program that fixes a file in a `local` sandbox and starts a shell that calls the model
    with its key (test_command_sandbox's): the report shows the file it changed, the diff, and
    the shell's call as another process's."""
    import asyncio

    from test_command_sandbox import run_fix

    (tmp_path / "program").mkdir()
    ep = asyncio.run(run_fix(tmp_path / "program", "local"))
    assert ep.error is None, ep.error
    out = tmp_path / "run"
    out.mkdir()
    (out / "episodes.jsonl").write_text(to_json(ep) + "\n")
    page = report.write_report(out).read_text()
    section = page.split('<section class="sandbox">')[1].split("</section>")[0]
    assert "<b>local</b>" in section and "1 modified" in section
    assert '<tr class="change-modified"><td><code>calc.py</code></td>' in section
    assert "-    return a - b" in section and "+    return a + b" in section
    assert page.count('<span class="other-label">another process</span>') == 1
    assert "1 made by another process" in page
