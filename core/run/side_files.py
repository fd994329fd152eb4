"""An episode's line in episodes.jsonl, and the side file a long episode keeps its bulk in.

An episode's line stays small whatever its length: one whose line would pass
:data:`LINE_BOUND` keeps its bulk (its traces' messages, model calls and tool runs, its
judges' calls, and the long values of the env's results: an always_on timeline, the agent's
private notes, tool arguments) in a side file, ``episodes/<episode_id>.json``, written and
fsync'd before its line, which names it (``side``). :func:`whole_record` puts a record back
together; every reader that needs more than the summary's figures goes through it.

A side file stays bounded whatever the agent does. A chat resends its conversation in every
request, so a model call's request is stored as what it adds to the call before it in its trace
(``request_shared``: how many of that call's messages it begins with, which of its other keys are
the same): each message is stored once, not again in every later call. And a side file is at
most :data:`SIDE_BOUND` bytes: past it, long strings are clipped (each marked with how much was
cut), then the calls' requests dropped, then long lists shortened to their first and last items,
until it fits; the line's ``side.cut`` (and the whole record's ``cut``) says what was cut.

This module owns the line's form and the side file's; it must not append to episodes.jsonl
(:class:`~interplay.run.results.EpisodeLog` does) or decide which lines a reader sees.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interplay._plumbing import codec as _codec
from interplay.errors import InterplayError
from interplay.run.slim import record_usage
from interplay.values.records import Episode, converter
from interplay.values.splicing import spliced, to_json_bytes

#: The folder of the side files, beside episodes.jsonl.
SIDE_DIR = "episodes"
#: An episode whose line would be longer than this keeps its bulk in a side file.
LINE_BOUND = 64 * 1024
#: In a split episode, a value of the env's results (or of one of its tables) longer than
#: this as JSON goes to the side file; shorter ones (counts, the end reason) stay on the line.
RESULT_KEPT = 2 * 1024
#: What a split episode's traces keep in the side file (the line keeps their usage).
TRACE_BULK = ("messages", "model_calls", "tool_runs")
#: The most bytes a side file holds: past it, what it holds is cut to fit (see the module's
#: docstring), and the record says what was cut.
SIDE_BOUND = 64 << 20
#: A request's keys stored as what they add to the call before (a conversation resent).
_GROWING = ("messages", "input")
#: The strings a side file over its bound is clipped to, longest first; then the length a list
#: is shortened to (its first and last halves).
_CLIPS = (16384, 4096, 1024, 256)
_LIST_KEPT = (1000, 100, 20)


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


def episode_parts(episode: Episode, bound: int = SIDE_BOUND) -> tuple[bytes, bytes | None]:
    """The episode's line in episodes.jsonl and, when its whole line would pass
    :data:`LINE_BOUND`, its side file's content (the line then names the side file and keeps
    the rest: :func:`split_record`), each request stored as what it adds to the one before and
    the whole at most ``bound`` bytes (what was cut to fit is said in the line's ``side.cut``).
    Made from the episode as it is, without parsing its JSON back."""
    data = spliced(episode)
    shared = share_requests(episode, data)
    try:
        compact = _codec.dumps(shared)
        line = _codec.dumps(data) if len(compact) <= LINE_BOUND else compact
    except (TypeError, ValueError):
        return episode_line(episode), None  # what orjson refuses: whole, the plain way
    if len(line) <= LINE_BOUND and line is not compact:
        return line, None
    del line, compact
    kept, side = split_record(shared, side_ref(episode.info.episode_id))
    side_bytes = _codec.dumps(side)
    if len(side_bytes) > bound:
        side, cut = fit(_codec.loads(side_bytes), bound)
        side_bytes = _codec.dumps(side)
        kept["side"]["cut"] = cut
    return _codec.dumps(kept), side_bytes


def share_requests(episode: Episode, data: Any) -> Any:
    """``data`` (the episode as :func:`spliced` made it) with each trace's model calls stored
    as what each request adds to the call before it in the trace: the messages (or Responses
    input) it begins with of that call's are named by count in ``request_shared``, with the
    other keys it has the same; :func:`whole_record` puts them back."""
    traces = data.get("traces") if isinstance(data, dict) else None
    if not isinstance(traces, list):
        return data
    out = []
    for trace, plain in zip(episode.traces, traces, strict=False):
        calls = plain.get("model_calls") if isinstance(plain, dict) else None
        if not isinstance(calls, list) or len(calls) < 2:
            out.append(plain)
            continue
        made = [calls[0]]
        for i in range(1, len(calls)):
            made.append(_shared_call(trace.model_calls[i - 1].request,
                                     trace.model_calls[i].request, calls[i], i - 1))
        out.append({**plain, "model_calls": made})
    return {**data, "traces": out + traces[len(out):]}


def _shared_call(before: Any, request: Any, plain: dict[str, Any], index: int) -> dict[str, Any]:
    if not isinstance(before, dict) or not isinstance(request, dict) or not before:
        return plain
    same: list[str] = []
    rest: dict[str, Any] = {}
    shared: dict[str, Any] = {"call": index}
    for key, value in request.items():
        was = before.get(key, _MISSING)
        if key in _GROWING and isinstance(value, list) and isinstance(was, list):
            shared[key], rest[key] = _pieces(value, was)
        elif was is value or was == value:
            same.append(key)
        else:
            rest[key] = value
    if not same and len(shared) == 1:
        return plain
    shared["same"] = same
    return {**plain, "request": rest, "request_shared": shared}


_MISSING = object()


def _pieces(value: list[Any], was: list[Any]) -> tuple[list[list[int]], list[Any]]:
    """``value`` (a request's messages) as pieces of ``was`` (the call before's): each piece
    ``[start, count]`` is ``was[start:start + count]``, or ``[-1, count]`` the next ``count``
    of the items returned, which ``was`` does not hold. A conversation resent is one piece and
    its new messages; one a window slides over is a piece of the window and the new ones."""
    by_id = {id(m): j for j, m in reversed(list(enumerate(was)))}
    by_json: dict[bytes, int] | None = None
    pieces: list[list[int]] = []
    stored: list[Any] = []
    i = 0
    while i < len(value):
        j = by_id.get(id(value[i]))
        if j is None:
            if by_json is None:
                by_json = {}
                for k, m in enumerate(was):
                    by_json.setdefault(_key(m), k)
            j = by_json.get(_key(value[i]))
        if j is None:
            stored.append(value[i])
            if pieces and pieces[-1][0] < 0:
                pieces[-1][1] += 1
            else:
                pieces.append([-1, 1])
            i += 1
            continue
        n = 1
        while i + n < len(value) and j + n < len(was) and (
                value[i + n] is was[j + n] or value[i + n] == was[j + n]):
            n += 1
        pieces.append([j, n])
        i += n
    return pieces, stored


def _key(item: Any) -> bytes:
    try:
        return _codec.dumps(item)
    except (TypeError, ValueError):
        return repr(item).encode()


def fit(side: dict[str, Any], bound: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A side file's content cut to at most ``bound`` bytes as JSON, and what was cut:
    strings clipped (longest first), then the model calls' requests dropped, then long lists
    shortened to their first and last items, each only as far as it takes."""
    cut: dict[str, Any] = {"bound": bound, "size": len(_codec.dumps(side))}
    for limit in _CLIPS:
        counts = [0, 0]
        side = _clipped(side, limit, counts)
        cut.update(clipped_to=limit, strings_clipped=counts[0], chars_cut=counts[1])
        if len(_codec.dumps(side)) <= bound:
            return side, cut
    dropped = 0
    for trace in side.get("traces") or ():
        for call in trace.get("model_calls") or () if isinstance(trace, dict) else ():
            if isinstance(call, dict) and (call.get("request") or "request_shared" in call):
                call["request"] = {}
                call.pop("request_shared", None)
                dropped += 1
    cut["requests_dropped"] = dropped
    for kept in _LIST_KEPT:
        counts = [0]
        side = _shortened(side, kept, counts, top=True)
        cut.update(lists_shortened_to=kept, items_dropped=counts[0])
        if len(_codec.dumps(side)) <= bound:
            break
    return side, cut


def _clipped(value: Any, limit: int, counts: list[int]) -> Any:
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        counts[0] += 1
        counts[1] += len(value) - limit
        return f"{value[:limit]}…[{len(value) - limit} characters cut]"
    if isinstance(value, dict):
        return {k: _clipped(v, limit, counts) for k, v in value.items()}
    if isinstance(value, list):
        return [_clipped(v, limit, counts) for v in value]
    return value


def _shortened(value: Any, kept: int, counts: list[int], top: bool = False) -> Any:
    if isinstance(value, dict):
        # The side file's traces line up with the line's: that list is never shortened.
        return {k: [_shortened(t, kept, counts) for t in v] if top and k == "traces"
                else _shortened(v, kept, counts) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) > kept:
            counts[0] += len(value) - kept
            value = value[:kept // 2] + value[len(value) - kept // 2:]
        return [_shortened(v, kept, counts) for v in value]
    return value


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
    if side_ref.get("cut"):
        whole["cut"] = side_ref["cut"]
    traces = []
    for trace, bulk in zip(record.get("traces") or (), side.get("traces") or (), strict=False):
        if isinstance(trace, dict) and isinstance(bulk, dict) and bulk:
            trace = {k: v for k, v in trace.items() if k != "usage"}
            trace.update(bulk)
            if isinstance(trace.get("model_calls"), list):
                trace["model_calls"] = whole_calls(trace["model_calls"])
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


def whole_calls(calls: list[Any]) -> list[Any]:
    """A trace's model calls as they were recorded: each request stored as what it adds to
    the call before (:func:`share_requests`) made whole again. The messages shared are the
    same objects as the earlier call's, so what is read back costs no more than once each."""
    out: list[Any] = []
    for call in calls:
        shared = call.get("request_shared") if isinstance(call, dict) else None
        if isinstance(shared, dict) and isinstance(shared.get("call"), int) and \
                0 <= shared["call"] < len(out) and isinstance(out[shared["call"]], dict):
            before = out[shared["call"]].get("request") or {}
            rest = call.get("request") or {}
            request = {}
            for key in (*before, *rest):
                if key in request:
                    continue
                if key in _GROWING and isinstance(shared.get(key), list):
                    request[key] = _joined(shared[key], before.get(key) or [],
                                           rest.get(key) or [])
                elif key in rest:
                    request[key] = rest[key]
                elif key in (shared.get("same") or ()):
                    request[key] = before[key]
            call = {k: v for k, v in call.items() if k != "request_shared"}
            call["request"] = request
        out.append(call)
    return out


def _joined(pieces: list[Any], was: list[Any], stored: list[Any]) -> list[Any]:
    """A request's messages from its pieces (:func:`_pieces`)."""
    out: list[Any] = []
    taken = 0
    for piece in pieces:
        start, count = piece
        if start < 0:
            out += stored[taken:taken + count]
            taken += count
        else:
            out += was[start:start + count]
    return out
