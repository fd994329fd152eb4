"""The folder ``interplay view`` serves: the runs under it (:class:`RunsFolder`, found by their
``config.json`` or ``episodes.jsonl``), each one's line in the list of runs (:func:`card`),
what tells the pages that something changed (:class:`Hub`) and what notices it
(:func:`watch`: file events from watchfiles, and a look at each running run's process).

Nothing here builds a path from a request: a run is named by its key (its folder relative to
the root), looked up among the runs found, and every folder found is under the root once
links are resolved. It writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from interplay.log import get_logger
from interplay.report.label import LABEL_FILE, read_label
from interplay.run.config import RESUME_IGNORED, flatten, without_credentials
from interplay.run.results import CONFIG_FILE, EPISODES_FILE, RUNNING_FILE, SIDE_DIR, SUMMARY_FILE
from interplay.values.plain import as_map, as_text
from interplay.view.runs import RunIndex, State, mtime, read_json, run_state

log = get_logger("interplay.view")

#: Folders looked into at most when finding runs (a root named by mistake, a home folder,
#: stops there and says so).
MAX_FOLDERS = 20_000
#: How deep under the root runs are looked for.
MAX_DEPTH = 8
#: Folders never looked into: a run's side files, version control, environments, caches.
SKIPPED = frozenset({SIDE_DIR, ".git", ".hg", ".venv", "venv", "node_modules", "__pycache__",
                     "site-packages", ".mypy_cache", ".ruff_cache", ".pytest_cache"})
#: Seconds a page waits for a run's first reading before it is shown with what is read.
FIRST_READ_S = 0.5
#: The files whose change is a run's change.
RUN_FILES = frozenset({CONFIG_FILE, EPISODES_FILE, SUMMARY_FILE, RUNNING_FILE, LABEL_FILE})


@attrs.define(eq=False)
class Run:
    """A run found under the root: its key, its folder, and its index once read."""

    key: str
    folder: Path
    index: RunIndex | None = None
    #: When a page last asked for it (indices not asked for a while are let go).
    used_at: float = 0.0
    #: Whether a refresh of its index is under way, and whether another is wanted after it.
    busy: bool = False
    again: bool = False


class RunsFolder:
    """The runs under ``root`` (itself included, when it is a run)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.runs: dict[str, Run] = {}
        self.truncated = False
        self._lock = threading.Lock()
        #: The runs whose index is being read in the background, and those readings.
        self.reading: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        #: The folders the last scan looked into (the runs' among them): what is watched,
        #: each on its own, so that no link out of the root is followed.
        self.watched: list[Path] = []
        #: Called (from any thread) with a run's key as its index reads a block.
        self.on_read: Callable[[str], None] = lambda key: None

    def scan(self) -> bool:
        """Find the runs under the root again; True when the set of runs changed."""
        found: dict[str, Path] = {}
        seen = 0
        truncated = False
        looked: list[Path] = []
        stack: list[tuple[Path, int]] = [(self.root, 0)]
        while stack:
            folder, depth = stack.pop()
            seen += 1
            if seen > MAX_FOLDERS:
                truncated = True
                break
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            looked.append(folder)
            names = {e.name for e in entries}
            if CONFIG_FILE in names or EPISODES_FILE in names:
                # A run: its own folders (side files, anything beside) are not other runs.
                found[self._key(folder)] = folder
                continue
            if depth >= MAX_DEPTH:
                continue
            for entry in entries:
                if entry.name in SKIPPED or entry.name.startswith("."):
                    continue
                try:
                    # Links are not followed: every run found is under the root.
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((Path(entry.path), depth + 1))
                except OSError:
                    continue
        with self._lock:
            before = set(self.runs)
            for key in before - set(found):
                del self.runs[key]
            for key, folder in found.items():
                if key not in self.runs:
                    self.runs[key] = Run(key, folder)
            self.truncated = truncated
            self.watched = sorted(looked)
            return before != set(found)

    def _key(self, folder: Path) -> str:
        rel = folder.relative_to(self.root).as_posix()
        return "." if rel in ("", ".") else rel

    def get(self, key: str) -> Run:
        """The run named ``key``; LookupError when no run found has it."""
        with self._lock:
            run = self.runs.get(key)
        if run is None:
            raise LookupError(f"no run {key[:200]!r} under {self.root}")
        run.used_at = time.monotonic()
        return run

    def all(self) -> list[Run]:
        with self._lock:
            return list(self.runs.values())

    def key_of(self, path: str | Path) -> str | None:
        """The key of the run a changed file belongs to (None: no run's)."""
        p = Path(path)
        with self._lock:
            for parent in (p.parent, p.parent.parent, p):
                try:
                    key = self._key(parent)
                except ValueError:
                    continue
                if key in self.runs:
                    return key
        return None

    def index(self, key: str, wait_s: float = FIRST_READ_S) -> RunIndex:
        """The run's index, made on first use: its file is read in a thread of its own, and
        the index handed back once that has read to the end or for ``wait_s`` seconds,
        whichever comes first (a large run's page shows its first episodes while the rest
        are read; ``on_read`` tells the pages as each block lands)."""
        run = self.get(key)
        with self._lock:
            made = run.index is None
            if made:
                run.index = RunIndex(run.folder, key)
            index = run.index
        assert index is not None
        if made:
            done = threading.Event()

            def read() -> None:
                try:
                    index.refresh(lambda: self.on_read(key))
                finally:
                    done.set()
                    self.on_read(key)

            threading.Thread(target=read, name="interplay-view-read", daemon=True).start()
            done.wait(wait_s)
        return index

    def let_go(self, idle_s: float) -> int:
        """Drop the indices of runs not asked for in ``idle_s`` seconds that are not running;
        how many."""
        now = time.monotonic()
        dropped = 0
        for run in self.all():
            if run.index is not None and not run.busy and now - run.used_at > idle_s \
                    and run_state(run.folder, read_json(run.folder / SUMMARY_FILE)).name \
                    != "running":
                run.index = None
                dropped += 1
        return dropped


# -- a run's line in the list -------------------------------------------------------------------


_SECRET = re.compile(r"(api_?key|secret|password|passwd|authorization|bearer|(^|_)token$)",
                     re.IGNORECASE)


def masked(config: Any) -> Any:
    """``config`` as the view shows it: masked as config.json keeps it
    (:func:`~interplay.run.config.without_credentials`: a URL's credentials, an endpoint's
    header values), whoever wrote it (an older interplay, a hand), and beyond that every
    header's value and every text under a key that names a secret replaced by ``***``."""
    return _masked(without_credentials(config))


def _masked(config: Any) -> Any:
    if isinstance(config, Mapping):
        out = {}
        for k, v in config.items():
            key = str(k)
            if key == "headers" and isinstance(v, Mapping):
                out[key] = {h: "***" for h in v}
            elif isinstance(v, str) and _SECRET.search(key) and not key.endswith("_var"):
                out[key] = "***"
            else:
                out[key] = _masked(v)
        return out
    if isinstance(config, list):
        return [_masked(v) for v in config]
    return config


def _interval(summary: Mapping[str, Any]) -> list[float] | None:
    mean, se = summary.get("reward_mean"), summary.get("reward_stderr")
    if isinstance(mean, int | float) and isinstance(se, int | float):
        return [mean - 1.96 * se, mean + 1.96 * se]
    return None


def card(run: Run) -> dict[str, Any]:
    """A run's line in the list: what it is, how far it is, how it scores. From its
    summary.json while that is current (written after the last episode, the run not
    writing), else from its index (``reading``: not read yet)."""
    folder = run.folder
    stored = as_map(read_json(folder / CONFIG_FILE))
    config = as_map(masked(stored.get("config")))
    model = as_map(config.get("model"))
    summary = read_json(folder / SUMMARY_FILE)
    episodes_at, summary_at = mtime(folder / EPISODES_FILE), mtime(folder / SUMMARY_FILE)
    index = run.index
    try:
        written = (folder / EPISODES_FILE).stat().st_size
    except OSError:
        written = 0
    state = run_state(folder, summary, len(index.rows) if index is not None else written)
    current = (state.name != "running" and isinstance(summary, Mapping)
               and summary_at is not None and (episodes_at is None or summary_at >= episodes_at))
    # Being read: its index not made yet (its line waits for it), or still reading.
    reading = (index is None and not current) or (index is not None and not index.caught_up)
    if index is not None and (not current or index.caught_up):
        summary = index.summary()
    elif not current:
        summary = {}
    summary = as_map(summary)
    started = state.started_at or mtime(folder / CONFIG_FILE)
    return {
        "key": run.key, "label": read_label(folder),
        "env": as_text(as_map(config.get("env")).get("name")),
        "model": as_text(model.get("model")) or ("embedded" if not model.get("base_url")
                                                 and config else ""),
        "where": as_text(model.get("base_url")) or ("embedded local model" if config else ""),
        "state": state.name, "state_text": state.text, "reading": reading,
        "episodes": len(index.rows) if index is not None else summary.get("episodes"),
        "expected": state.expected or summary.get("expected"),
        "completed": summary.get("completed"), "scored": summary.get("scored"),
        "reward_mean": summary.get("reward_mean"), "reward_stderr": summary.get("reward_stderr"),
        "reward_interval": _interval(summary),
        "seat_rewards": summary.get("seat_rewards") or {},
        "pass_at_k": summary.get("pass_at_k") or {}, "pass_hat_k": summary.get("pass_hat_k") or {},
        "error_episodes": summary.get("error_episodes"), "errors": summary.get("errors") or {},
        "started_at": started,
        "ended_at": None if state.name == "running" else summary_at or episodes_at,
        "regraded_from": as_text(as_map(stored.get("regrade")).get("from")),
        "bad_lines": index.bad_lines if index is not None else 0,
        "settings": _settings(config),
    }


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's settings (its config as :func:`masked` shows it) as dotted keys, without
    where it wrote and how fast it ran."""
    flat = flatten(config)
    return {k: v for k, v in flat.items() if k.split(".")[0] not in RESUME_IGNORED
            and k not in ("env.name", "output") and not isinstance(v, dict | list)}


def differing(cards: Iterable[dict[str, Any]]) -> None:
    """Keep on each card only the settings that differ between runs of its env (what sets
    one run apart from the others in the list)."""
    by_env: dict[str, list[dict[str, Any]]] = {}
    for c in cards:
        by_env.setdefault(c["env"], []).append(c)
    for group in by_env.values():
        keys = set().union(*(c["settings"] for c in group))
        differ = sorted(k for k in keys if len({repr(c["settings"].get(k)) for c in group}) > 1)
        for c in group:
            c["settings"] = {k: c["settings"].get(k) for k in differ}


# -- telling the pages ---------------------------------------------------------------------------


class Hub:
    """The live pages' subscriptions (Server-Sent Events): each page holds a queue of what
    changed (the list of runs, or one run), bounded; a page that falls behind is told to
    read everything again."""

    QUEUE = 256

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self.queues: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def subscribe(self) -> asyncio.Queue[dict[str, Any] | None] | None:
        """A new page's queue, or None when ``limit`` pages are open already."""
        if len(self.queues) >= self.limit or self.closed:
            return None
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(self.QUEUE)
        self.queues.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        self.queues.discard(queue)

    def publish(self, event: dict[str, Any]) -> None:
        """Tell every page (from the server's loop, or from a thread)."""
        loop = self.loop
        if loop is not None and not _in_loop(loop):
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody to tell
                loop.call_soon_threadsafe(self.publish, event)
            return
        for queue in list(self.queues):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                queue.get_nowait()
                queue.put_nowait({"kind": "all"})

    def close(self) -> None:
        """End every page's stream (the server is stopping)."""
        self.closed = True
        for queue in list(self.queues):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def refresh(folder: RunsFolder, hub: Hub, key: str, *, tell: bool = True) -> None:
    """Read what a run's episodes file gained and tell the pages (with ``tell``, even when
    it gained nothing: another of its files changed). A change of one run is told as that
    run's (the list asks for its line alone); the list of runs as a whole is told only when
    runs come or go, or a run's config changes (which settings differ between runs). One
    refresh of a run at a time; asked again meanwhile, it runs once more after."""
    try:
        run = folder.get(key)
    except LookupError:
        return
    if run.busy:
        run.again = True
        return
    run.busy = True
    try:
        while True:
            run.again = False
            index = run.index
            changed = False
            if index is not None:
                changed = await asyncio.to_thread(index.refresh,
                                                  lambda: hub.publish(_changed(run)))
            if changed or tell:
                hub.publish(_changed(run))
            if not run.again:
                break
            tell = True
    finally:
        run.busy = False


def _changed(run: Run) -> dict[str, Any]:
    index = run.index
    return {"kind": "run", "run": run.key,
            "episodes": len(index.rows) if index is not None else None,
            "version": index.version if index is not None else 0}


async def watch(folder: RunsFolder, hub: Hub, stop: asyncio.Event, *, poll_s: float | None = None,
                check_s: float = 2.0) -> None:
    """Follow the folder until ``stop``: file events (watchfiles: inotify, or polling every
    ``poll_s`` seconds where events do not reach, a network filesystem) refresh the runs
    they touch; new folders are looked into; every ``check_s`` seconds each run that says
    it is running is looked at (its process may be gone without a file changing)."""
    checker = asyncio.create_task(_check(folder, hub, stop, check_s))
    try:
        await _follow(folder, hub, stop, poll_s)
    finally:
        checker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await checker


async def _follow(folder: RunsFolder, hub: Hub, stop: asyncio.Event, poll_s: float | None) -> None:
    import watchfiles

    polling = poll_s is not None
    failures = 0
    while not stop.is_set():
        # Each folder the scan looked into, on its own (not recursively: a recursive watch
        # follows links, out of the root); a scan that finds other folders starts again.
        watched = list(folder.watched) or [folder.root]
        try:
            async for changes in watchfiles.awatch(
                    *watched, stop_event=stop, recursive=False, debounce=400, step=50,
                    force_polling=polling, poll_delay_ms=int((poll_s or 1.0) * 1000),
                    ignore_permission_denied=True):
                failures = 0
                try:
                    await _changes(folder, hub, [path for _, path in changes])
                except Exception as exc:  # one batch's failure must not end the following
                    log.warning("view.changes_failed", exception_type=type(exc).__name__)
                if folder.watched != watched:
                    break
        except Exception as exc:
            # A folder gone between the scan and the watch, too many folders for the
            # system's watches (inotify's limit): looked at again; failing again and again,
            # by looking every second.
            failures += 1
            log.warning("view.watch_failed", exception_type=type(exc).__name__,
                        failures=failures)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            await asyncio.to_thread(folder.scan)
            if failures >= 3 and not polling:
                polling, poll_s = True, poll_s or 1.0


async def _changes(folder: RunsFolder, hub: Hub, paths: list[str]) -> None:
    keys: set[str] = set()
    rescan = configured = False
    for path in paths:
        name = os.path.basename(path)
        if not Path(path).is_relative_to(folder.root):
            continue
        key = folder.key_of(path)
        if key is not None and name in RUN_FILES:
            keys.add(key)
            configured = configured or name == CONFIG_FILE
        elif name in RUN_FILES or key is None:
            rescan = True  # a new run, a folder made or removed
    if (rescan and await asyncio.to_thread(folder.scan)) or configured:
        hub.publish({"kind": "runs"})
    for key in keys:
        await refresh(folder, hub, key)


async def _check(folder: RunsFolder, hub: Hub, stop: asyncio.Event, every_s: float) -> None:
    marked: dict[str, str] = {}  # the runs with a running mark, by their state
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
        try:
            await _look(folder, hub, marked)
        except Exception as exc:  # a look that fails is tried again at the next
            log.warning("view.check_failed", exception_type=type(exc).__name__)


async def _look(folder: RunsFolder, hub: Hub, marked: dict[str, str]) -> None:
    """Look at each run with a running mark: tell the pages when its state changed, read
    what it wrote; let go of the indices not asked for in ten minutes."""
    for run in folder.all():
        if run.key not in marked and not (run.folder / RUNNING_FILE).exists():
            continue
        state: State = await asyncio.to_thread(
            run_state, run.folder, read_json(run.folder / SUMMARY_FILE))
        before = marked.pop(run.key, None)
        if (run.folder / RUNNING_FILE).exists():
            marked[run.key] = state.name
        if before is not None and before != state.name:
            await refresh(folder, hub, run.key)  # its process is gone: say so
        elif state.name == "running" and run.index is not None:
            # Events can be missed (a network folder): a look costs a stat.
            await refresh(folder, hub, run.key, tell=False)
    folder.let_go(600.0)
