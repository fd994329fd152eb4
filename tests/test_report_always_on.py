"""`interplay report` on an always_on run: the user's chat with times and the run wake by wake,
read in headless Chromium, with every text of the run shown as text."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from test_report import CHROMIUM, EVIL, Browser

from interplay import cli
from interplay.report import always_on
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

SCENARIO = {
    "name": "report-week", "start": "2025-06-02T08:00", "end": "P1D",
    "timezone": "Europe/Berlin",
    "user": {"name": "Dana", "timezone": "Europe/Berlin", "awake": ["07:00", "23:00"],
             "reply_delays": {"free": "PT5M"}},
    "apps": [{"kind": "notes"}],
    "triggers": [{"name": "alarm", "at": "2025-06-02T10:00", "actions": [
        {"kind": "notify", "source": "calendar", "text": f"dentist {EVIL}"}]},
        # What wakes nobody: an item on her phone, and a change the world makes.
        {"name": "bank", "at": "2025-06-02T09:30", "actions": [
            {"kind": "notify", "to": "phone", "channel": "sms", "source": "Bank",
             "text": f"Card used {EVIL}"}]},
        {"name": "memo", "at": "2025-06-02T09:40", "actions": [
            {"kind": "tool", "app": "notes", "tool": "add_note", "args": {"text": "memo"},
             "by": "others"}]}],
    "tasks": [{"prompt": f"plan my day {EVIL}"}],
}


def handler(request: ScriptedRequest) -> ScriptedReply:
    msgs = request.messages
    system = str(msgs[0]["content"]) if msgs and msgs[0]["role"] == "system" else ""
    if "role-playing a user" in system:
        return ScriptedReply.text(f"#1 sounds good {EVIL}")
    last = msgs[-1]
    if last["role"] == "tool":
        return ScriptedReply.text("private thoughts")
    if "plan my day" in str(last["content"]):
        return ScriptedReply.calls([("message_user", {"text": f"Your day is free {EVIL}"}),
                                    ("add_note", {"text": "plan"})])
    return ScriptedReply.tool_call("stay_quiet", {})


@pytest.fixture
def results(tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> Path:
    scenario = tmp_path / "week.json"
    scenario.write_text(json.dumps(SCENARIO))
    model = scripted_model(handler)
    out = tmp_path / "run"
    assert cli.main(["eval", str(scenario), "--base-url", model.base_url, "-o", str(out),
                     "--quiet"]) == 0
    return out


def test_the_view_reads_a_record_defensively() -> None:
    assert always_on.view(None) is None and always_on.view({"timeline": "x"}) is None
    v = always_on.view({"timeline": [{"kind": "wake", "wake": 1, "at": "nonsense",
                                      "sources": [{"kind": "alert"}], "tool_calls": [5]}],
                        "conversation": [{"from": "user", "kind": "line", "text": ["odd"]}]})
    assert v is not None and v["wakes"][0]["when"] == "nonsense"
    assert v["chat"][0]["text"] == '["odd"]'
    assert v["wakes"][0]["folded"] == ""
    folded = always_on.view({"timeline": [
        {"kind": "wake", "wake": n, "context": {"folded_wakes": f}}
        for n, f in ((4, 1), (5, 3), (6, "x"))]})
    assert folded is not None
    assert [w["folded"] for w in folded["wakes"]] == ["wake 1", "wakes 1-3", ""]
    repeats = always_on.view({"timeline": [
        {"kind": "world_only_repeats", "at": "2025-06-02T15:00:00+02:00", "jumps": 3,
         "triggers": ["tick", "daily"]}]})
    assert repeats is not None and repeats["world"] == [{
        "when": "Mon 2025-06-02 15:00",
        "what": "the run ended: only the repeats of tick, daily were left (3 idle jumps)"}]


def test_the_page_says_when_she_read_her_phone_and_what_woke_nobody(results: Path) -> None:
    [record] = [json.loads(x) for x in (results / "episodes.jsonl").read_text().splitlines()]
    view = always_on.view(record["results"]["always_on"])
    assert view is not None
    [message] = [e for e in view["chat"] if e["who"] == "agent"]
    assert "read Mon 2025-06-02 08:00" in message["meta"]
    assert view["phone"] == [{"when": "Mon 2025-06-02 09:30", "channel": "sms",
                              "sender": "Bank", "text": f"Card used {EVIL}",
                              "seen": "seen Tue 2025-06-03 08:00 (her wrap-up)"}]
    world = [(e["when"], e["what"]) for e in view["world"]]
    assert ("Mon 2025-06-02 09:30", "trigger bank fired (#1)") in world
    assert ("Mon 2025-06-02 09:30", f"sms from Bank on her phone: Card used {EVIL}") in world
    assert ("Mon 2025-06-02 09:40", "notes.note_added by others") in world
    assert all(w[0] != "Mon 2025-06-02 10:00" or "alarm" not in w[1] for w in world)
    page = (results / "report.html").read_text()
    assert "Her phone" in page and "The world on its own" in page
    assert "Card used &lt;script&gt;" in page


def test_the_page_holds_the_chat_and_the_wakes_escaped(results: Path) -> None:
    page = (results / "report.html").read_text()
    assert "The user's chat" in page and "Wake by wake" in page
    # Her chat never holds the agent's private notes; the wake table and the transcript show
    # them, each marked private.
    chat = page[page.index('<div class="ao-chat">'):page.index("<h3>Her phone</h3>")]
    assert "private thoughts" not in chat
    notes = re.findall(r'<div class="private-note"><div class="private-label">(.*?)</div>'
                       r'<pre>(.*?)</pre>', page)
    assert notes and set(notes) == {("private: the user never reads it", "private thoughts")}
    marked = re.findall(r'<div class="msg role-assistant private-note">.*?<pre class="text">'
                        r'(.*?)</pre>', page, re.S)
    assert marked and set(marked) == {"private thoughts"}
    assert "<script>window.__xss" not in page
    assert "Your day is free &lt;script&gt;" in page


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install "
                    "chromium; .ci/setup installs it)")
def test_a_person_reads_the_chat_with_times_and_the_run_wake_by_wake(results: Path) -> None:
    page_url = (results / "report.html").resolve().as_uri()
    [record] = [json.loads(x) for x in (results / "episodes.jsonl").read_text().splitlines()]
    eid = record["info"]["episode_id"]

    async def drive() -> None:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
            async with Browser(profile) as b:
                await b.open(page_url)
                await b.click_until(f'tr.ep-row[data-episode="{eid}"]',
                                    "!!document.querySelector('section.episode:not([hidden])')")
                chat = await b.eval("Array.from(document.querySelectorAll("
                                    "'section.episode:not([hidden]) .chat')).map("
                                    "c => [c.className, c.innerText])")
                kinds = [c[0] for c in chat]
                assert kinds[:3] == ["chat from-user", "chat from-agent", "chat from-user"]
                assert kinds[-1] == "chat from-step"
                assert chat[0][1].startswith("Mon 2025-06-02 08:00 · her request")
                assert f"plan my day {EVIL}" in chat[0][1]
                assert "message #1 · wake 1 · read" in chat[1][1]
                assert "Mon 2025-06-02 08:05 · her reply · to #1 · reached the agent in " \
                       "wake 2" in chat[2][1]
                assert "end: end_time" in chat[-1][1]
                wakes = await b.eval("Array.from(document.querySelectorAll("
                                     "'section.episode:not([hidden]) tr.wake')).map("
                                     "r => Array.from(r.cells).map(c => c.innerText))")
                assert [w[0] for w in wakes] == ["1", "2", "3", "4"]
                first, alarm = wakes[0], wakes[2]
                assert "her request" in first[2] and "#1:" in first[3]
                assert "message_user" in first[4] and "add_note" in first[4]
                assert "notes.note_added" in first[5] and "by assistant, turn" in first[5]
                assert alarm[1].startswith("Mon 2025-06-02 10:00")
                assert "alert from calendar" in alarm[2] and f"dentist {EVIL}" in alarm[2]
                assert "stayed quiet" in alarm[3]
                assert "final" in wakes[3][1]
                # Her days as a chart in her local time, and how long her messages waited.
                titles = await b.eval("Array.from(document.querySelectorAll("
                                      "'section.episode:not([hidden]) .chart svg')).map("
                                      "s => [s.getBoundingClientRect().width, s.textContent])")
                assert [t for _, t in titles if "The run in her local time (Europe/Berlin)"
                        in t and "agent woke" in t and "her messages" in t]
                assert [t for _, t in titles if "Reply latency (simulated time)" in t]
                assert all(w > 200 for w, _ in titles)
                assert await b.eval("typeof window.__xss") == "undefined"
                assert await b.eval("document.querySelectorAll('img').length") == 0
                assert b.errors == []

    asyncio.run(drive())
