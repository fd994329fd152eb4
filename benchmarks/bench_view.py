"""What `interplay view` costs: time to the first page and to an episode over a folder of 40
runs and one of 10,000 episodes, and the server's memory while a run grows.

Makes a real 10,000-episode run (``bench_report.make_run``: a 3-turn ``user-sim`` eval
against ``fast_model.py``; ``--reuse DIR`` takes one made before) and a folder holding it
twice (its files linked, not copied) beside 40 runs of 250 of its episodes each (each with its
config, a model of its own, and its summary, as a run leaves them). Then ``interplay view``
in a process of its own, asked over HTTP as its pages ask:

- the list (``/`` and ``/api/runs``), cold, then warm;
- the large run's page (``/run``, which reads its 10,000 episodes the first time), its first
  page of rows, an episode's section, its figures, a search of its messages; warm again;
- finding the runs where a task ran (``/api/find``: every run read to its end), cold and warm;
- in headless Chromium: from navigation to the large run's first rows drawn, and from a
  click on a row to its episode shown;
- a run that grows: 10,000 episodes appended at ``--rate`` a second while a client follows
  the events as a page does (a page of rows and the run's line at each, the figures every
  2 s), and another as the list of runs does: the server's resident memory over the growth,
  its CPU, and how far behind the last episode it shows; then again with the list asking for
  every run's line at each event (as it did before it asked for the changed run's alone).

Run by hand (it prints figures; nothing is asserted):

    .venv/bin/python benchmarks/bench_view.py --keep /tmp/run10k
    .venv/bin/python benchmarks/bench_view.py --reuse /tmp/run10k
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from bench_report import make_run

from interplay.run.results import read_episodes, write_json
from interplay.run.summary import summarize

ROOT = Path(__file__).resolve().parent.parent
RUNS = 40
PER_RUN = 250


def make_folder(big: Path, root: Path) -> None:
    """``root``: the large run (its files linked) and 40 runs of slices of its episodes."""
    lines = (big / "episodes.jsonl").read_bytes().splitlines(keepends=True)
    stored = json.loads((big / "config.json").read_text())
    for copy in ("big", "big-again"):
        (root / copy).mkdir(parents=True)
        for name in ("config.json", "episodes.jsonl", "summary.json"):
            if (big / name).exists():
                os.link(big / name, root / copy / name)
        if (big / "episodes").is_dir():
            os.symlink(big / "episodes", root / copy / "episodes")
    for i in range(RUNS):
        folder = root / f"sweep/run-{i:02d}"
        folder.mkdir(parents=True)
        config = json.loads(json.dumps(stored))
        config["config"]["model"]["model"] = f"model-{i % 5}"
        config["config"]["seed"] = i
        write_json(folder / "config.json", config)
        part = lines[i * PER_RUN:(i + 1) * PER_RUN]
        (folder / "episodes.jsonl").write_bytes(b"".join(part))
        write_json(folder / "summary.json", summarize(
            read_episodes(folder / "episodes.jsonl", slim=True), expected=len(part)))


class View:
    """``interplay view ROOT`` in a process of its own."""

    def __init__(self, root: Path) -> None:
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "interplay.cli", "view", str(root),
                                      "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"(http://\S+)", line)
        if not found:
            raise SystemExit(f"interplay view did not start: {line!r}")
        self.url = found[1].rstrip("/")
        self.started_s = time.monotonic() - self.t0
        self.ps = psutil.Process(self.proc.pid)

    def rss_mb(self) -> float:
        return self.ps.memory_info().rss / 1e6

    def cpu_s(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)


async def timed(session: aiohttp.ClientSession, url: str) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    async with session.get(url) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise SystemExit(f"{url}: {resp.status} {body[:200]!r}")
    return (time.perf_counter() - t0) * 1000, body


async def pages(view: View) -> dict[str, Any]:
    out: dict[str, Any] = {}
    u = view.url
    async with aiohttp.ClientSession() as s:
        a, _ = await timed(s, f"{u}/")
        b, body = await timed(s, f"{u}/api/runs")
        out["list_cold_ms"] = round(a + b)
        out["runs_listed"] = len(json.loads(body)["runs"])
        # Right after the list: this first run page also waits for the plugins' import.
        t0 = time.monotonic()
        out["run_page_cold_ms"] = round((await timed(s, f"{u}/run?id=big"))[0])
        out["rows_ms"] = round((await timed(s, f"{u}/api/rows?run=big&limit=200"))[0])
        for _ in range(6000):  # ten minutes at most
            if not json.loads((await timed(s, f"{u}/api/run?run=big"))[1])["reading"]:
                break
            await asyncio.sleep(0.1)
        out["run_read_s"] = round(time.monotonic() - t0, 2)
        out["episode_ms"] = round((await timed(s, f"{u}/api/episode?run=big&i=5000"))[0])
        out["figures_ms"] = round((await timed(s, f"{u}/api/figures?run=big"))[0])
        out["search_cold_ms"] = round((await timed(
            s, f"{u}/api/rows?run=big&text=branch%20777%20opens"))[0])
        warm: dict[str, list[float]] = {}
        for _ in range(5):
            for name, path in [("list_warm_ms", "/api/runs"), ("run_page_warm_ms", "/run?id=big"),
                               ("rows_sorted_warm_ms", "/api/rows?run=big&sort=reward&desc=1"),
                               ("episode_warm_ms", "/api/episode?run=big&i=9000"),
                               ("search_warm_ms", "/api/rows?run=big&text=branch%20777%20opens")]:
                warm.setdefault(name, []).append((await timed(s, u + path))[0])
        out.update({k: round(statistics.median(v)) for k, v in warm.items()})
        # The same run under another name, opened a few seconds later, as a person would
        # after reading the list: its episodes read for the first time.
        await asyncio.sleep(5)
        out["another_run_page_cold_ms"] = round((await timed(s, f"{u}/run?id=big-again"))[0])
        out["another_episode_while_read_ms"] = round((await timed(
            s, f"{u}/api/episode?run=big-again&i=9999"))[0])
        out["another_figures_cold_ms"] = round((await timed(
            s, f"{u}/api/figures?run=big-again"))[0])
        out["rss_after_pages_mb"] = round(view.rss_mb())
        # The runs where a task passed: every run read to the end of its file (the 40 small
        # ones for the first time), then again.
        out["find_cold_ms"] = round((await timed(s, f"{u}/api/find?task=7&outcome=any"))[0])
        _, body = await timed(s, f"{u}/api/find?task=7&outcome=any")
        out["find_runs"] = len(json.loads(body)["runs"])
        out["find_warm_ms"] = round(statistics.median(
            [(await timed(s, f"{u}/api/find?task=7&outcome=any"))[0] for _ in range(5)]))
        out["rss_after_find_mb"] = round(view.rss_mb())
    return out


async def browser(view: View) -> dict[str, float]:
    """Milliseconds from navigation to the large run's first rows, and from a click on a row
    to its episode shown, in headless Chromium (the tests' driver)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_report import Browser

    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        async with Browser(profile) as b:
            await b.send("Page.navigate", url=f"{view.url}/run?id=big")
            await b.wait_for("document.querySelectorAll('tr.ep-row').length > 0")
            rows = await b.eval("(function(){var t=performance.getEntriesByType('navigation')"
                                "[0]; return [t.loadEventEnd, performance.now()];})()")
            await b.eval("window.__t = performance.now();"
                         "document.querySelector('tr.ep-row').click()")
            await b.wait_for("!!document.querySelector('section.episode:not([hidden])')")
            shown = await b.eval("performance.now() - window.__t")
            return {"browser_load_event_ms": round(rows[0]),
                    "browser_rows_drawn_ms": round(rows[1]),
                    "browser_episode_shown_ms": round(shown)}


def writer(lines: list[bytes], path: Path, rate: float, done: threading.Event) -> None:
    with path.open("ab", buffering=0) as fh:
        t0 = time.monotonic()
        for i, line in enumerate(lines):
            wait = t0 + i / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            fh.write(line)
    done.set()


async def growth(view: View, root: Path, big: Path, rate: float,
                 list_asks: str = "line") -> dict[str, Any]:
    """A run growing to 10,000 episodes while a client follows it as a run's page does, and
    another as the list of runs does: at each event, the changed run's line (``line``, as
    the list asks now) or every run's (``list``, as it asked before)."""
    lines = (big / "episodes.jsonl").read_bytes().splitlines(keepends=True)
    folder = root / f"grow-{list_asks}"
    key = folder.name
    folder.mkdir()
    os.link(big / "config.json", folder / "config.json")
    (folder / "running.json").write_text(json.dumps({"pid": view.proc.pid, "host": os.uname()[1],
                                                     "expected": len(lines)}))
    samples: list[tuple[float, int, float]] = []
    seen = 0
    cpu0 = view.cpu_s()
    done = threading.Event()
    async with aiohttp.ClientSession() as s:
        await asyncio.sleep(1.5)  # the view finds the new folder
        thread = threading.Thread(target=writer, args=(lines, folder / "episodes.jsonl", rate,
                                                       done), daemon=True)
        t0 = time.monotonic()
        thread.start()
        last_figures = 0.0

        async def follow() -> None:
            nonlocal seen, last_figures
            async with s.get(f"{view.url}/api/events", timeout=aiohttp.ClientTimeout(
                    total=None, sock_read=None)) as resp:
                async for raw in resp.content:
                    if not raw.startswith(b"data:"):
                        continue
                    _, body = await timed(s, f"{view.url}/api/rows?run={key}&limit=200")
                    seen = max(seen, json.loads(body)["total"])
                    await timed(s, f"{view.url}/api/run?run={key}")
                    if time.monotonic() - last_figures > 2:
                        last_figures = time.monotonic()
                        await timed(s, f"{view.url}/api/figures?run={key}")
                    if done.is_set() and seen >= len(lines):
                        return

        list_ms: list[float] = []

        async def listing() -> None:
            async with s.get(f"{view.url}/api/events", timeout=aiohttp.ClientTimeout(
                    total=None, sock_read=None)) as resp:
                async for raw in resp.content:
                    if done.is_set() and seen >= len(lines):
                        return
                    if not raw.startswith(b"data:"):
                        continue
                    told = json.loads(raw[5:])
                    if list_asks == "list" or any(e.get("kind") != "run" for e in told):
                        list_ms.append((await timed(s, f"{view.url}/api/runs"))[0])
                    for run in sorted({e["run"] for e in told if e.get("kind") == "run"}):
                        if list_asks == "line":
                            list_ms.append((await timed(s, f"{view.url}/api/run?run={run}"))[0])

        async def sample() -> None:
            while not (done.is_set() and seen >= len(lines)):
                samples.append((time.monotonic() - t0, seen, view.rss_mb()))
                await asyncio.sleep(0.5)

        lister = asyncio.create_task(listing())
        await asyncio.wait_for(asyncio.gather(follow(), sample()), 600)
        behind_s = time.monotonic() - t0 - len(lines) / rate
        lister.cancel()
    (folder / "running.json").unlink()
    marks = {}
    for frac in (0.25, 0.5, 0.75, 1.0):
        want = int(len(lines) * frac)
        at = next((r for _, n, r in samples if n >= want), samples[-1][2])
        marks[f"rss_at_{want}_mb"] = round(at)
    figures = {"grow_episodes": len(lines), "grow_rate_per_s": rate,
               "rss_before_grow_mb": round(samples[0][2]), **marks,
               "rss_peak_during_grow_mb": round(max(r for _, _, r in samples)),
               "server_cpu_during_grow_s": round(view.cpu_s() - cpu0, 1),
               "last_episode_shown_after_s": round(behind_s, 2),
               "list_requests": len(list_ms),
               "list_request_ms_median": round(statistics.median(list_ms)) if list_ms else None,
               "list_request_ms_total": round(sum(list_ms))}
    return {f"{k} ({list_asks})" if k.startswith(("server_cpu", "last_", "list_")) else k: v
            for k, v in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10_000, help="episodes of the large run")
    parser.add_argument("--keep", type=Path, help="make the large run in this folder, keep it")
    parser.add_argument("--reuse", type=Path, help="a large run made before")
    parser.add_argument("--rate", type=float, default=500.0,
                        help="episodes a second appended to the growing run (default 500)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = args.reuse or args.keep or Path(tmp) / "big-run"
        if not args.reuse:
            make_run(big, args.n, 256)
        root = Path(tmp) / "results"
        make_folder(big, root)
        load = os.getloadavg()[0]
        view = View(root)
        try:
            figures: dict[str, Any] = {
                "episodes": sum(1 for _ in (big / "episodes.jsonl").open("rb")),
                "episodes_jsonl_mb": round((big / "episodes.jsonl").stat().st_size / 1e6, 1),
                "runs": RUNS + 2, "view_started_s": round(view.started_s, 2),
                "rss_start_mb": round(view.rss_mb())}
            figures.update(asyncio.run(pages(view)))
            figures.update(asyncio.run(browser(view)))
            figures.update(asyncio.run(growth(view, root, big, args.rate, "line")))
            figures.update({k: v for k, v in asyncio.run(growth(
                view, root, big, args.rate, "list")).items() if "(" in k})
            figures.update({"load_before": round(load, 2),
                            "load_after": round(os.getloadavg()[0], 2)})
            print(json.dumps(figures, indent=1), flush=True)
        finally:
            view.stop()


if __name__ == "__main__":
    main()
