"""An episode's line in episodes.jsonl, and the side file a long episode keeps its bulk in.

An episode's line stays small whatever its length: one whose line would pass
:data:`LINE_BOUND` keeps its bulk (its traces' messages, model calls and tool runs, its
judges' calls, and the long values of the env's results: an always_on timeline, the agent's
private notes, tool arguments) in a side file, ``episodes/<episode_id>.json``, written and
fsync'd before its line, which names it (``side``). :func:`whole_record` puts a record back
together; every reader that needs more than the summary's figures goes through it.

This module owns the line's form and the side file's; it must not append to episodes.jsonl
(:class:`~interplay.run.results.EpisodeLog` does) or decide which lines a reader sees.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interplay import _codec
from interplay.errors import InterplayError
from interplay.records import Episode, converter
from interplay.run.slim import record_usage
from interplay.splicing import spliced, to_json_bytes

#: The folder of the side files, beside episodes.jsonl.
SIDE_DIR = "episodes"
#: An episode whose line would be longer than this keeps its bulk in a side file.
LINE_BOUND = 64 * 1024
#: In a split episode, a value of the env's results (or of one of its tables) longer than
#: this as JSON goes to the side file; shorter ones (counts, the end reason) stay on the line.
RESULT_KEPT = 2 * 1024
#: What a split episode's traces keep in the side file (the line keeps their usage).
TRACE_BULK = ("messages", "model_calls", "tool_runs")


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


def side_path(folder: Path, ref: Any) -> Path:
    """The side file a line names (``ref``, its ``side.file``), refused unless it is a file of
    the folder's own :data:`SIDE_DIR`, links resolved: a line is data anyone may have edited,
    and a reader (``interplay view`` serves what it reads) must not be sent elsewhere by it."""
    path = folder / str(ref)
    side_dir = (folder / SIDE_DIR).resolve()
    if not isinstance(ref, str) or path.resolve().parent != side_dir:
        raise InterplayError(f"{folder}: an episode names the side file {str(ref)[:200]!r}, "
                             f"which is not in its {SIDE_DIR}/ folder; mend or remove its line")
    return path


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
    path = side_path(folder, side_ref.get("file"))
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
