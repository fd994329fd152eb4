"""One results folder as ``interplay view`` reads it while a run may still be writing it:
:class:`RunIndex` reads ``episodes.jsonl`` from where it last stopped (never the whole file
again), keeping per episode its table row (:class:`~interplay.report.episodes.TableRow`), its
slim record (what the summary reads) and where its line is, so a page of rows, the summary and
one episode are answered without reading the run again. :func:`run_state` tells a run in
progress from one that stopped.

It reads through the report's own functions (:mod:`interplay.report`), each episode read once
into typed values (:func:`~interplay.run.recorded.read_episode`): a row here is the row of the
static page, an episode's section its section. It writes nothing.
"""

from __future__ import annotations

import gc
import math
import operator
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from interplay._plumbing import codec as _codec
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.report.episodes import TableRow, table_row
from interplay.report.figures import Figures, table_seats
from interplay.report.page import pass_threshold, summary_is_current
from interplay.run.recorded import RecordedEpisode, read_episode
from interplay.run.results import (
    CONFIG_FILE,
    EPISODES_FILE,
    RUNNING_FILE,
    SUMMARY_FILE,
    judged_names,
    pair_of,
    recorded_verifiers,
    slim_record,
    whole_record,
)
from interplay.run.summary import summarize
from interplay.values.plain import as_map, as_seq, as_text

log = get_logger("interplay.view")

#: Bytes read from episodes.jsonl at a time; rows are published after each block, so a large
#: run's page fills as it is read.
BLOCK = 4 << 20
#: Searches of the messages a run keeps the answer of (each extended as episodes land).
SEARCHES_KEPT = 8
#: Longest search text taken: a search reads every message of the run.
SEARCH_CHARS = 200
#: Rows a page of the table holds at most ("all" for the downloads).
PAGE_MAX = 1000
#: While a run writes, its summary and charts are made again at most this often (a 10,000
#: episode run's summary is a fraction of a second of CPU, its charts more); once it stops,
#: at its last episode.
LIVE_FIGURES_S = 2.0


def read_json(path: Path) -> Any:
    """A small JSON file of a run (config, summary, the running mark), or None when it is
    missing, unreadable or not JSON: a reader of a live folder sees files come and go."""
    try:
        with path.open("rb") as fh:
            data = fh.read(8 << 20)
        return _codec.loads(data)
    except (OSError, ValueError):
        return None


def mtime(path: Path) -> float | None:
    """When a file last changed (None when it is not there)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # a process of another user holds the id: taken for the run's
    return True


@attrs.frozen
class State:
    """Where a run stands: ``running`` (its process is writing), ``stopped`` (it was
    writing and its process is gone, or it stopped before its summary), ``interrupted``,
    ``incomplete`` (fewer episodes than it expects) or ``finished``."""

    name: str
    text: str
    #: Episodes the run expects in all (None: not known).
    expected: int | None = None
    started_at: float | None = None


def run_state(folder: Path, summary: Any, episodes: int | None = None) -> State:
    """Where the run in ``folder`` stands, from its running mark and summary.json;
    ``episodes``: whether it holds any (a count, or the episodes file's size)."""
    running = as_map(read_json(folder / RUNNING_FILE))
    expected = running.get("expected") if isinstance(running.get("expected"), int) else None
    if running:
        started = running.get("started_at")
        started = float(started) if isinstance(started, int | float) else None
        host = as_text(running.get("host"))
        if host and host != socket.gethostname():
            return State("running", f"running on {host} (its process cannot be checked from "
                                    f"here)", expected, started)
        if _alive(running.get("pid")):
            return State("running", f"running (process {running.get('pid')})", expected,
                         started)
        return State("stopped", f"stopped: its process ({running.get('pid')}) is gone; "
                                f"continue it with `interplay eval --resume {folder}`",
                     expected, started)
    summary = as_map(summary)
    expected = summary.get("expected") if isinstance(summary.get("expected"), int) else None
    if not summary:
        if episodes:
            return State("stopped", "stopped before its summary; continue it with "
                                    f"`interplay eval --resume {folder}`")
        return State("stopped", "no episode yet")
    if summary.get("interrupted"):
        return State("interrupted", "interrupted; continue it with "
                                    f"`interplay eval --resume {folder}`", expected)
    if summary.get("complete") is False:
        return State("incomplete", "incomplete; continue it with "
                                   f"`interplay eval --resume {folder}`", expected)
    return State("finished", "finished", expected)


@attrs.define
class RowsQuery:
    """A page of the episode table: filters, a sort and a window, as the page's script asks
    for them (``/api/rows``). Values are checked by :func:`rows_query`."""

    task: int | None = None
    rollout: int | None = None
    reward: str = ""
    min: float | None = None
    max: float | None = None
    error: str = ""
    stop: str = ""
    #: A reward component's name, and which of its episodes: ``fail`` (below the pass
    #: threshold), ``pass`` or ``none`` (not scored, or without it).
    component: str = ""
    outcome: str = "fail"
    text: str = ""
    sort: str = "task"
    desc: bool = False
    offset: int = 0
    limit: int = 200


SORTS = ("task", "rollout", "reward", "error", "stops", "turns", "calls", "wall_s")


def _number(name: str, value: str, kind: Callable[[str], Any]) -> Any:
    try:
        out = kind(value)
    except (TypeError, ValueError):
        raise InterplayError(f"{name}: expected a number, got {value[:40]!r}") from None
    if isinstance(out, float) and not math.isfinite(out):
        raise InterplayError(f"{name}: expected a finite number, got {value[:40]!r}")
    return out


def rows_query(params: Mapping[str, str]) -> RowsQuery:
    """A :class:`RowsQuery` from a request's parameters; InterplayError naming the first bad
    one."""
    q = RowsQuery()
    for name in ("task", "rollout", "offset"):
        if params.get(name, "") != "":
            value = _number(name, params[name], int)
            if value < 0:
                raise InterplayError(f"{name}: expected 0 or more, got {value}")
            setattr(q, name, value)
    for name in ("min", "max"):
        if params.get(name, "") != "":
            setattr(q, name, _number(name, params[name], float))
    limit = params.get("limit", "")
    if limit == "all":
        q.limit = -1
    elif limit:
        q.limit = _number("limit", limit, int)
        if not 1 <= q.limit <= PAGE_MAX:
            raise InterplayError(f"limit: expected 1 to {PAGE_MAX} or all, got {q.limit}")
    reward = params.get("reward", "")
    if reward not in ("", "pass", "fail", "none"):
        raise InterplayError(f"reward: expected pass, fail or none, got {reward[:40]!r}")
    q.reward = reward
    q.error, q.stop = params.get("error", ""), params.get("stop", "")
    q.text = params.get("text", "").strip()
    if len(q.text) > SEARCH_CHARS:
        raise InterplayError(f"text: at most {SEARCH_CHARS} characters, got {len(q.text)}")
    q.component = params.get("component", "")
    outcome = params.get("outcome", "") or "fail"
    if outcome not in ("pass", "fail", "none"):
        raise InterplayError(f"outcome: expected pass, fail or none, got {outcome[:40]!r}")
    q.outcome = outcome
    sort = params.get("sort", "task")
    if sort not in SORTS and not (sort.startswith("c:") and len(sort) > 2):
        raise InterplayError(f"sort: expected one of {', '.join(SORTS)} or c:COMPONENT, got "
                             f"{sort[:40]!r}")
    q.sort, q.desc = sort, params.get("desc", "") in ("1", "true")
    return q


def _texts(ep: RecordedEpisode) -> str:
    """The text a search reads of an episode: every message of every seat (its content, its
    tool calls' names and arguments) and the task's prompt, lower-cased."""
    parts: list[str] = []

    def content(value: Any) -> None:
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            for part in value:
                content(as_map(part).get("text") if isinstance(part, Mapping) else part)

    prompt = ep.task.get("prompt")
    if isinstance(prompt, list):
        for m in prompt:
            content(as_map(m).get("content"))
    else:
        content(prompt)
    for trace in ep.traces:
        for m in trace.messages:
            content(m.get("content"))
            for call in map(as_map, as_seq(m.get("tool_calls"))):
                fn = as_map(call.get("function"))
                content(fn.get("name"))
                content(fn.get("arguments"))
    return "\n".join(parts).lower()


class RunIndex:
    """A results folder's episodes as the view answers for them, read as the file grows.

    :meth:`refresh` reads what was appended since the last call (the lines that are whole: a
    line being written waits for its newline), so following a run costs what it writes. A
    later line for a (task, rollout) replaces the earlier one in place, as every reader of a
    results folder does. A file replaced or cut shorter than what was read is read again
    from its start. Lines that are not episode records are counted and skipped, never the
    end of the view. Safe to use from several threads: one refresh at a time, and readers see
    whole blocks of rows."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder = folder
        self.key = key
        self._lock = threading.RLock()
        self._reading = threading.Lock()
        self._reset()
        self._config_ident: tuple[int, int, int, int] | None = None
        self.stored: Mapping[str, Any] = {}
        self.config: Mapping[str, Any] = {}
        self.judged: set[str] = set()
        self.threshold = pass_threshold(self.config)
        self._read_config()
        #: Whether the last refresh read to the end of the file.
        self.caught_up = False

    def _read_config(self) -> bool:
        """Read the run's config.json when it changed since it was last read (``--resume``
        rewrites it when how an endpoint is reached changed); True when it was read again."""
        path = self.folder / CONFIG_FILE
        try:
            st = path.stat()
        except OSError:
            return False
        ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if ident == self._config_ident:
            return False
        stored = as_map(read_json(path))
        if not stored:
            return False  # being written: read at the next refresh
        again = self._config_ident is not None
        with self._lock:
            self._config_ident = ident
            self.stored = stored
            self.config = as_map(stored.get("config"))
            self.judged = judged_names(recorded_verifiers(stored))
            self.threshold = pass_threshold(self.config)
            if again:
                self.version += 1  # the figures are made again, with what it says now
        return again

    def _reset(self) -> None:
        self.rows: list[TableRow] = []
        self.slims: list[dict[str, Any]] = []
        self.seats_of: list[dict[str, float | None]] = []
        #: (offset, length) of each row's line in episodes.jsonl.
        self.spots: list[tuple[int, int]] = []
        self.pairs: dict[tuple[int, int], int] = {}
        self.ids: dict[str, int] = {}
        self.stops: dict[str, int] = {}
        #: The reward components met, in the order first met.
        self.components: dict[str, None] = {}
        self.figures = Figures()
        self._figures_stale = False
        self.offset = 0
        self._ident: tuple[int, int] | None = None
        self.bad_lines = 0
        self.first_bad = ""
        self.version = 0
        self._summary: tuple[int, dict[str, Any], float] | None = None
        self._charts: tuple[int, list[Any], float] | None = None
        self._searches: dict[str, tuple[int, set[int]]] = {}

    # -- reading -----------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self.folder / EPISODES_FILE

    def refresh(self, on_block: Callable[[], None] | None = None) -> bool:
        """Read what episodes.jsonl gained since the last call; True when rows changed.
        ``on_block`` is called after each block read (the view tells its pages then)."""
        with self._reading:
            configured = self._read_config()
            try:
                st = self.path.stat()
            except OSError:
                st = None
            ident = None if st is None else (st.st_dev, st.st_ino)
            size = 0 if st is None else st.st_size
            if ident != self._ident or size < self.offset:
                with self._lock:
                    had = bool(self.rows)
                    self._reset()
                    self._ident = ident
                    if had:
                        self.version += 1
            changed = configured
            if st is not None and size > self.offset:
                changed = self._read(size, on_block) or changed
            # Caught up: every whole line read (what follows is a line being written).
            self.caught_up = self.offset >= size or not self._whole_line_after(self.offset)
            return changed

    def _whole_line_after(self, offset: int) -> bool:
        try:
            with self.path.open("rb") as fh:
                fh.seek(offset)
                return b"\n" in fh.read(BLOCK)
        except OSError:
            return False

    def _read(self, size: int, on_block: Callable[[], None] | None) -> bool:
        changed = False
        try:
            fh = self.path.open("rb")
        except OSError:
            return False
        with fh:
            fh.seek(self.offset)
            while self.offset < size:
                block = fh.read(min(BLOCK, size - self.offset))
                if not block:
                    break
                end = block.rfind(b"\n")
                if end < 0:
                    if len(block) < BLOCK:
                        break  # a line being written: read once it has its newline
                    # One line longer than a block (a line is bounded; a damaged file is not).
                    more = fh.readline()
                    if not more.endswith(b"\n"):
                        break
                    block += more
                    end = len(block) - 1
                lines = block[:end + 1]
                fh.seek(self.offset + len(lines))
                self._add_lines(lines, self.offset)
                self.offset += len(lines)
                changed = True
                if on_block is not None:
                    on_block()
        return changed

    def _add_lines(self, lines: bytes, base: int) -> None:
        # The collector is held off while a block is parsed: each line's parse makes hundreds
        # of containers, freed by their counts, and each collection would walk every row kept.
        collecting = gc.isenabled()
        gc.disable()
        try:
            parsed = self._parse(lines, base)
        finally:
            if collecting:
                gc.enable()
        self._keep(parsed)

    def _parse(self, lines: bytes, base: int) -> list[tuple[int, int, dict[str, Any],
                                                            RecordedEpisode]]:
        parsed = []
        start = 0
        for raw in lines.splitlines(keepends=True):
            at = base + start
            start += len(raw)
            if not raw.strip():
                continue
            try:
                record = _codec.loads(raw)
                slim = slim_record(record)
            except ValueError as exc:
                self._bad(at, f"not an episode record ({str(exc)[:120]})")
                continue
            try:
                whole = whole_record(record, self.folder)
            except InterplayError as exc:
                # Its line is still a record: shown without what its side file held.
                whole = dict(record)
                self._bad(at, exc.message[:200])
            parsed.append((at, len(raw), slim, read_episode(whole)))
        return parsed

    def _keep(self, parsed: list[tuple[int, int, dict[str, Any], RecordedEpisode]]) -> None:
        with self._lock:
            for at, length, slim, ep in parsed:
                pair = pair_of(slim)
                pos = self.pairs.get(pair)
                if pos is None:
                    pos = len(self.rows)
                    self.pairs[pair] = pos
                    row = table_row(pos, ep, (), self.stops)
                    self.rows.append(row)
                    self.slims.append(slim)
                    self.seats_of.append(ep.seat_rewards())
                    self.spots.append((at, length))
                else:
                    # A later line for the pair (an episode run again): the charts are made
                    # again, and searches read the pair again.
                    self._figures_stale = True
                    self._searches.clear()
                    old = self.rows[pos].episode_id
                    if self.ids.get(old) == pos:
                        del self.ids[old]
                    row = self.rows[pos] = table_row(pos, ep, (), self.stops)
                    self.slims[pos] = slim
                    self.seats_of[pos] = ep.seat_rewards()
                    self.spots[pos] = (at, length)
                for name in row.components:
                    self.components.setdefault(name)
                self.ids[row.episode_id] = pos
                if not self._figures_stale:
                    self.figures.add(ep)
            self.version += 1

    def _bad(self, offset: int, why: str) -> None:
        self.bad_lines += 1
        if not self.first_bad:
            self.first_bad = f"the line at byte {offset}: {why}"
        log.warning("view.line_skipped", output_path=str(self.folder), offset=offset)

    # -- answering ---------------------------------------------------------------------------

    def record(self, pos: int) -> dict[str, Any]:
        """The whole record of the episode in row ``pos`` (its line read again, and its side
        file)."""
        with self._lock:
            at, length = self.spots[pos]
        try:
            with self.path.open("rb") as fh:
                fh.seek(at)
                record = _codec.loads(fh.read(length))
        except (OSError, ValueError) as exc:
            raise InterplayError(f"the episode's line cannot be read again ({exc}); the "
                                 f"results file changed: reload the page") from None
        try:
            return whole_record(record, self.folder)
        except InterplayError:
            return dict(record)  # its side file is counted among the lines not read

    def episode(self, pos: int) -> RecordedEpisode:
        """The episode in row ``pos``, read from its whole record (:meth:`record`)."""
        return read_episode(self.record(pos))

    def position(self, *, index: int | None = None, episode_id: str | None = None) -> int:
        with self._lock:
            if index is not None and 0 <= index < len(self.rows):
                return index
            if episode_id is not None and episode_id in self.ids:
                return self.ids[episode_id]
        raise LookupError("no such episode in this run")

    def seats(self) -> list[str]:
        return table_seats(self.summary())

    def summary(self) -> dict[str, Any]:
        """The run's figures: its summary.json when that holds every episode read and the run
        is not writing, else made from the episodes read so far (while it writes, at most
        every :data:`LIVE_FIGURES_S`)."""
        with self._lock:
            kept = self._summary
            if kept is not None and kept[0] == self.version:
                return kept[1]
        stored = read_json(self.folder / SUMMARY_FILE)
        with self._lock:
            count = len(self.slims)
            state = run_state(self.folder, stored, count)
            kept = self._summary
            if kept is not None and (kept[0] == self.version or (
                    state.name == "running" and time.monotonic() - kept[2] < LIVE_FIGURES_S)):
                return kept[1]
            version, slims = self.version, list(self.slims)
        if state.name != "running" and summary_is_current(stored, len(slims)):
            summary = dict(stored)
        else:
            summary = summarize(slims, pass_threshold=self.threshold,
                                expected=state.expected or _expected(self.config),
                                judged=self.judged)
        with self._lock:
            if self.version == version or state.name == "running":
                self._summary = (version, summary, time.monotonic())
        return summary

    def charts(self, summary: Mapping[str, Any], *, draw: bool = True) -> list[Any] | None:
        """The run's charts (SVG), drawn again only when the episodes read changed (and while
        the run writes, at most every :data:`LIVE_FIGURES_S`); without ``draw``, those drawn
        before if they still hold, else None."""
        with self._lock:
            kept = self._charts
            if kept is not None and (kept[0] == self.version or (
                    self.caught_up and time.monotonic() - kept[2] < LIVE_FIGURES_S
                    and run_state(self.folder, None).name == "running")):
                return kept[1]
            if not draw:
                return None
            version = self.version
        figures = self.current_figures()
        drawn = figures.draw(summary)
        with self._lock:
            self._charts = (version, drawn, time.monotonic())
        return drawn

    def current_figures(self) -> Figures:
        """The charts' figures of the episodes read (made again after a line replaced
        another)."""
        with self._lock:
            if not self._figures_stale:
                return self.figures
            positions = range(len(self.rows))
        figures = Figures()
        for pos in positions:
            try:
                figures.add(self.episode(pos))
            except InterplayError:
                continue
        with self._lock:
            self.figures, self._figures_stale = figures, False
        return figures

    def errors(self) -> list[str]:
        with self._lock:
            return sorted({r.error_type for r in self.rows if r.error_type})

    def component_names(self) -> list[str]:
        with self._lock:
            return list(self.components)

    def stop_names(self) -> list[str]:
        with self._lock:
            return list(self.stops)

    def rows_page(self, q: RowsQuery) -> dict[str, Any]:
        """A page of the table for ``q``: the rows (:class:`TableRow`, as the static page holds
        them, with the seats' columns of the run's summary), how many match, how many there
        are, whether that is the whole of the episodes file (``complete``: false while a large
        run is still being read, its counts so far), and the names the rows' indices stand
        for."""
        seats = self.seats()
        with self._lock:
            complete = self.caught_up
            rows = list(self.rows)
            seats_of = list(self.seats_of)
            stops = list(self.stops)
            components = list(self.components)
        found = self._search(q.text) if q.text else None
        t = self.threshold

        def keep(row: TableRow) -> bool:
            reward, error = row.reward, row.error_type
            if found is not None and row.index not in found:
                return False
            if q.task is not None and row.task != q.task:
                return False
            if q.rollout is not None and row.rollout != q.rollout:
                return False
            if q.reward == "pass" and not (reward is not None and reward >= t):
                return False
            if q.reward == "fail" and not (reward is not None and reward < t):
                return False
            if q.reward == "none" and reward is not None:
                return False
            if q.min is not None and not (reward is not None and reward >= q.min):
                return False
            if q.max is not None and not (reward is not None and reward <= q.max):
                return False
            if q.error == "__none" and error:
                return False
            if q.error == "__any" and not error:
                return False
            if q.error not in ("", "__none", "__any") and error != q.error:
                return False
            if q.component:
                value = row.components.get(q.component)
                if q.outcome == "none" and value is not None:
                    return False
                if q.outcome == "pass" and not (value is not None and value >= t):
                    return False
                if q.outcome == "fail" and not (value is not None and value < t):
                    return False
            return not q.stop or q.stop in [stops[i] for i in row.stops]

        matched = [r for r in rows if keep(r)]
        key = _sort_key(q.sort, stops)
        present = [r for r in matched if key(r) is not None]
        absent = [r for r in matched if key(r) is None]
        present.sort(key=lambda r: (key(r), r.task, r.rollout), reverse=q.desc)
        absent.sort(key=lambda r: (r.task, r.rollout))
        ordered = present + absent
        window = ordered[q.offset:] if q.limit < 0 else ordered[q.offset:q.offset + q.limit]
        out = []
        for row in window:
            by_seat = seats_of[row.index]
            out.append(row._replace(seat_rewards=[by_seat.get(s) for s in seats]))
        return {"total": len(rows), "matched": len(matched), "complete": complete,
                "offset": q.offset,
                "rows": out, "stops": stops, "seats": seats, "components": components,
                "errors": sorted({r.error_type for r in rows if r.error_type})}

    def _search(self, text: str) -> set[int]:
        """The rows whose messages hold ``text`` (case aside). Each search's answer is kept and
        extended with the episodes read since, so typing on, or a run growing, reads only
        what it has not."""
        needle = text.lower()
        with self._lock:
            scanned, found = self._searches.pop(needle, (0, set()))
            count = len(self.rows)
            spots = self.spots[scanned:count]
        # A line holds JSON: text with a quote, a backslash or a control character is escaped
        # there, and a line written in ASCII escapes the rest; those are read whole.
        plain = not any(c in needle for c in '"\\') and all(ord(c) >= 0x20 for c in needle)
        ascii_needle = needle.isascii()
        try:
            fh = self.path.open("rb")
        except OSError:
            return found
        with fh:
            for pos, (at, length) in enumerate(spots, start=scanned):
                fh.seek(at)
                raw = fh.read(length)
                record = None
                if plain:
                    hay = raw.decode("utf-8", "replace").lower()
                    side = b'"side":' in raw
                    if needle not in hay and not side and (ascii_needle or b"\\u" not in raw):
                        continue
                try:
                    record = whole_record(_codec.loads(raw), self.folder)
                except (ValueError, InterplayError):
                    continue
                if needle in _texts(read_episode(record)):
                    found.add(pos)
        with self._lock:
            self._searches[needle] = (count, found)
            while len(self._searches) > SEARCHES_KEPT:
                self._searches.pop(next(iter(self._searches)))
        return found


def _sort_key(name: str, stops: Sequence[str]) -> Callable[[TableRow], Any]:
    if name in ("task", "rollout", "reward", "turns", "calls", "wall_s"):
        return operator.attrgetter(name)
    if name == "error":
        return lambda r: r.error_type or None
    if name.startswith("c:"):
        component = name[2:]
        return lambda r: r.components.get(component)
    return lambda r: ", ".join(stops[i] for i in r.stops) or None


def _expected(config: Mapping[str, Any]) -> int | None:
    """The episodes a run's config asks for, when it names its tasks' count (-n)."""
    n, rollouts = config.get("n"), config.get("rollouts", 1)
    if isinstance(n, int) and isinstance(rollouts, int) and n >= 0 and rollouts >= 1:
        return n * rollouts
    return None

