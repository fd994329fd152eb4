"""`interplay view` in headless Chromium while a real run writes into the folder: the run
appears in the list and its count grows without a reload, its page fills as episodes land,
an episode opens, the filters and the search work, an always_on episode shows its private
notes as private, and the pages log no error and ask nothing of any host but the view."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_report import CHROMIUM, Browser
from test_report_always_on import SCENARIO
from test_report_always_on import handler as always_on_handler

from interplay import cli
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; "
                             ".ci/setup --test installs it)")]

EPISODES = 8


class WatchedBrowser(Browser):
    """The tests' Chromium, also noting every request a page makes."""

    def __init__(self, profile: str) -> None:
        super().__init__(profile)
        self.requests: list[str] = []

    async def __aenter__(self) -> WatchedBrowser:
        await super().__aenter__()
        await self.send("Network.enable")
        return self

    def _note(self, msg: dict[str, Any]) -> None:
        super()._note(msg)
        if msg.get("method") == "Network.requestWillBeSent":
            self.requests.append(msg["params"]["request"]["url"])


@contextlib.contextmanager
def process(*args: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "interplay.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def root(tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> Path:
    """A folder holding a finished always_on run (with a private note) and a finished echo
    run (to compare the live one with)."""
    root = tmp_path / "results"
    scenario = tmp_path / "week.json"
    scenario.write_text(json.dumps(SCENARIO))
    model = scripted_model(always_on_handler)
    assert cli.main(["eval", str(scenario), "--base-url", model.base_url,
                     "-o", str(root / "week"), "--quiet", "--no-report"]) == 0
    apple = scripted_model(lambda request: ScriptedReply.text("apple"))
    assert cli.main(["eval", "echo", "-n", str(EPISODES), "--base-url", apple.base_url,
                     "-o", str(root / "done"), "--quiet", "--no-report"]) in (0, 1)
    return root


def slow_answer(request: ScriptedRequest) -> ScriptedReply:
    # apple passes task 0; every other task fails. Slow enough to watch the run grow.
    return ScriptedReply.text("apple", latency_s=1.2)


def test_a_person_follows_a_run_as_it_writes(
        root: Path, scripted_model: Callable[..., ScriptedModel]) -> None:
    model = scripted_model(slow_answer)
    with process("view", str(root), "--port", "0") as view:
        assert view.stdout is not None
        line = view.stdout.readline()
        found = re.search(r"view: (http://127\.0\.0\.1:\d+/)", line)
        assert found, (line, view.stderr.read() if view.poll() is not None else "")
        url = found[1]
        seen = asyncio.run(drive(url, root, model.base_url))
    origin = url.rstrip("/")
    assert seen["errors"] == []
    assert [u for u in seen["requests"] if not u.startswith(origin + "/")] == []
    assert seen["reloads"] == 0
    # The list: the run appeared while running, and its count grew in place.
    assert seen["list_states"][0] == "running"
    assert len(seen["list_counts"]) >= 2 and seen["list_counts"] == sorted(seen["list_counts"])
    # Each episode landing asked for the live run's line alone, and drew no other row again.
    assert seen["kept"]
    assert any(u.startswith(f"{origin}/api/run?run=live") for u in seen["list_requests"])
    # Its page: rows landed without a reload, and the page said when it was done.
    assert len(seen["page_counts"]) >= 2 and seen["page_counts"][-1] == EPISODES
    assert seen["finished"]
    assert seen["episode"]["title"].startswith("Episode ") and "task 1" in seen["episode"]["title"]
    assert "Reply with exactly one word: river" in seen["episode"]["text"]
    assert seen["failed"] == EPISODES - 1 and seen["searched"] == ["1"]
    assert seen["sorted"][0] == "1"  # reward descending: the episode that passed first
    assert seen["compared"] == "?run=live&run=done interplay compare · live vs done"
    # always_on: her chat never holds the private note; the wake table and the transcript
    # show it, each marked private.
    ao = seen["always_on"]
    assert ao["chat"] and not [c for c in ao["chat"] if "private thoughts" in c]
    assert ao["wake_notes"] and all("private: the user never reads it" in n
                                    and "private thoughts" in n for n in ao["wake_notes"])
    assert ao["transcript_notes"] and all("private note" in n and "private thoughts" in n
                                          for n in ao["transcript_notes"])
    assert ao["styled"] != ao["reply_styled"]


async def drive(url: str, root: Path, base_url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {"list_counts": [], "page_counts": [], "list_states": []}
    run_row = "document.querySelector('tr.run-row[data-run=\"live\"]')"
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        async with WatchedBrowser(profile) as b:
            await b.send("Emulation.setDeviceMetricsOverride", width=1400, height=1000,
                         deviceScaleFactor=1, mobile=False)
            await b.open(url)
            await b.wait_for("!!document.querySelector('tr.run-row[data-run=\"week\"]')")
            await b.eval("window.__loaded = 1; document.querySelector("
                         "'tr.run-row[data-run=\"week\"]').__kept = 1")
            with process("eval", "echo", "-n", str(EPISODES), "-c", "1", "--base-url",
                         base_url, "-o", str(root / "live"), "--quiet", "--no-report") as run:
                await b.wait_for(f"!!{run_row}")
                # The count as the list shows it, until it has grown.
                for _ in range(600):
                    state, text = await b.eval(
                        f"[{run_row}.dataset.state, {run_row}.querySelector('td.episodes')"
                        f".textContent]")
                    if not seen["list_states"] or seen["list_states"][-1] != state:
                        seen["list_states"].append(state)
                    count = int(text.split(" / ")[0]) if text[:1].isdigit() else 0
                    if count and (not seen["list_counts"] or seen["list_counts"][-1] != count):
                        seen["list_counts"].append(count)
                    if len(seen["list_counts"]) >= 2:
                        break
                    await asyncio.sleep(0.1)
                seen["reloads"] = 0 if await b.eval("window.__loaded === 1") else 1
                # A run that did not change keeps its row as it was drawn.
                seen["kept"] = await b.eval(
                    "document.querySelector('tr.run-row[data-run=\"week\"]').__kept === 1")
                seen["list_requests"] = list(b.requests)
                # Its page, opened from the list with a click.
                await b.click_until('tr.run-row[data-run="live"] td.run a',
                                    "location.pathname === '/run'")
                await b.wait_for("document.readyState === 'complete' && "
                                 "!!document.getElementById('episodes-body')")
                await b.eval("window.__loaded = 2")
                for _ in range(1200):
                    count = await b.eval("document.querySelectorAll('tr.ep-row').length")
                    if count and (not seen["page_counts"] or seen["page_counts"][-1] != count):
                        seen["page_counts"].append(count)
                    if count == EPISODES and await b.eval(
                            "document.getElementById('live-status').dataset.state "
                            "=== 'finished'"):
                        break
                    await asyncio.sleep(0.1)
                seen["finished"] = await b.eval(
                    "document.getElementById('live-status').dataset.state === 'finished'")
                if await b.eval("window.__loaded !== 2"):
                    seen["reloads"] += 1
                assert run.wait(60) in (0, 1)
            # An episode opens (task 1: "river").
            await b.click_until("tr.ep-row[data-episode]:nth-child(2)",
                                "!!document.querySelector('section.episode:not([hidden])')")
            seen["episode"] = await b.eval(
                "(function(){var s = document.querySelector('section.episode:not([hidden])');"
                "return {title: s.querySelector('h2').textContent, text: s.textContent};})()")
            # The filters and the search, answered by the server.
            await b.eval("var s=document.getElementById('f-reward');s.value='fail';"
                         "s.dispatchEvent(new Event('change'))")
            await b.wait_for(f"document.querySelectorAll('tr.ep-row').length === "
                             f"{EPISODES - 1}")
            seen["failed"] = await b.eval("document.querySelectorAll('tr.ep-row').length")
            await b.eval("var s=document.getElementById('f-reward');s.value='';"
                         "s.dispatchEvent(new Event('change'));"
                         "var t=document.getElementById('f-text');t.value='RIVER';"
                         "t.dispatchEvent(new Event('input'))")
            await b.wait_for("document.querySelectorAll('tr.ep-row').length === 1")
            seen["searched"] = await b.eval(
                "Array.from(document.querySelectorAll('tr.ep-row td:first-child'))"
                ".map(function(td){ return td.textContent; })")
            await b.eval("var t=document.getElementById('f-text');t.value='';"
                         "t.dispatchEvent(new Event('input'))")
            await b.wait_for(f"document.querySelectorAll('tr.ep-row').length === {EPISODES}")
            await b.click_until("th[data-sort=reward]",
                                "!!document.querySelector('th[aria-sort=ascending]')")
            await b.click_until("th[data-sort=reward]",
                                "!!document.querySelector('th[aria-sort=descending]')")
            await b.wait_for("document.querySelector('tr.ep-row td.reward').textContent "
                             "=== '1'")
            seen["sorted"] = await b.eval(
                "Array.from(document.querySelectorAll('tr.ep-row td.reward'))"
                ".map(function(td){ return td.textContent; })")
            seen["compared"] = await compare(b, url)
            seen["always_on"] = await always_on(b, url)
            seen["errors"] = list(b.errors)
            seen["requests"] = list(b.requests)
    return seen


async def compare(b: WatchedBrowser, url: str) -> str:
    """Two runs ticked in the list, compared: the page `interplay compare --html` writes."""
    await b.open(url)
    for run in ("live", "done"):
        box = f'tr.run-row[data-run="{run}"] input[type=checkbox]'
        await b.wait_for(f"!!document.querySelector({json.dumps(box)})")
        await b.click_until(box, f"document.querySelector({json.dumps(box)}).checked")
    await b.click_until("#compare", "location.pathname === '/compare'")
    await b.wait_for("document.readyState === 'complete'")
    return await b.eval("location.search + ' ' + document.title")


async def always_on(b: WatchedBrowser, url: str) -> dict[str, Any]:
    await b.open(f"{url}run?id=week")
    await b.wait_for("!!document.querySelector('tr.ep-row')")
    await b.click_until("tr.ep-row", "!!document.querySelector('section.episode:not([hidden])')")
    await b.wait_for("!!document.querySelector('section.episode:not([hidden]) tr.wake')")
    return await b.eval(
        "(function(){var s = document.querySelector('section.episode:not([hidden])');"
        "function texts(q){ return Array.from(s.querySelectorAll(q)).map("
        "function(e){ return e.textContent; }); }"
        "var note = s.querySelector('.msg.private-note'), reply = s.querySelector("
        "'.msg.role-assistant:not(.private-note)');"
        "return {chat: texts('.chat'), wake_notes: texts('tr.wake .private-note'),"
        " transcript_notes: texts('.msg.private-note'),"
        " styled: note ? getComputedStyle(note).borderLeftStyle + getComputedStyle(note)"
        ".fontStyle : '', reply_styled: reply ? getComputedStyle(reply).borderLeftStyle +"
        " getComputedStyle(reply).fontStyle : 'none'};})()")
