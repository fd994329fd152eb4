"""The screenshots of docs/view.md, taken of a real `interplay view` in headless Chromium while
a real run writes (a scripted model, as in the tests). Run by hand after changing the pages:

    .venv/bin/python tests/view_screenshots.py docs/images
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from test_report import EVIL, Browser
from test_report_always_on import SCENARIO

from interplay import cli
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

WIDTH = 1280


def week_answer(request: ScriptedRequest) -> ScriptedReply:
    """The always_on tests' agent and user, without their hostile text."""
    msgs = request.messages
    system = str(msgs[0]["content"]) if msgs and msgs[0]["role"] == "system" else ""
    if "role-playing a user" in system:
        return ScriptedReply.text("#1 sounds good, thanks")
    last = msgs[-1]
    if last["role"] == "tool":
        return ScriptedReply.text("Noted the dentist; nothing to tell her before 10:00.")
    if "plan my day" in str(last["content"]):
        return ScriptedReply.calls([("message_user", {"text": "Your day is free until the "
                                                              "dentist at 10:00."}),
                                    ("add_note", {"text": "plan"})])
    return ScriptedReply.tool_call("stay_quiet", {})


def answer(request: ScriptedRequest) -> ScriptedReply:
    last = str(request.messages[-1].get("content") or "")
    word = last.rsplit(" ", 1)[-1]
    # Most answers right, some wrong, slowly enough to see the run grow.
    return ScriptedReply.text(word if len(word) % 3 else "no idea", latency_s=1.0)


async def shoot(b: Browser, path: Path, height: int) -> None:
    await b.send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=height,
                 deviceScaleFactor=1, mobile=False)
    await asyncio.sleep(0.5)
    shot = await b.send("Page.captureScreenshot", format="png")
    await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))
    print(f"wrote {path}")


async def pictures(url: str, out: Path) -> None:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        async with Browser(profile) as b:
            await b.send("Emulation.setDeviceMetricsOverride", width=WIDTH, height=800,
                         deviceScaleFactor=1, mobile=False)
            await b.open(url)
            await b.wait_for("document.querySelectorAll('tr.run-row').length >= 4 && "
                             "!!document.querySelector('tr.run-row[data-state=running]')")
            await shoot(b, out / "view-runs.png", 420)
            await b.open(f"{url}run?id=echo-live")
            await b.wait_for("document.querySelectorAll('tr.ep-row').length > 4")
            await asyncio.sleep(3)
            await shoot(b, out / "view-run.png", 1500)
            await b.open(f"{url}run?id=week")
            await b.wait_for("!!document.querySelector('tr.ep-row')")
            await b.click_until("tr.ep-row",
                                "!!document.querySelector('section.episode:not([hidden])')")
            await b.eval("document.querySelector('table.ao-wakes').scrollIntoView()")
            await shoot(b, out / "view-always-on.png", 700)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, ScriptedModel(answer) as model, \
            ScriptedModel(week_answer) as week:
        root = Path(tmp) / "results"
        scenario = Path(tmp) / "week.json"
        scenario.write_text(json.dumps(SCENARIO).replace(json.dumps(EVIL)[1:-1], ""))
        cli.main(["eval", str(scenario), "--base-url", week.base_url, "-o", str(root / "week"),
                  "--quiet", "--no-report"])
        for name, n in (("echo-a", 8), ("echo-b", 8)):
            cli.main(["eval", "echo", "-n", str(n), "-r", "2", "--base-url", model.base_url,
                      "-o", str(root / name), "--quiet", "--no-report",
                      "--set", f"seed={len(name) + n}"])
        view = subprocess.Popen([sys.executable, "-m", "interplay.cli", "view", str(root),
                                 "--port", "0"], stdout=subprocess.PIPE, text=True)
        live = subprocess.Popen([sys.executable, "-m", "interplay.cli", "eval", "echo",
                                 "-n", "8", "-r", "8", "-c", "1", "--base-url",
                                 model.base_url, "-o", str(root / "echo-live"), "--quiet",
                                 "--no-report", "--set", "seed=3"])
        try:
            assert view.stdout is not None
            url = re.search(r"(http://\S+)", view.stdout.readline())[1]  # type: ignore[index]
            time.sleep(8)
            asyncio.run(pictures(url, out))
        finally:
            live.terminate()
            view.terminate()
            live.wait()
            view.wait()


if __name__ == "__main__":
    main()
