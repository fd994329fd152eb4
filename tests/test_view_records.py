"""`interplay view` over what a run records beyond its rewards: a column, a filter and a sort
per reward component (the episodes where one goal failed), a run's label in the list and on
its page, and an episode's sandbox, its segments and a call another process made, in the
section the view serves; in headless Chromium, the component filter, search hits marked in an
opened episode, and the list's one clock."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from test_report import CHROMIUM, Browser
from test_view import append, request, run_folder

from interplay import cli
from interplay.report.episodes import ROW_COLUMNS
from interplay.values.records import (
    Episode,
    EpisodeInfo,
    FileChange,
    Message,
    ModelCall,
    Reward,
    SandboxRecord,
    Task,
    Trace,
    WorkspaceChanges,
)
from interplay.view import Viewer
from interplay.view.folder import RunsFolder, card
from interplay.view.runs import RunIndex, rows_query

GOALS = ("relayed_within", "bought_after_yes", "quiet_hours")


def episode(task: int, failed: tuple[str, ...] = (), *, text: str = "hello") -> Episode:
    """An episode scored by three goals, those in ``failed`` at 0."""
    info = EpisodeInfo(episode_id=f"ep-{task}", env="always-on", task_idx=task)
    trace = Trace(agent="assistant", episode=info, seat="assistant", harness="codex",
                  stop_condition="agent_completed",
                  messages=[Message("user", f"task {task}"), Message("assistant", text),
                            Message("user", "and then?"), Message("assistant", "done")],
                  model_calls=[ModelCall(id="m1", caller="program"),
                               ModelCall(id="m2", caller="other")],
                  info={"segment_starts": [0, 2]})
    rewards = [Reward(g, 0.0 if g in failed else 1.0) for g in GOALS]
    sandbox = SandboxRecord(kind="docker", image="interplay-base:bookworm",
                            workdir="/workspace",
                            changes=WorkspaceChanges(files=[FileChange("notes.md", "added", 4)],
                                                     diff="+++ b/notes.md\n+todo\n"))
    return Episode(info=info, task=Task(idx=task, prompt=f"prompt {task}"), traces=[trace],
                   rewards=rewards, reward=sum(r.value for r in rewards) / 3, sandbox=sandbox,
                   started_at=1_700_000_000.0 + task, wall_s=1.0)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    folder = run_folder(root, "week", env="always-on")
    append(folder, episode(0), episode(1, ("quiet_hours",)),
           episode(2, ("quiet_hours", "relayed_within")), episode(3, text="the kettle <b>"))
    return root


def test_a_row_holds_each_component_and_the_rows_filter_and_sort_by_one(root: Path) -> None:
    index = RunIndex(root / "week", "week")
    index.refresh()
    assert index.component_names() == list(GOALS)
    page = index.rows_page(rows_query({"component": "quiet_hours"}))
    assert [r.task for r in page["rows"]] == [1, 2] and page["components"] == list(GOALS)
    assert [r.task for r in index.rows_page(rows_query(
        {"component": "relayed_within", "outcome": "fail"}))["rows"]] == [2]
    assert [r.task for r in index.rows_page(rows_query(
        {"component": "quiet_hours", "outcome": "pass"}))["rows"]] == [0, 3]
    assert index.rows_page(rows_query({"component": "nope", "outcome": "none"}))["matched"] == 4
    ordered = index.rows_page(rows_query({"sort": "c:quiet_hours", "desc": "1"}))["rows"]
    assert [r.task for r in ordered] == [3, 0, 2, 1]  # ties the other way too, as every sort
    row = page["rows"][0]
    assert row.components == {
        "relayed_within": 1.0, "bought_after_yes": 1.0, "quiet_hours": 0.0}
    with pytest.raises(Exception, match="outcome: expected pass, fail or none"):
        rows_query({"component": "quiet_hours", "outcome": "maybe"})


def test_the_view_shows_a_run_s_label_its_sandbox_segments_and_calls_of_another(
        root: Path) -> None:
    assert cli.main(["label", str(root / "week"), "codex, before the prompt fix"]) == 0
    folder = RunsFolder(root)
    folder.scan()
    assert card(folder.get("week"))["label"] == "codex, before the prompt fix"

    async def ask() -> dict[str, Any]:
        async with Viewer(root, port=0) as viewer:
            assert viewer.server is not None
            port = viewer.server.port
            return {name: await request(port, target) for name, target in [
                ("run", "/run?id=week"), ("episode", "/api/episode?run=week&id=ep-1"),
                ("rows", "/api/rows?run=week&component=quiet_hours&outcome=fail")]}

    got = asyncio.run(ask())
    assert all(status == 200 for status, _ in got.values()), {k: v[0] for k, v in got.items()}
    run = got["run"][1].decode()
    assert '<p class="run-label">codex, before the prompt fix</p>' in run
    assert '<option value="quiet_hours">quiet_hours</option>' in run
    data = re.search(r'id="table-data">(.*?)</script>', run, re.S)
    assert data is not None and json.loads(data.group(1))["components"] == list(GOALS)
    section = got["episode"][1].decode()
    assert '<section class="sandbox">' in section and "<code>notes.md</code>" in section
    assert "+todo" in section
    assert re.findall(r'<div class="segment-start">(.*?)</div>', section) == [
        "segment 1: launch", "segment 2: resume"]
    assert '<span class="other-label">another process</span>' in section
    rows = json.loads(got["rows"][1].split(b"\r\n\r\n", 1)[1])
    assert [r[ROW_COLUMNS.index("task")] for r in rows["rows"]] == [1, 2]


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install "
                    "chromium; .ci/setup --test installs it)")
def test_a_person_lists_the_episodes_where_a_goal_failed_and_sees_the_search_marked(
        root: Path) -> None:
    async def drive() -> None:
        async with Viewer(root, port=0) as viewer:
            with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
                async with Browser(profile) as b:
                    await b.open(viewer.url)
                    await b.wait_for("document.querySelectorAll('tr.run-row').length === 1")
                    # One clock: 24 hours, whatever the browser's locale says.
                    await b.wait_for("/updated \\d\\d:\\d\\d:\\d\\d$/.test("
                                     "document.getElementById('live-status').textContent)")
                    await b.open(viewer.url + "run?id=week")
                    await b.wait_for("document.querySelectorAll('tr.ep-row').length === 4")
                    heads = await b.eval("Array.from(document.querySelectorAll("
                                         "'#episodes-head th[data-kind=component]'))"
                                         ".map(t => t.textContent)")
                    assert heads == list(GOALS)
                    cells = await b.eval("Array.from(document.querySelectorAll("
                                         "'tr.ep-row td.component.fail')).length")
                    assert cells == 3
                    await b.eval("var s=document.getElementById('f-component');"
                                 "s.value='quiet_hours';s.dispatchEvent(new Event('change'))")
                    await b.wait_for("document.querySelectorAll('tr.ep-row').length === 2")
                    tasks = await b.eval("Array.from(document.querySelectorAll('tr.ep-row'))"
                                         ".map(r => r.children[0].textContent)")
                    assert tasks == ["1", "2"]
                    await b.eval("var s=document.getElementById('f-component');"
                                 "s.value='';s.dispatchEvent(new Event('change'))")
                    await b.wait_for("document.querySelectorAll('tr.ep-row').length === 4")
                    await b.eval("var t=document.getElementById('f-text');t.value='KETTLE';"
                                 "t.dispatchEvent(new Event('input'))")
                    await b.wait_for("document.querySelectorAll('tr.ep-row').length === 1")
                    # The section is fetched from the view: waited for, not clicked again.
                    await b.click("tr.ep-row")
                    await b.wait_for("!!document.querySelector("
                                     "'section.episode:not([hidden]) mark.hit')")
                    marks = await b.eval("Array.from(document.querySelectorAll("
                                         "'section.episode:not([hidden]) mark.hit'))"
                                         ".map(m => m.textContent)")
                    assert marks == ["kettle"]
                    said = await b.eval("document.querySelector("
                                        "'section.episode:not([hidden]) .hits').textContent")
                    assert said == '1 hit of "KETTLE" marked'
                    # The text around the mark is the message's, escaped as it was.
                    text = await b.eval("document.querySelector('section.episode:not([hidden])"
                                        " mark.hit').parentNode.textContent")
                    assert text == "the kettle <b>"
                    assert b.errors == []

    asyncio.run(drive())
