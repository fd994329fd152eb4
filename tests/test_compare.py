"""`interplay compare`: two seeded scripted runs whose difference is known, set side by side
(paired by task and rollout, a seeded bootstrap interval), on a terminal and as a page read in
headless Chromium; runs of other envs or tasks refused in one line."""

from __future__ import annotations

import asyncio
import io
import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_report import CHROMIUM, Browser

from interplay import cli, compare
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

WORDS = ["apple", "river", "yellow", "seven", "guitar", "winter", "pepper", "castle"]


def echo_model(right: Callable[[int], bool]) -> Callable[[ScriptedRequest], ScriptedReply]:
    """Answers task i's word when ``right(i)``, else a wrong word."""

    def handler(req: ScriptedRequest) -> ScriptedReply:
        asked = str(req.messages[-1]["content"]).rsplit(":", 1)[-1].strip()
        i = WORDS.index(asked) if asked in WORDS else -1
        return ScriptedReply.text(asked if right(i) else "banana")

    return handler


@pytest.fixture
def runs(tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> tuple[Path, Path]:
    """A: right on the even tasks only; B: right on all. 8 tasks x 2 rollouts each."""
    out = []
    for name, right in (("a", lambda i: i % 2 == 0), ("b", lambda i: True)):
        model = scripted_model(echo_model(right))
        folder = tmp_path / name
        assert cli.main(["eval", "echo", "-r", "2", "--base-url", model.base_url, "-o",
                         str(folder), "--quiet", "--no-report"]) == 0
        out.append(folder)
    return out[0], out[1]


def test_the_known_difference_with_a_seeded_interval(runs: tuple[Path, Path]) -> None:
    a, b = (compare.load_run(p) for p in runs)
    result = compare.compare([a, b], seed=7)
    assert result == compare.compare([a, b], seed=7)  # seeded: the same interval again
    [c] = result["comparisons"]
    [reward] = c["quantities"]
    assert reward["name"] == "reward" and reward["pairs"] == 16 and reward["tasks"] == 8
    assert (reward["a"], reward["b"], reward["diff"]) == (0.5, 1.0, 0.5)
    low, high = reward["ci"]
    assert 0.0 <= low < 0.5 < high <= 1.0
    # Half the tasks differ by 1: a resampled mean is above 0 unless it drew only even tasks.
    assert reward["p_above"] > 0.98
    diffs = {r["task"]: r["diff"] for r in reward["per_task"]}
    assert diffs == {i: float(i % 2) for i in range(8)}
    # Within a task both rollouts agree: a zero-width interval.
    assert all(r["ci"] == [r["diff"], r["diff"]] for r in reward["per_task"])
    sides = {s["label"]: s["summary"] for s in result["runs"]}
    assert sides["a"]["pass_at_k"] == {"1": 0.5, "2": 0.5}
    assert sides["b"]["pass_at_k"] == {"1": 1.0, "2": 1.0}
    # The two scripted servers differ by port: the config says so.
    assert [d["key"] for d in c["config_differences"]] == ["model.base_url"]
    other = compare.compare([a, b], seed=8)["comparisons"][0]["quantities"][0]
    assert other["diff"] == 0.5 and 0.0 <= other["ci"][0] < 0.5 < other["ci"][1] <= 1.0


def test_the_terminal_table_and_json(runs: tuple[Path, Path],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    a, b = map(str, runs)
    assert cli.main(["compare", a, b]) == 0
    text = capsys.readouterr().out
    assert f"A: a ({a})" in text and f"B: b ({b})" in text
    assert "B - A: paired by (task, rollout)" in text
    diffs = text[text.index("B - A: paired"):]
    row = next(line for line in diffs.splitlines() if re.match(r"\W*reward\W", line))
    assert row.split()[:5] == ["reward", "16", "(8)", "0.5", "1"] and "+0.5" in row
    assert "pass@2" in text and "config differences (A -> B)" in text
    assert "model.base_url" in text
    assert cli.main(["compare", a, b, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["comparisons"][0]["quantities"][0]["diff"] == 0.5


def test_the_terminal_tables_keep_to_80_columns_whatever_the_labels(
        runs: tuple[Path, Path]) -> None:
    from rich.console import Console

    from interplay.compare.table import print_comparison

    labels = ("baseline-run-with-a-long-label", "trained-checkpoint-step-300-of-the-run")
    result = compare.compare([compare.load_run(p, label=label)
                              for p, label in zip(runs, labels, strict=True)], seed=7)
    console = Console(width=80, file=io.StringIO(), highlight=False, emoji=False, markup=False,
                      soft_wrap=True, color_system=None)
    print_comparison(result, console)
    text = console.file.getvalue()
    assert f"A: {labels[0]} ({runs[0]})" in text and f"B: {labels[1]} ({runs[1]})" in text
    legend = 2
    assert all(len(line) <= 80 for line in text.splitlines()[legend:]), text
    # Every header in one line: nothing folded.
    for header in (["A", "B"], ["pairs (tasks)", "A", "B", "B - A", "95% interval", "P(>0)"],
                   ["task", "pairs", "A", "B", "B - A", "95% interval"]):
        assert any(line.split() == " ".join(header).split() for line in text.splitlines()), \
            header


def test_runs_of_other_envs_or_tasks_are_refused_unless_asked(
        runs: tuple[Path, Path], tmp_path: Path, scripted_model: Callable[..., ScriptedModel],
        capsys: pytest.CaptureFixture[str]) -> None:
    a, b = runs
    model = scripted_model(echo_model(lambda i: True))
    fewer = tmp_path / "fewer"
    assert cli.main(["eval", "echo", "-n", "4", "--base-url", model.base_url, "-o", str(fewer),
                     "-q", "--no-report"]) == 0
    capsys.readouterr()
    assert cli.main(["compare", str(fewer), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("interplay: error: only b has task 4, 5, 6, 7; compare runs of the same "
                   "tasks, or pass --common-tasks to compare the ones they share")
    assert cli.main(["compare", str(fewer), str(b), "--common-tasks", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tasks"] == 4 and data["runs"][1]["left_out"] == 8
    # Same indexes, other prompts: not the same tasks.
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"prompt": f"Reply with exactly one word: {w}",
                                         "answer": w}) + "\n" for w in reversed(WORDS)))
    other = tmp_path / "other"
    assert cli.main(["eval", "echo", "--base-url", model.base_url, "-o", str(other), "-q",
                     "--no-report", "--set", f"env.taskset={json.dumps(str(tasks))}"]) == 0
    assert cli.main(["compare", str(a), str(other)]) == 2
    assert "task 0, 1, 2, 3, 4, 5 and 2 more differ between a and other" in \
           capsys.readouterr().err
    assert cli.main(["compare", str(a), str(other), "--common-tasks"]) == 2
    assert "share no task" in capsys.readouterr().err
    # Another env.
    relay = tmp_path / "relay"
    assert cli.main(["eval", "user-sim", "-n", "1", "--base-url", model.base_url, "-o",
                     str(relay), "-q", "--no-report"]) == 0
    assert cli.main(["compare", str(a), str(relay)]) == 2
    assert "relay is a run of env 'user-sim', a of 'echo'" in capsys.readouterr().err
    assert cli.main(["compare", str(a)]) == 2
    assert cli.main(["compare", str(a), str(tmp_path / "none")]) == 2
    assert "not a results folder" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install "
                    "chromium; .ci/setup installs it)")
def test_the_comparison_page_in_chromium(runs: tuple[Path, Path], tmp_path: Path) -> None:
    page = tmp_path / "compare.html"
    assert cli.main(["compare", *map(str, runs), "--html", str(page)]) == 0
    html = page.read_text()
    for needle in ("src=\"http", "href=\"http", "<link", "@import"):
        assert needle not in html

    async def drive() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
            async with Browser(profile) as b:
                await b.open(page.resolve().as_uri())
                seen = {
                    "text": await b.eval("document.body.innerText"),
                    "diff": await b.eval("document.querySelector('table.differences td.diff')"
                                         ".innerText"),
                    "charts": await b.eval(
                        "Array.from(document.querySelectorAll('.chart svg')).map(function(s){"
                        "var r=s.getBoundingClientRect(); return [r.width, r.height,"
                        " s.querySelectorAll('path, use, line').length]; })"),
                    "errors": list(b.errors)}
                return seen

    seen = asyncio.run(drive())
    assert seen["errors"] == []
    assert "b - a" in seen["text"] and "model.base_url" in seen["text"]
    assert seen["diff"] == "+0.5"
    assert seen["charts"] and all(w > 100 and h > 50 and n > 5 for w, h, n in seen["charts"])


def test_the_page_shows_every_label_and_value_as_text(
        runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = runs
    evil = tmp_path / "<script>window.__x=1<\\script> &amp;"
    b.rename(evil)
    config = json.loads((evil / "config.json").read_text())
    config["config"]["model"]["model"] = "<img src=x onerror=alert(1)>"
    (evil / "config.json").write_text(json.dumps(config))
    page = tmp_path / "page.html"
    assert cli.main(["compare", str(a), str(evil), "--html", str(page)]) == 0
    html = page.read_text()
    assert "<script>window.__x" not in html and "<img" not in html
    assert "&lt;script&gt;window.__x=1&lt;\\script&gt; &amp;amp;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert html.count("<script") == 1  # the comparison's data, inert JSON


@pytest.fixture
def two_goals(tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> tuple[Path, Path]:
    """Runs scored by two components: echo's ``contains`` and a ``regex`` (a word from a to
    m). A: right on the even tasks (banana on the odd); B: right on all."""
    out = []
    for name, right in (("a", lambda i: i % 2 == 0), ("b", lambda i: True)):
        model = scripted_model(echo_model(right))
        folder = tmp_path / name
        assert cli.main(["eval", "echo", "--base-url", model.base_url, "-o", str(folder),
                         "--quiet", "--no-report", "--set",
                         'env.verifiers=[{kind = "regex", expected = "^[a-m]"}]']) == 0
        out.append(folder)
    return out[0], out[1]


def test_each_reward_component_is_compared_on_the_terminal_and_the_page(
        two_goals: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_goals
    assert cli.main(["label", str(b), "all right"]) == 0
    result = compare.compare([compare.load_run(a), compare.load_run(b)], seed=1)
    by_name = {q["name"]: q for q in result["comparisons"][0]["quantities"]}
    assert list(by_name) == ["reward", "component contains", "component regex"]
    # contains: A right on 4 of 8, B on 8. regex: A's banana starts with b (6 of 8 match),
    # B's words match on apple, guitar, castle (3 of 8).
    assert (by_name["component contains"]["a"], by_name["component contains"]["b"]) == (0.5, 1)
    assert by_name["component contains"]["diff"] == 0.5
    assert (by_name["component regex"]["a"], by_name["component regex"]["b"]) == (0.75, 0.375)
    assert by_name["component regex"]["diff"] == -0.375
    assert by_name["component regex"]["pairs"] == 8

    page = tmp_path / "c.html"
    assert cli.main(["compare", str(a), str(b), "--html", str(page)]) == 0
    text = capsys.readouterr().out
    each = text.split("reward components, B - A")[1]
    assert re.search(r"contains\s+8 \(8\)\s+0\.5\s+1\s+\+0\.5", each)
    assert re.search(r"regex\s+8 \(8\)\s+0\.75\s+0\.375\s+-0\.375", each)
    assert re.search(r"label\s+-\s+all right", text)
    html = page.read_text()
    assert "<td>component regex</td>" in html and '<td class="num diff">-0.375</td>' in html
    assert "<td>label</td>" in html and "all right" in html
