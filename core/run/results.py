"""The results folder: ``config.json``, ``episodes.jsonl`` (appended and fsync'd as each
episode finishes), ``episodes/`` (the side files of long episodes) and ``summary.json``;
making a new folder or checking one to resume, and reading its episode records back. Nothing
here runs an episode or computes the summary.

An episode's line stays small whatever its length: one whose line would pass
:data:`LINE_BOUND` keeps its bulk (its traces' messages, model calls and tool runs, its
judges' calls, and the long values of the env's results: an always_on timeline, the agent's
private notes, tool arguments) in a side file, ``episodes/<episode_id>.json``, written and
fsync'd before its line, which names it (``side``). :func:`whole_record` puts a record back
together; every reader that needs more than the summary's figures goes through it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Literal

from interplay import _codec
from interplay import config as config_mod
from interplay.env import Env
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.records import Episode, converter, spliced, to_json_bytes
from interplay.run.config import (
    RunConfig,
    config_differences,
    masked_credentials,
    resolve,
    without_credentials,
)
from interplay.run.executor import executor_for

log = get_logger("interplay.run")

CONFIG_FILE = "config.json"
EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"
#: The folder of the side files, beside episodes.jsonl.
SIDE_DIR = "episodes"
#: An episode whose line would be longer than this keeps its bulk in a side file.
LINE_BOUND = 64 * 1024
#: In a split episode, a value of the env's results (or of one of its tables) longer than
#: this as JSON goes to the side file; shorter ones (counts, the end reason) stay on the line.
RESULT_KEPT = 2 * 1024
#: What a split episode's traces keep in the side file (the line keeps their usage).
TRACE_BULK = ("messages", "model_calls", "tool_runs")


class EpisodeLog:
    """``episodes.jsonl``: one JSON line per finished episode.

    Each line is written unbuffered the moment its episode finishes, so it is in the kernel
    at once and a crash, Ctrl-C or SIGKILL of the process loses no finished episode. fsync (for
    an OS crash or power loss) runs in a thread, coalescing lines that finish meanwhile, so
    the event loop never waits for the disk; closing waits for the last one.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None
        self._dirty = False
        self._syncing: asyncio.Task[None] | None = None

    def open(self) -> None:
        try:
            self._fh = self.path.open("ab", buffering=0)
        except OSError as exc:
            raise InterplayError(f"{self.path}: cannot append to it "
                                 f"({exc.strerror or type(exc).__name__})") from None

    def append_episode(self, episode: Episode) -> None:
        """Append a finished episode: its line, and first its side file when its whole line
        would be too long (:func:`episode_parts`)."""
        line, side = episode_parts(episode)
        self.append(line, side, episode_id=episode.info.episode_id)

    def append(self, line: bytes, side: bytes | None = None, *, episode_id: str = "") -> None:
        """Append an episode's line made elsewhere (:func:`episode_parts`, in a worker): its
        side file, if it has one, is written and made durable first, since the line names it."""
        if side is not None:
            write_side(self.path.parent, episode_id, side)
        self.append_line(line)

    def append_line(self, data: bytes) -> None:
        """Append one episode's JSON line (without its newline)."""
        line = memoryview(data + b"\n")
        try:
            while line:
                # A raw file may take fewer bytes than given (a full disk, a signal).
                line = line[self._fh.write(line) or 0:]
        except OSError as exc:
            # What was cut short has no newline: a resume takes it for the torn line it is.
            raise InterplayError(
                f"{self.path}: cannot write the next episode ({exc.strerror or exc}); the "
                f"episodes before it are kept: make room, then continue with "
                f"--resume {self.path.parent}") from None
        self._dirty = True
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.get_running_loop().create_task(self._sync())

    async def _sync(self) -> None:
        while self._dirty:
            self._dirty = False
            await asyncio.to_thread(os.fsync, self._fh.fileno())

    async def aclose(self) -> None:
        if self._fh is None:
            return
        if self._syncing is not None:
            # Shielded: a Ctrl-C must not close the file under a running fsync.
            await asyncio.shield(asyncio.gather(self._syncing, return_exceptions=True))
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None


def episode_line(episode: Episode) -> bytes:
    """The episode's line in episodes.jsonl (without the newline)."""
    try:
        return to_json_bytes(episode)
    except (TypeError, ValueError):
        # Something JSON cannot hold (an env's own object in its results: kept as its repr),
        # or text UTF-8 cannot (a lone surrogate, which a JSON escape from a model or a
        # taskset can carry): escaped to ASCII, the line reads back as it was.
        return json.dumps(converter().unstructure(episode), ensure_ascii=True,
                          separators=(",", ":"), default=repr).encode()


def episode_parts(episode: Episode) -> tuple[bytes, bytes | None]:
    """The episode's line in episodes.jsonl and, when its whole line would pass
    :data:`LINE_BOUND`, its side file's content (the line then names the side file and keeps
    the rest: :func:`split_record`). Made from the episode as it is, without parsing its JSON
    back (a month's line is 72 MB)."""
    data = spliced(episode)
    try:
        line = _codec.dumps(data)
    except (TypeError, ValueError):
        return episode_line(episode), None  # what orjson refuses: whole, the plain way
    if len(line) <= LINE_BOUND:
        return line, None
    kept, side = split_record(data, side_ref(episode.info.episode_id))
    return _codec.dumps(kept), _codec.dumps(side)


def side_ref(episode_id: str) -> str:
    """Where an episode's side file is, from the results folder."""
    return f"{SIDE_DIR}/{episode_id}.json"


def write_side(folder: Path, episode_id: str, side: bytes) -> None:
    """Write an episode's side file and fsync it (and its folder), before its line is
    appended: a line never names a side file that is not there (a crash between the two leaves
    a side file no line names, which nothing reads)."""
    path = folder / side_ref(episode_id)
    tmp = path.with_suffix(".json.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        with tmp.open("wb") as fh:
            fh.write(side)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        raise InterplayError(
            f"{path}: cannot write the next episode's side file ({exc.strerror or exc}); the "
            f"episodes before it are kept: make room, then continue with --resume "
            f"{folder}") from None


def _fsync_dir(path: Path) -> None:
    """Make a file's new name in ``path`` durable (where the platform allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def split_record(record: Mapping[str, Any], ref: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An episode record as its line (what the summary, a resume and a listing read: the
    scores, errors, metrics, stop conditions, each trace's usage, the short values of the
    env's results) and its side part (the rest), the line naming the side file ``ref``."""
    line = dict(record)
    side: dict[str, Any] = {"episode_id": record["info"]["episode_id"], "traces": [],
                            "results": {}, "results_whole": {}}
    traces = []
    for trace in record.get("traces") or ():
        if not isinstance(trace, dict):
            traces.append(trace)
            side["traces"].append({})
            continue
        kept = {k: v for k, v in trace.items() if k not in TRACE_BULK}
        kept["usage"] = dict(record_usage({"traces": [trace]}))
        traces.append(kept)
        side["traces"].append({k: trace[k] for k in TRACE_BULK if k in trace})
    line["traces"] = traces
    if record.get("judge_calls"):
        line["judge_usage"] = dict(record_usage({"judge_calls": record["judge_calls"]}))
        side["judge_calls"] = record["judge_calls"]
        line.pop("judge_calls")
    results: dict[str, Any] = {}
    for key, value in (record.get("results") or {}).items():
        if isinstance(value, dict):
            kept, moved = {}, {}
            for k, v in value.items():
                (moved if len(_codec.dumps(v)) > RESULT_KEPT else kept)[k] = v
            if moved:
                kept["side_file"] = ref
                side["results"][key] = moved
            results[key] = kept
        elif len(_codec.dumps(value)) > RESULT_KEPT:
            side["results_whole"][key] = value
        else:
            results[key] = value
    line["results"] = results
    line["side"] = {"file": ref, "traces": list(TRACE_BULK),
                    "results": {k: sorted(v) for k, v in side["results"].items()},
                    "results_whole": sorted(side["results_whole"])}
    return line, side


def whole_record(record: Mapping[str, Any], where: str | os.PathLike[str]) -> dict[str, Any]:
    """An episode record as it was before its line was split: the record itself when its line
    was whole, else the line with its side file (named by the line's ``side``) put back.
    ``where`` is the results folder or its ``episodes.jsonl``. What regrade, export, the report
    and a replay read: an episode's transcripts and its long records are only whole here."""
    side_ref = record.get("side")
    if not isinstance(side_ref, Mapping):
        return dict(record)
    folder = Path(where)
    if folder.is_file() or folder.suffix == ".jsonl":
        folder = folder.parent
    path = folder / str(side_ref.get("file"))
    try:
        side = _codec.loads(path.read_bytes())
    except FileNotFoundError:
        raise InterplayError(f"{path}: the side file of episode "
                             f"{record.get('info', {}).get('episode_id')} is missing; copy a "
                             f"results folder with its {SIDE_DIR}/ folder") from None
    except (OSError, ValueError) as exc:
        raise InterplayError(f"{path}: cannot read the side file of an episode "
                             f"({getattr(exc, 'strerror', None) or exc})") from None
    whole = {k: v for k, v in record.items() if k not in ("side", "judge_usage")}
    traces = []
    for trace, bulk in zip(record.get("traces") or (), side.get("traces") or (), strict=False):
        if isinstance(trace, dict) and isinstance(bulk, dict) and bulk:
            trace = {k: v for k, v in trace.items() if k != "usage"}
            trace.update(bulk)
        traces.append(trace)
    whole["traces"] = traces
    if "judge_calls" in side:
        whole["judge_calls"] = side["judge_calls"]
    results = {}
    for key, value in (record.get("results") or {}).items():
        if isinstance(value, dict) and key in side.get("results", {}):
            value = {k: v for k, v in value.items() if k != "side_file"}
            value.update(side["results"][key])
        results[key] = value
    results.update(side.get("results_whole") or {})
    whole["results"] = results
    return whole


def read_episodes(path: Path, *, repair: bool = False,
                  slim: bool = False) -> list[dict[str, Any]]:
    """The episodes in a results file, as dicts (``slim``: only what the summary needs, so a
    large file never sits in memory whole), one per (task, rollout): a later line supersedes
    an earlier one (an episode run again with ``--retry-errors``). Read line by line.

    Every line must be an episode record whose fields the run reads have the types an episode
    line holds; any other line is refused with its number, since a results file that something
    else wrote to must not be half-read or cut. The one line let go is a torn last line: a
    write cut short by a kill, told by the newline it lacks (each line is written with its
    newline last). It is skipped, and with ``repair`` cut off the file so appends start on a
    clean line."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for _, record, checked in _lines(path, repair=repair):
        info = checked["info"]
        out[(info["task_idx"], info["rollout"])] = checked if slim else record
    return list(out.values())


def iter_episodes(path: Path, *, slim: bool = False,
                  order: Literal["file", "pair"] = "file") -> Iterator[dict[str, Any]]:
    """The episodes of :func:`read_episodes`, streamed: each record is yielded as it is read
    and dropped after, so what a reader of any size of results file keeps is one record and
    an offset per (task, rollout). Records come in file order (the order episodes finished),
    or with ``order="pair"`` by (task, rollout); one per (task, rollout), the latest line for
    each; a torn last line is skipped, never repaired.

    The file is read twice: once to find each pair's latest line, once to yield those. The
    first reading takes a line's pair from its head when the line begins as
    :func:`episode_line` writes it (the info object first), and parses and checks any other
    line whole, so a line that is not an episode record is refused before anything is
    yielded; the second parses and checks the lines it yields (and those superseded), so
    every line is checked as :func:`read_episodes` checks it and parsed once, not twice. A
    line that begins as an episode line and breaks further on is refused when it is reached.
    """
    # (offset, line number, whether it was checked whole) of each pair's latest line.
    latest: dict[tuple[int, int], tuple[int, int, bool]] = {}
    unchecked: dict[int, int] = {}  # superseded lines read by their head only: offset: number
    for number, start, raw in _raw_lines(path):
        head = _HEAD.match(raw) if raw.endswith(b"\n") else None
        if head is not None:
            pair, whole = (int(head[1]), int(head[2])), False
        else:
            found = _checked(path, number, start, raw)
            if found is None:  # a torn last line
                break
            pair, whole = pair_of(found[1]), True
        before = latest.get(pair)
        if before is not None and not before[2]:
            unchecked[before[0]] = before[1]
        latest[pair] = (start, number, whole)
    if not latest:
        return
    if order == "pair":
        lines = [latest[pair][:2] for pair in sorted(latest)]
        del latest
        with _open(path) as fh:
            for start, number in [*lines, *sorted(unchecked.items())]:
                fh.seek(start)
                found = _checked(path, number, start, fh.readline())
                if found is not None and start not in unchecked:
                    yield found[1] if slim else found[0]
        return
    wanted = {start for start, _, _ in latest.values()}
    del latest
    for number, start, raw in _raw_lines(path):
        if start in wanted:
            found = _checked(path, number, start, raw)
            if found is None:
                return
            yield found[1] if slim else found[0]
        elif start in unchecked:
            _checked(path, number, start, raw)


#: The head of a line as :func:`episode_line` writes it: the episode's info first, its
#: task_idx and rollout in place.
_HEAD = re.compile(rb'\{"info":\{"episode_id":"(?:[^"\\]|\\.)*","env":"(?:[^"\\]|\\.)*",'
                   rb'"task_idx":(-?\d+),"rollout":(\d+)[,}]')


#: A results file's lines run to tens of KB: read in large blocks, reading line by line is
#: several times faster than through the default 8 KB buffer.
_READ_BUFFER = 1 << 20


def stored_episode(record: Mapping[str, Any], folder: Path) -> Episode:
    """The :class:`~interplay.records.Episode` one line of ``folder``'s episodes.jsonl holds,
    rebuilt as the run had it when its verifiers scored it: traces, results, rewards and all.

    Every reader that needs the episode itself rather than its JSON (``interplay regrade``)
    rebuilds it here, with what a long episode keeps in its side file put back
    (:func:`whole_record`). A line that does not structure as an episode is refused with its
    pair."""
    try:
        return converter().structure(whole_record(record, folder), Episode)
    except InterplayError:
        raise
    except Exception as exc:  # cattrs' structuring errors are exception groups of any kind
        info = _map(record.get("info"))
        detail = "; ".join(_messages(exc))[:300]
        raise InterplayError(
            f"{folder / EPISODES_FILE}: the episode of task {info.get('task_idx')}, rollout "
            f"{info.get('rollout') or 0} does not read back as an episode ({detail}); "
            f"mend or remove its line") from None


def _messages(exc: BaseException) -> list[str]:
    if isinstance(exc, BaseExceptionGroup):
        return [m for sub in exc.exceptions for m in _messages(sub)]
    return [f"{type(exc).__name__}: {exc}"]


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb", buffering=_READ_BUFFER)
    except OSError as exc:
        raise InterplayError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _raw_lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """Each line of a results file that is not blank: (its number, its offset, its bytes)."""
    if not path.exists():
        return
    pos = 0
    with _open(path) as fh:
        for number, raw in enumerate(fh, start=1):
            start, pos = pos, pos + len(raw)
            # A line is blank only if it begins blank: strip() would copy every long line.
            if raw[:1] not in b" \t\r\n" or raw.strip():
                yield number, start, raw


def _checked(path: Path, number: int, start: int,
             raw: bytes) -> tuple[Any, dict[str, Any]] | None:
    """A line parsed and checked: (the record, its :func:`slim_record`); None for a torn last
    line (told by the newline it lacks), which is skipped; InterplayError for any other line
    that is not an episode record."""
    try:
        record = _codec.loads(raw)
    except ValueError:
        # Only the last line can lack its newline.
        if raw.endswith(b"\n"):
            raise InterplayError(f"{path}: line {number} is not JSON, so not an episode "
                                 "record; remove it, then resume") from None
        log.warning("runner.torn_line_skipped", output_path=str(path), line=number)
        return None
    try:
        return record, slim_record(record)
    except ValueError as exc:
        raise InterplayError(f"{path}: line {number} is not an episode record ({exc}); "
                             "remove or mend it, then resume") from None


def _lines(path: Path, *, repair: bool = False) -> Iterator[tuple[int, Any, dict[str, Any]]]:
    """Each episode line of a results file as (its offset, the record, its
    :func:`slim_record`), checked as :func:`read_episodes` says."""
    for number, start, raw in _raw_lines(path):
        found = _checked(path, number, start, raw)
        if found is None:
            if repair:
                with path.open("r+b") as cut:
                    cut.truncate(start)
            return
        yield start, found[0], found[1]
        if repair and not raw.endswith(b"\n"):
            # A complete record without its newline: end the line before appending.
            with path.open("ab") as tail:
                tail.write(b"\n")


def pair_of(record: Mapping[str, Any]) -> tuple[int, int]:
    """The (task idx, rollout) an episode record is for."""
    info = record["info"]
    return int(info["task_idx"]), int(info.get("rollout") or 0)


def slim_record(record: Any) -> dict[str, Any]:
    """What :func:`~interplay.run.summary.summarize` reads of an episode record, checked:
    raises ValueError naming the first field that is not what an episode line holds."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {_kind(record)}")
    info = _get(record, "info", dict)
    if info is None:
        raise ValueError("info: missing")
    task_idx = _get(info, "task_idx", int, where="info.")
    if task_idx is None:
        raise ValueError("info.task_idx: missing")
    rollout = _get(info, "rollout", int, where="info.") or 0
    if rollout < 0:
        raise ValueError(f"info.rollout: expected 0 or more, got {rollout}")
    traces = []
    for i, t in enumerate(_get(record, "traces", list) or ()):
        where = f"traces[{i}]."
        if not isinstance(t, dict):
            raise ValueError(f"{where[:-1]}: expected an object, got {_kind(t)}")
        traces.append({"seat": _get(t, "seat", str, where=where),
                       "agent": _get(t, "agent", str, where=where),
                       "stop_condition": _get(t, "stop_condition", str, where=where),
                       "reward": _get(t, "reward", float, where=where)})
    metrics = _get(record, "metrics", dict) or {}
    return {"info": {"task_idx": task_idx, "rollout": rollout,
                     "episode_id": _get(info, "episode_id", str, where="info.")},
            "reward": _get(record, "reward", float),
            "error_type": _get(record, "error_type", str),
            "error": _short(_get(record, "error", str)), "metrics": metrics,
            "started_at": _get(record, "started_at", float),
            "wall_s": _get(record, "wall_s", float),
            "traces": traces, "usage": dict(record_usage(record)),
            "criteria": criteria_scores((_map(r).get("name"), _map(r).get("info"))
                                        for r in _get(record, "rewards", list) or ())}


#: Characters of an episode's error the slim record keeps: enough to tell causes apart.
ERROR_CHARS = 500


def _short(error: str | None) -> str | None:
    return error if error is None or len(error) <= ERROR_CHARS else error[:ERROR_CHARS] + "…"


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _get(obj: Mapping[str, Any], key: str, kind: type, *, where: str = "") -> Any:
    """``obj[key]`` if it is absent, null or a ``kind`` (``float``: a finite number; ``int``:
    not a bool), else ValueError naming the field."""
    value = obj.get(key)
    if value is None:
        return None
    if kind is float:
        ok, what = finite_number(value), "a finite number"
    else:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        what = {int: "an integer", str: "text", dict: "an object", list: "a list"}[kind]
    if not ok:
        got = repr(value) if isinstance(value, float) else _kind(value)
        raise ValueError(f"{where}{key}: expected {what} or null, got {got}")
    return value


def slim_episode(episode: Episode) -> dict[str, Any]:
    """:func:`slim_record` of an episode that has just finished."""
    # Summed here rather than through Episode.usage, which makes a Usage per call it adds.
    prompt = completion = total = calls = 0
    for call_list in [*(t.model_calls for t in episode.traces), episode.judge_calls]:
        calls += len(call_list)
        for call in call_list:
            usage = call.usage
            if usage is not None:
                prompt += usage.prompt_tokens
                completion += usage.completion_tokens
                total += usage.total_tokens
    info = episode.info
    return {"info": {"task_idx": info.task_idx, "rollout": info.rollout,
                     "episode_id": info.episode_id},
            "reward": episode.reward, "error_type": episode.error_type,
            "error": _short(episode.error),
            "metrics": dict(episode.metrics), "started_at": episode.started_at,
            "wall_s": episode.wall_s,
            "traces": [{"seat": t.seat, "agent": t.agent, "stop_condition": t.stop_condition,
                        "reward": t.reward}
                       for t in episode.traces],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": total, "model_calls": calls},
            "criteria": criteria_scores((r.name, r.info) for r in episode.rewards)}


def criteria_scores(rewards: Iterable[tuple[Any, Any]]) -> dict[str, dict[str, float]]:
    """Per-criterion scores by reward name, from ``(name, info)`` pairs: what a judge (a
    rubric verifier) keeps in its reward's ``info["criteria"]``; rewards without are left
    out. Which of them came from a judge, the summary is told by name."""
    out: dict[str, dict[str, float]] = {}
    for name, info in rewards:
        criteria = info.get("criteria") if isinstance(info, Mapping) else None
        if not isinstance(name, str) or not isinstance(criteria, Mapping):
            continue
        scores = {str(k): float(v["score"]) for k, v in criteria.items()
                  if isinstance(v, Mapping) and finite_number(v.get("score"))}
        if scores:
            out[name] = scores
    return out


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def default_output(env_name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(env_name).stem)
    return str(Path("results") / f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}")



_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def record_usage(record: Mapping[str, Any]) -> Counter[str]:
    """The tokens and model calls of an episode record (every trace's calls and the judge's);
    raises ValueError naming a call or a count that is not what a line holds."""
    # Summed without naming each call first: every line read is checked here, and naming the
    # calls cost most of the reading. Anything unusual is left to the naming way, whose
    # errors say where.
    if "side" in record:  # a split line keeps its traces' and judges' usage as counts
        return _named_usage(record)
    counts = [0, 0, 0]
    calls = 0
    try:
        lists = [t.get("model_calls") for t in record.get("traces") or ()]
        lists.append(record.get("judge_calls"))
        for found in lists:
            if found is None:
                continue
            if type(found) is not list:
                raise _Unusual
            calls += len(found)
            for call in found:
                usage = call.get("usage")
                if usage is None:
                    continue
                if type(usage) is not dict:
                    raise _Unusual
                for k, key in enumerate(_USAGE_KEYS):
                    count = usage.get(key)
                    if count is None:
                        continue
                    if type(count) is not int or count < 0:
                        raise _Unusual
                    counts[k] += count
    except (_Unusual, AttributeError):
        return _named_usage(record)
    total: Counter[str] = Counter(dict(zip(_USAGE_KEYS, counts, strict=True)))
    total["model_calls"] = calls
    return total


class _Unusual(Exception):
    """A call or a count record_usage leaves to :func:`_named_usage`."""


def _named_usage(record: Mapping[str, Any]) -> Counter[str]:
    total: Counter[str] = Counter()
    calls: list[tuple[str, Any]] = []
    for i, t in enumerate(record.get("traces") or ()):
        if "model_calls" not in t and isinstance(t.get("usage"), dict):
            total.update(_usage_counts(t["usage"], f"traces[{i}].usage."))  # a split line
            continue
        calls += [(f"traces[{i}].model_calls[{j}]", c)
                  for j, c in enumerate(_get(t, "model_calls", list, where=f"traces[{i}].")
                                        or ())]
    if isinstance(record.get("judge_usage"), dict):
        total.update(_usage_counts(record["judge_usage"], "judge_usage."))
    calls += [(f"judge_calls[{j}]", c)
              for j, c in enumerate(_get(record, "judge_calls", list) or ())]
    for where, call in calls:
        if not isinstance(call, dict):
            raise ValueError(f"{where}: expected an object, got {_kind(call)}")
        usage = _get(call, "usage", dict, where=f"{where}.") or {}
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            count = _get(usage, key, int, where=f"{where}.usage.") or 0
            if count < 0:
                raise ValueError(f"{where}.usage.{key}: expected 0 or more, got {count}")
            total[key] += count
    total["model_calls"] += len(calls)
    return total


def _usage_counts(usage: Mapping[str, Any], where: str) -> Counter[str]:
    """The counts a split line keeps of a trace's (or the judges') calls, checked."""
    out: Counter[str] = Counter()
    for key in ("prompt_tokens", "completion_tokens", "total_tokens", "model_calls"):
        count = _get(usage, key, int, where=where) or 0
        if count < 0:
            raise ValueError(f"{where}{key}: expected 0 or more, got {count}")
        out[key] += count
    return out


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON in ``path``, replaced whole (a reader never sees half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    data = finite(data)
    try:
        text = json.dumps(data, indent=2, ensure_ascii=False, default=repr, allow_nan=False)
        tmp.write_bytes(text.encode() + b"\n")
    except UnicodeEncodeError:  # a lone surrogate: escaped, JSON reads it back as it was
        tmp.write_bytes(json.dumps(data, indent=2, default=repr, allow_nan=False).encode()
                        + b"\n")
    os.replace(tmp, path)


def finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (not a bool) and neither NaN nor infinite."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def finite(data: Any) -> Any:
    """``data`` with every non-finite float replaced by None: NaN and the infinities are not
    JSON, and ``JSON.parse`` (the report's page) rejects them."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [finite(value) for value in data]
    return data


def prepare(data: dict[str, Any],
            resume: str | None) -> tuple[RunConfig, Env, dict[str, Any], Path]:
    """Resolve the config, load the env, and make (or check, when resuming) the results
    folder with its config.json."""
    if resume:
        output = Path(resume)
        stored_path = output / CONFIG_FILE
        if not stored_path.is_file():
            raise InterplayError(f"--resume {resume}: no {CONFIG_FILE} there; "
                                 f"point it at a results folder of `interplay eval`")
        try:
            stored = json.loads(stored_path.read_text())["config"]
            if not isinstance(stored, dict):
                raise TypeError("config is not an object")
        except (ValueError, KeyError, TypeError, OSError):
            raise InterplayError(f"{stored_path}: not a results config; "
                                 f"start a new run with -o") from None
        regraded = _map(json.loads(stored_path.read_text())).get("regrade")
        if isinstance(regraded, Mapping):
            raise InterplayError(f"--resume {resume}: it holds a regrade of "
                                 f"{regraded.get('from')}, not a run to continue; regrade "
                                 f"that run again with `interplay regrade` and another -o")
        given = (data.get("env") or {}).get("name")
        if given is not None and given != (stored.get("env") or {}).get("name"):
            # Another env's settings would not even structure: name the real difference.
            raise InterplayError(f"--resume {resume}: the config changed (env.name); "
                                 f"resume with the same settings or start a new run with -o")
        merged = config_mod.merge(stored, data)
        merged["output"] = str(output)
        for key in masked_credentials(merged):
            hint = "--base-url or " if key == "model.base_url" else ""
            raise InterplayError(f"--resume {resume}: {key} had credentials, which "
                                 f"{CONFIG_FILE} does not keep; give them again ({hint}--set "
                                 f"{key}=...)")
        cfg, env, resolved = resolve(merged)
        executor_for(cfg)  # its settings checked before anything is written
        changed = config_differences(without_credentials(stored),
                                     without_credentials(resolved))
        if changed:
            raise InterplayError(
                f"--resume {resume}: the config changed ({', '.join(changed[:8])}"
                f"{', ...' if len(changed) > 8 else ''}); resume with the same settings "
                f"or start a new run with -o")
        return cfg, env, resolved, output
    if "output" not in data:
        name = str((data.get("env") or {}).get("name") or "")
        data["output"] = default_output(name)
    cfg, env, resolved = resolve(data)
    executor_for(cfg)  # its settings checked before the folder is made
    output = Path(str(cfg.output))
    if (output / EPISODES_FILE).exists() or (output / CONFIG_FILE).exists():
        raise InterplayError(f"{output} already holds a run; continue it with --resume {output} "
                             f"or choose another -o")
    if output.exists() and not output.is_dir():
        raise InterplayError(f"-o {output}: not a folder; choose another -o")
    try:
        output.mkdir(parents=True, exist_ok=True)
        write_json(output / CONFIG_FILE, {"config": without_credentials(resolved),
                                          "interplay": _version(),
                                          "verifiers": stored_verifiers(env)})
    except OSError as exc:
        raise InterplayError(f"-o {output}: cannot write a results folder there "
                             f"({exc.strerror or type(exc).__name__}); choose another -o") from None
    return cfg, env, resolved, output


def stored_verifiers(env: Env) -> list[dict[str, Any]]:
    """What config.json keeps of the env's verifiers: each one's name and the registered
    names of its class and bases (:func:`interplay.plugins.describe_kinds`), so a report
    tells a judge's rewards apart without the plugin that registered it."""
    from interplay import plugins

    return [plugins.describe_kinds(v, "verifiers") for v in env.verifiers()]


def recorded_verifiers(stored: Mapping[str, Any]) -> list[Any]:
    """The verifiers a results folder's config.json records: its ``verifiers``, or for a
    folder written before it kept them, the rows of ``env.verifiers`` if the run set them."""
    rows = stored.get("verifiers")
    if not isinstance(rows, list):
        rows = _map(_map(stored.get("config")).get("env")).get("verifiers")
    return rows if isinstance(rows, list) else []


def judged_in(folder: Path) -> set[str]:
    """:func:`judged_names` of the verifiers a results folder's config.json records (none
    when it cannot be read)."""
    try:
        stored = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return set()
    return judged_names(recorded_verifiers(_map(stored)))


def judged_names(rows: Iterable[Any]) -> set[str]:
    """The names of the rubric verifiers (judges) among stored verifier rows
    (:func:`stored_verifiers`' or config rows naming a kind); a kind no installed plugin
    registers is not counted."""
    from interplay import plugins

    out = set()
    for row in rows:
        name = _map(row).get("name") or _map(row).get("kind")
        try:
            if isinstance(name, str) and plugins.is_kind(row, "verifiers", "rubric"):
                out.add(name)
        except InterplayError:
            continue
    return out


def _version() -> str:
    from interplay._version import __version__

    return __version__


