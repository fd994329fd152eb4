"""The report's charts, rows and downloads: charts drawn into the page and read in headless
Chromium (no console errors), a game's per-seat rewards, an error's cause, a generated task's
first message, the CSV and JSON downloads, and the transcripts budget of a large run."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_report import CHROMIUM, Browser, results  # noqa: F401 (a fixture)

from interplay import cli, report
from interplay.report import charts
from interplay.run.summary import format_summary, summarize
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values.records import (
    Episode,
    EpisodeInfo,
    Message,
    ModelCall,
    Reward,
    Task,
    Trace,
    Usage,
    to_json,
)

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                    "(apt-get install chromium; .ci/setup installs it)")


def table_of(page: str) -> dict[str, Any]:
    start = page.index('<script type="application/json" id="table-data">') + 48
    return json.loads(page[start:page.index("</script>", start)])


def rows_of(page: str) -> list[dict[str, Any]]:
    table = table_of(page)
    return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]


async def _read(url: str, script: Callable[[Browser], Any]) -> Any:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        async with Browser(profile) as b:
            await b.open(url)
            seen = await script(b)
            return seen, list(b.errors)


CHART_BOXES = ("Array.from(document.querySelectorAll('#charts .chart svg')).map(function(s){"
               "var r=s.getBoundingClientRect(); return [r.width, r.height,"
               " s.querySelectorAll('path, use').length, s.textContent]; })")


@pytest.mark.slow
@needs_chromium
def test_the_charts_render_and_the_downloads_hold_the_run(results: Path) -> None:  # noqa: F811
    summary = json.loads((results / "summary.json").read_text())

    async def script(b: Browser) -> dict[str, Any]:
        return {"charts": await b.eval(CHART_BOXES),
                "csv": await b.eval("window.interplayDownload('episodes-csv')"),
                "json": await b.eval("window.interplayDownload('episodes-json')"),
                "summary": await b.eval("window.interplayDownload('summary-json')"),
                "summary_csv": await b.eval("window.interplayDownload('summary-csv')"),
                "about": await b.eval("document.getElementById('about').innerText")}

    seen, errors = asyncio.run(_read((results / "report.html").resolve().as_uri(), script))
    assert errors == []
    titles = [c[3] for c in seen["charts"]]
    assert any("Reward distribution" in t for t in titles)
    assert any("pass@k and pass^k" in t for t in titles)
    assert any("Reward per task" in t for t in titles)
    assert any("Tokens per model call" in t and "Latency per model call" in t for t in titles)
    assert all(w > 200 and h > 100 and n > 5 for w, h, n, _ in seen["charts"])
    table = list(csv.reader(io.StringIO(seen["csv"])))
    assert table[0][:5] == ["index", "episode_id", "task", "rollout", "reward"]
    assert len(table) == 7
    records = {json.loads(x)["info"]["episode_id"]: json.loads(x)
               for x in (results / "episodes.jsonl").read_text().splitlines()}
    for row in table[1:]:
        assert float(row[4]) == records[row[1]]["reward"]
    assert {e["episode_id"] for e in json.loads(seen["json"])} == set(records)
    assert json.loads(seen["summary"]) == summary
    assert ["reward_mean", str(summary["reward_mean"])] in list(
        csv.reader(io.StringIO(seen["summary_csv"])))
    assert "user-sim: A modeled user with a goal talks to the assistant" in seen["about"]
    assert "Scored by contains" in seen["about"]


def game(folder: Path) -> None:
    """A two-seat game's results: each seat paid off, the episode itself not scored; one
    episode ended in an error with a cause of several lines."""
    lines = []
    for i, (p0, p1) in enumerate([(1.0, -1.0), (-1.0, 1.0), (-1.0, 1.0)]):
        info = EpisodeInfo(episode_id=f"g{i}", env="duel", task_idx=i)
        traces = [Trace(agent=seat, episode=info, seat=seat, stop_condition="game_over",
                        messages=[Message("user", f"Your move, {seat}; board {i}")],
                        rewards=[Reward("payoff", value, seat=seat)], reward=value)
                  for seat, value in (("player0", p0), ("player1", p1))]
        lines.append(Episode(info=info, task=Task(idx=i), traces=traces,
                             rewards=[Reward("payoff", p0, seat="player0"),
                                      Reward("payoff", p1, seat="player1")]))
    info = EpisodeInfo(episode_id="g3", env="duel", task_idx=3)
    lines.append(Episode(info=info, task=Task(idx=3), error_type="env_error",
                         error="RuntimeError: the board broke\n  at move 3\n  traceback...",
                         traces=[Trace(agent="player0", episode=info, seat="player0")]))
    (folder / "episodes.jsonl").write_text("".join(to_json(e) + "\n" for e in lines))
    (folder / "config.json").write_text(json.dumps({"config": {
        "env": {"name": "duel"}, "model": {"base_url": "http://x/v1", "model": "m"},
        "pass_threshold": 1.0}, "verifiers": [{"name": "payoff", "is": ["payoff"]}]}))


def test_a_game_shows_each_seats_reward_in_the_summary_and_the_rows(tmp_path: Path) -> None:
    game(tmp_path)
    page = report.write_report(tmp_path).read_text()
    assert "player0: mean reward ± se (3 scored)" in page
    assert "player1: mean reward ± se (3 scored)" in page
    assert "mean reward ± se (0 scored)" not in page
    table = table_of(page)
    assert table["seats"] == ["player0", "player1"]
    rows = rows_of(page)
    assert [r["seat_rewards"] for r in rows] == [[1.0, -1.0], [-1.0, 1.0], [-1.0, 1.0],
                                                 [None, None]]
    assert rows[3]["error_type"] == "env_error"
    assert rows[3]["error"] == "RuntimeError: the board broke"
    # A generated task (no prompt): the first message a seat was sent.
    assert rows[0]["prompt"] == "Your move, player0; board 0"
    figures = summarize([json.loads(x) for x in
                         (tmp_path / "episodes.jsonl").read_text().splitlines()])
    text = [" ".join(x.split()) for x in format_summary(figures).splitlines()]
    assert not [x for x in text if x.startswith("reward (mean")]
    assert "reward player0 (mean ± se, 3 scored) -0.3333 ± 0.667" in text


def test_charts_escape_the_runs_text_and_read_dollars_as_dollars() -> None:
    svg = charts.errors({"<script>alert(1)</script>": 2, "cost $5 and $x^2$": 1})
    assert svg is not None
    assert "<script>" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    assert "cost $5 and $x^2$" in svg
    assert charts.reward_distribution({}) is None


def test_without_matplotlib_the_page_says_how_to_get_charts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    game(tmp_path)
    monkeypatch.setattr(charts, "_matplotlib", lambda: None)
    page = report.write_report(tmp_path).read_text()
    assert "<svg" not in page
    assert "Charts are drawn with matplotlib: <code>pip install &#39;interplay[plots]&#39;" \
           "</code>" in page


def puzzle(req: ScriptedRequest) -> ScriptedReply:
    return ScriptedReply.text("Alice, Bob")


def test_a_generated_tasks_row_shows_the_first_message_it_was_sent(
        tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> None:
    model = scripted_model(puzzle)
    out = tmp_path / "sort"
    assert cli.main(["eval", "alphabet-sort", "-n", "2", "--base-url", model.base_url, "-o",
                     str(out), "-q"]) == 0
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert not any(record["task"].get("prompt") for record in records)
    rows = rows_of((out / "report.html").read_text())
    assert all(r["prompt"] for r in rows)
    # Each row shows its episode's first message (the episodes finish, and are written, in
    # either order).
    firsts = [next(m for m in record["traces"][0]["messages"] if m["role"] == "user")
              for record in records]
    assert sorted(r["prompt"][:40] for r in rows) == sorted(
        " ".join(str(first["content"]).split())[:40] for first in firsts)


def many(folder: Path, n: int) -> None:
    """``n`` episodes of a long transcript each; every fifth ended in an error."""
    lines = []
    for i in range(n):
        info = EpisodeInfo(episode_id=f"e{i}", env="echo", task_idx=i)
        failed = i % 5 == 4
        trace = Trace(agent="assistant", episode=info, seat="assistant",
                      stop_condition="agent_completed",
                      messages=[Message("user", f"task {i} " + "words " * 400),
                                Message("assistant", "reply " * 400)],
                      model_calls=[ModelCall(id=f"m{i}", usage=Usage(10, 20, 30),
                                             latency_s=0.5)])
        lines.append(Episode(info=info, task=Task(idx=i, prompt=f"task {i}"), traces=[trace],
                             reward=None if failed else float(i % 2),
                             error_type="timeout" if failed else None,
                             error="the model did not answer in 60 s" if failed else None))
    (folder / "episodes.jsonl").write_text("".join(to_json(e) + "\n" for e in lines))


@pytest.mark.slow
@needs_chromium
def test_past_the_transcripts_budget_rows_stay_and_errors_keep_theirs(tmp_path: Path) -> None:
    many(tmp_path, 300)
    page = report.write_report(tmp_path, transcripts_mb=0.2).read_text()
    rows = rows_of(page)
    assert len(rows) == 300
    kept = [r for r in rows if f'id="ep-{r["index"]}"' in page]
    assert 0 < len(kept) < 300
    assert "This page keeps the transcripts of" in page
    # Past three quarters of the budget only error episodes are kept.
    last_plain = max(r["index"] for r in kept if not r["error_type"])
    assert any(r["error_type"] and r["index"] > last_plain for r in kept)
    missing = next(r for r in rows if r not in kept)

    async def script(b: Browser) -> dict[str, Any]:
        seen = {"rows": await b.eval("document.querySelectorAll('tr.ep-row').length"),
                "page": await b.eval("document.getElementById('page-of').textContent")}
        await b.eval("document.getElementById('next').click()")
        seen["second"] = await b.eval("document.querySelector('tr.ep-row').dataset.index")
        await b.eval(f"location.hash = '#episode={missing['episode_id']}'")
        await b.wait_for("!document.getElementById('ep-missing').hidden")
        seen["missing"] = await b.eval("document.getElementById('ep-missing').innerText")
        return seen

    seen, errors = asyncio.run(_read((tmp_path / "report.html").resolve().as_uri(), script))
    assert errors == []
    assert seen["rows"] == 200 and seen["page"] == "page 1 of 2" and seen["second"] == "200"
    assert f"Episode {missing['episode_id']}: task {missing['task']}" in seen["missing"]
    assert "--transcripts-mb" in seen["missing"]


def test_a_chart_matplotlib_cannot_draw_is_left_out_not_the_report() -> None:
    # A reward of 1.7e308 is a finite number a verifier may return; no axis can place it.
    assert charts.reward_per_task({0: (1.7e308, 1), 1: (1.0, 1)}) is None
    assert charts.reward_distribution({1.0: 3}) is not None
