"""What `interplay report` costs on a large run: build time, peak memory, page size, and how
long the page takes to open in headless Chromium.

Makes a results folder with a real `interplay eval` of ``user-sim`` (a 3-turn relay, so each
episode holds two seats' transcripts of 7 model calls) over N generated tasks against
``benchmarks/fast_model.py`` (its own process), then times ``interplay report DIR`` in a
subprocess (wall time and the process's peak RSS), and opens the page in Chromium over the
DevTools protocol: the time from navigation to the load event, and to the first page of the
episode table drawn. Targets for 10,000 episodes: built in under 10 s, a page under 5 MB,
open in under 2 s.

Run by hand (it prints figures; nothing is asserted):

    .venv/bin/python benchmarks/bench_report.py                  # 10,000 episodes
    .venv/bin/python benchmarks/bench_report.py -n 2000 --keep /tmp/run2k
    .venv/bin/python benchmarks/bench_report.py --reuse /tmp/run2k   # report and browser only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_run import Server

ROOT = Path(__file__).resolve().parent.parent
INTERPLAY = [sys.executable, "-m", "interplay.cli"]


def make_run(folder: Path, n: int, concurrency: int) -> float:
    """A real eval of n episodes into ``folder``; returns its wall time."""
    tasks = folder.parent / "tasks.jsonl"
    with tasks.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({
                "prompt": f"You want to know whether branch {i} opens on Saturday.",
                "system_prompt": f"You are the help desk of branch {i}. It opens on Saturday "
                                 f"at {8 + i % 4}:00.", "answer": f"{8 + i % 4}",
                "info": {"persona": "a student"}}) + "\n")
    server = Server(0.0)
    try:
        t0 = time.monotonic()
        subprocess.run([*INTERPLAY, "eval", "user-sim", "--base-url", server.base_url,
                        "-c", str(concurrency), "-o", str(folder), "-q", "--no-report",
                        "--set", f"env.taskset={json.dumps(str(tasks))}",
                        "--set", "env.relay.max_turns=3"], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        return time.monotonic() - t0
    finally:
        server.stop()


def build_report(folder: Path) -> tuple[float, float, float]:
    """``interplay report`` in a subprocess: (wall seconds, CPU seconds, peak RSS in MB). On
    a shared machine the CPU figure is the one to read: the wall time is what the others'
    load left of it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    # The command as `interplay report` runs it, telling its own peak RSS on stderr (the
    # children's figure would be the eval's, run before it).
    proc = subprocess.run([sys.executable, "-c", REPORT_WITH_RSS, str(folder)], check=True,
                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, int(proc.stderr.split()[-1]) / 1024


REPORT_WITH_RSS = ("import resource, sys\n"
                   "from interplay.cli import main\n"
                   "code = main(['report', sys.argv[1]])\n"
                   "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
                   "sys.exit(code)\n")


async def open_page(url: str) -> dict[str, float]:
    """Load the page in headless Chromium; milliseconds to the load event and to the table's
    first rows, as the page's own clock measures from navigation."""
    import aiohttp

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed")
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        proc = await asyncio.create_subprocess_exec(
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            for _ in range(2400):  # two minutes at most
                if port_file.exists() and port_file.read_text().strip():
                    break
                await asyncio.sleep(0.05)
            port = int(port_file.read_text().split()[0])
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
                    page = next(t for t in await resp.json(content_type=None)
                                if t.get("type") == "page")
                async with session.ws_connect(page["webSocketDebuggerUrl"],
                                              max_msg_size=0) as ws:
                    ids = iter(range(1, 10**6))

                    async def send(method: str, **params: Any) -> Any:
                        my = next(ids)
                        await ws.send_json({"id": my, "method": method, "params": params})
                        while True:
                            msg = await ws.receive_json()
                            if msg.get("id") == my:
                                return msg.get("result", {})

                    async def value(expr: str) -> Any:
                        got = await send("Runtime.evaluate", expression=expr,
                                         returnByValue=True)
                        return got.get("result", {}).get("value")

                    await send("Page.enable")
                    await send("Page.navigate", url=url)
                    for _ in range(6000):  # two minutes at most
                        if await value("document.readyState") == "complete" and \
                                await value("location.href") == url:
                            break
                        await asyncio.sleep(0.02)
                    timing = await value(
                        "(function(){var t=performance.getEntriesByType('navigation')[0];"
                        "return [t.domContentLoadedEventEnd, t.loadEventEnd,"
                        " document.querySelectorAll('tr.ep-row').length]})()")
                    return {"dom_content_loaded_ms": timing[0], "load_ms": timing[1],
                            "rows_drawn": timing[2]}
        finally:
            proc.terminate()
            await proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10_000, help="episodes (default 10,000)")
    parser.add_argument("-c", type=int, default=256, help="the eval's concurrency")
    parser.add_argument("--keep", type=Path, help="make the run in this folder and keep it")
    parser.add_argument("--reuse", type=Path, help="a run made before: report and open only")
    parser.add_argument("--repeat", type=int, default=3, help="report builds and page loads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.reuse:
            folder = args.reuse
            eval_s = None
        else:
            folder = args.keep or Path(tmp) / "run"
            eval_s = make_run(folder, args.n, args.c)
        episodes = sum(1 for _ in (folder / "episodes.jsonl").open("rb"))
        source_mb = (folder / "episodes.jsonl").stat().st_size / 1e6
        for i in range(args.repeat):
            load = os.getloadavg()[0]
            wall, cpu, rss = build_report(folder)
            size_mb = (folder / "report.html").stat().st_size / 1e6
            opened = asyncio.run(open_page((folder / "report.html").resolve().as_uri()))
            print(json.dumps({"episodes": episodes, "episodes_jsonl_mb": round(source_mb, 1),
                              "eval_s": None if eval_s is None or i else round(eval_s, 1),
                              "report_s": round(wall, 2), "report_cpu_s": round(cpu, 2),
                              "report_peak_rss_mb": round(rss),
                              "page_mb": round(size_mb, 2), **opened,
                              "load_before": round(load, 2),
                              "load_after": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
