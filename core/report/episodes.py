"""An episode as the report shows it: its row in the page's table (:class:`TableRow`, made by
:func:`table_row`) and its section (:func:`episode_view`): each seat's transcript (messages,
tool calls with their arguments, rewards with a judge's criteria), the episode's rewards,
metrics and error, and an always_on episode's chat and wakes (values from
:mod:`interplay.report.always_on`, charts from :mod:`interplay.report.charts`).

This module turns one episode, read once into typed values
(:class:`~interplay.run.recorded.RecordedEpisode`), into plain values for the templates; the
parts that reading keeps as the line holds them (messages, model calls, tool runs, the
sandbox's record) it reads defensively (:mod:`interplay.values.plain`). It must not write
markup or read a file.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from interplay.report import always_on, charts
from interplay.report.plain import fmt
from interplay.run.notes import is_private_note
from interplay.run.recorded import RecordedEpisode, RecordedReward, RecordedTrace
from interplay.run.slim import finite_number
from interplay.values.plain import as_json, as_map, as_seq, as_text


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(as_text(part.get("text")) if isinstance(part, Mapping) and "text" in part
                         else as_text(part) for part in content)
    return as_text(content)


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        return "\n".join(f"{as_text(as_map(m).get('role'))}: "
                         f"{_content_text(as_map(m).get('content'))}" for m in prompt)
    return as_text(prompt)


def _pretty_args(arguments: Any) -> str:
    try:
        return as_json(json.loads(arguments), indent=2)
    except (TypeError, ValueError):
        return as_text(arguments)


def _stops(ep: RecordedEpisode) -> list[str]:
    return [f"{t.seat}: {t.stop_condition or ''}" for t in ep.traces]


_ROLES = ("system", "developer", "user", "assistant", "tool")


def _message(m: Mapping[str, Any], notes: Sequence[str] = ()) -> dict[str, Any]:
    role = as_text(m.get("role")) or "?"
    text = _content_text(m.get("content"))
    return {"role": role, "role_class": role if role in _ROLES else "other",
            "private": role == "assistant" and is_private_note(text, notes),
            "name": as_text(m.get("name")), "tool_call_id": as_text(m.get("tool_call_id")),
            "segment": "",
            "text": text,
            "tool_calls": [{"name": as_text(as_map(as_map(c).get("function")).get("name")),
                            "id": as_text(as_map(c).get("id")),
                            "arguments": _pretty_args(as_map(as_map(c).get("function"))
                                                      .get("arguments"))}
                           for c in as_seq(m.get("tool_calls"))]}


def _messages(messages: Sequence[Mapping[str, Any]], notes: Sequence[str] = (),
              starts: Sequence[int] = ()) -> list[dict[str, Any]]:
    """The messages as the page shows them; ``starts``: where each segment's messages begin
    (the first the launch, each later one a resume), each such message marked."""
    out = [_message(m, notes) for m in messages]
    for n, at in enumerate(starts, start=1):
        if 0 <= at < len(out) and not out[at].get("segment"):
            out[at]["segment"] = f"segment {n}: " + ("launch" if n == 1 else "resume")
    return out


def _rewards(rewards: Sequence[RecordedReward], judged: Collection[str]) -> list[dict[str, Any]]:
    """Rewards as rows; a judge's (a rubric verifier's, named in ``judged``) with a row per
    criterion: its score, weight and reason."""
    out = []
    for r in rewards:
        criteria = as_map(r.info.get("criteria")) if r.name in judged else {}
        info = {k: v for k, v in r.info.items() if not (k == "criteria" and criteria)}
        out.append({"name": r.name, "value": fmt(r.value), "weight": fmt(r.weight),
                    "seat": r.seat, "reason": r.reason,
                    "info": as_json(info, indent=2) if info else "",
                    "criteria": [{"name": as_text(c), "score": fmt(as_map(v).get("score")),
                                  "weight": fmt(as_map(v).get("weight")),
                                  "reason": as_text(as_map(v).get("reason"))}
                                 for c, v in criteria.items()]})
    return out


def _call(n: int, c: Mapping[str, Any]) -> dict[str, str]:
    """A model call's row: what it asked of which model, how long it took, its tokens."""
    usage = as_map(c.get("usage"))
    return {"n": str(n), "model": as_text(c.get("model")), "api": as_text(c.get("api")),
            "latency_s": fmt(c.get("latency_s"), 3),
            "first_token_s": fmt(c.get("first_token_s"), 3),
            "prompt_tokens": fmt(usage.get("prompt_tokens")),
            "completion_tokens": fmt(usage.get("completion_tokens")),
            "finish_reason": as_text(c.get("finish_reason")), "attempts": fmt(c.get("attempts")),
            "status": fmt(c.get("status")), "error_type": as_text(c.get("error_type")),
            "error": cause(c.get("error")),
            # A call another process made with the trace's secret (a command the program
            # ran): never the program's own turn, never training data.
            "other": c.get("caller") == "other"}


def _tool_run(r: Mapping[str, Any]) -> dict[str, str]:
    return {"name": as_text(r.get("name")), "call_id": as_text(r.get("call_id")),
            "duration_s": fmt(r.get("duration_s"), 3), "error_type": as_text(r.get("error_type"))}


def _trace(t: RecordedTrace, errored: bool, judged: Collection[str],
           notes: Sequence[str] = ()) -> dict[str, Any]:
    calls = t.model_calls
    tokens = 0
    for c in calls:
        count = as_map(c.get("usage")).get("total_tokens")
        tokens += count if isinstance(count, int) else 0
    # The kernel's own key is shown as the transcript's segment marks, not as harness info.
    info = {k: v for k, v in t.info.items() if k != "segment_starts"}
    starts = t.segment_starts
    return {"seat": t.seat, "agent": as_text(t.agent), "harness": t.harness, "model": t.model,
            "trainable": t.trainable is True, "stop_condition": t.stop_condition or "",
            "reward": "-" if errored else fmt(t.reward), "calls": len(calls),
            "failed_calls": sum(1 for c in calls if c.get("error_type")), "tokens": tokens,
            "tool_runs": len(t.tool_runs), "error_type": t.error_type, "error": t.error,
            "messages": _messages(t.messages, notes, starts),
            "segments": len(starts),
            "model_calls": [_call(n, c) for n, c in enumerate(calls, start=1)],
            "other_calls": sum(1 for c in calls if c.get("caller") == "other"),
            "tool_run_rows": [_tool_run(r) for r in t.tool_runs],
            # What the harness recorded of its program (codex's, Claude Code's session),
            # whatever its keys: shown as it is.
            "info": as_json(info, indent=2) if info else "",
            "rewards": _rewards(t.rewards, judged)}


def _label(ep: RecordedEpisode) -> str:
    """What the episode was asked: the task's prompt, or for a task whose env makes its
    prompt (a puzzle, a game), the first message a seat was sent."""
    text = _prompt_text(ep.task.get("prompt"))
    if not text.strip():
        for t in ep.traces:
            first = next((m for m in t.messages if m.get("role") == "user"), None)
            if first is not None:
                text = _content_text(first.get("content"))
                break
    label = " ".join(text.split())
    return label[:90] + ("…" if len(label) > 90 else "")


def cause(error: Any) -> str:
    """An error's one-line cause: its first line, shortened."""
    line = next((x.strip() for x in as_text(error).splitlines() if x.strip()), "")
    return line[:160] + ("…" if len(line) > 160 else "")


def episode_view(i: int, ep: RecordedEpisode, judged: Collection[str]) -> dict[str, Any]:
    """The ``i``-th episode's section of the page; ``judged`` names the rubric verifiers,
    whose rewards are shown per criterion."""
    task = ep.task
    record = ep.always_on
    notes = ep.private_notes()
    view = always_on.view(record)
    if view is not None:
        view["timeline_chart"] = charts.always_on_timeline(
            as_map(record), awake=as_map(as_map(ep.results).get("user")).get("awake"))
        view["latency_chart"] = charts.reply_latencies(as_map(record))
    return {
        "index": i, "episode_id": as_text(ep.episode_id),
        "task_idx": as_text(ep.task_idx), "rollout": as_text(ep.rollout),
        "seed": as_text(ep.seed),
        "reward": fmt(ep.scored_reward),
        "error_type": as_text(ep.error_type), "error": as_text(ep.error),
        "stops": _stops(ep), "turns": fmt(ep.turns), "calls": ep.calls,
        "wall_s": fmt(ep.wall_s, 3),
        "metrics": ", ".join(f"{k} = {fmt(v)}" for k, v in ep.metrics.items()),
        "rewards": _rewards(ep.rewards, judged),
        "system_prompt": as_text(task.get("system_prompt")),
        "prompt": _prompt_text(task.get("prompt")), "answer": as_json(task.get("answer")),
        "results": as_json(ep.results, indent=2) if ep.results else "",
        "traces": [_trace(t, ep.is_error, judged, notes) for t in ep.traces],
        "always_on": view,
        "sandbox": sandbox_view(ep.sandbox),
    }


def _command(c: Mapping[str, Any]) -> dict[str, str]:
    exit_code = c.get("exit_code")
    ended = ("timed out" if c.get("timed_out") else
             "stopped" if exit_code is None else f"exit {as_text(exit_code)}")
    cut = c.get("output_cut")
    return {"command": as_text(c.get("command")), "ended": ended,
            "failed": bool(c.get("timed_out")) or exit_code != 0,
            "duration_s": fmt(c.get("duration_s"), 3), "output": as_text(c.get("output")),
            "cut": f"{cut:,} bytes of output left out" if isinstance(cut, int) and cut > 0
            else ""}


def _cut(count: Any, what: str) -> str:
    return f"{count:,} {what} left out" if isinstance(count, int) and count > 0 else ""


def sandbox_view(record: Any) -> dict[str, Any] | None:
    """An episode's sandbox record (``Episode.sandbox``) as the page shows it: which, its
    times, its setup commands as they ended and what the episode changed in its workspace
    (the files, the bounded diff, what was left out); None when it had none."""
    if not isinstance(record, Mapping):
        return None
    changes = record.get("changes")
    changed = None
    if isinstance(changes, Mapping):
        files = [{"path": as_text(f.get("path")), "status": as_text(f.get("status")),
                  "size": fmt(f.get("size"))} for f in map(as_map, as_seq(changes.get("files")))]
        changed = {"files": files, "files_cut": _cut(changes.get("files_cut"), "files"),
                   "diff": as_text(changes.get("diff")),
                   "diff_cut": _cut(changes.get("diff_cut"), "bytes of the diff"),
                   "note": as_text(changes.get("note")),
                   "counts": ", ".join(f"{n} {status}" for status, n in sorted(
                       _count(f["status"] for f in files).items()))}
    info = as_map(record.get("info"))
    return {"kind": as_text(record.get("kind")), "image": as_text(record.get("image")),
            "workdir": as_text(record.get("workdir")), "start_s": fmt(record.get("start_s"), 3),
            "setup_s": fmt(record.get("setup_s"), 3), "stop_s": fmt(record.get("stop_s"), 3),
            "setup": [_command(as_map(c)) for c in as_seq(record.get("setup"))],
            "changes": changed, "info": as_json(info, indent=2) if info else "",
            "error": as_text(record.get("error"))}


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


class TableRow(NamedTuple):
    """An episode's row of the page's table: read by its names here and in the view, written
    as the list of its fields (:data:`ROW_COLUMNS`, in this order) for the page's script and
    its CSV, which read them by those names."""

    index: int
    episode_id: str
    task: int | None
    rollout: int
    #: The reward that counts (None for an error episode and an unscored one).
    reward: float | None
    #: Each of the table's seats' reward, in the order of its seat columns.
    seat_rewards: list[float | None]
    error_type: str
    #: The error's one-line cause (:func:`cause`).
    error: str
    #: The seats' stop conditions, as indices into the table's ``stops``.
    stops: list[int]
    turns: float | None
    calls: int
    wall_s: float | None
    #: What the episode was asked, shortened.
    prompt: str
    #: Each reward component's name and value (:meth:`RecordedEpisode.components`).
    components: dict[str, float | None]


#: The fields of a row of the episode table, in order (the page's script and its CSV read
#: them by these names).
ROW_COLUMNS = TableRow._fields


def table_row(i: int, ep: RecordedEpisode, seats: Sequence[str],
              stop_index: dict[str, int]) -> TableRow:
    """An episode's row of the table, its seat columns those of ``seats``; ``stop_index``
    numbers the stop conditions met, new ones added."""
    by_seat = ep.seat_rewards()
    wall = ep.wall_s
    return TableRow(
        index=i, episode_id=as_text(ep.episode_id), task=ep.task_idx, rollout=ep.rollout or 0,
        reward=ep.scored_reward, seat_rewards=[by_seat.get(s) for s in seats],
        error_type=as_text(ep.error_type), error=cause(ep.error),
        stops=[stop_index.setdefault(s, len(stop_index)) for s in _stops(ep)],
        turns=ep.turns, calls=ep.calls,
        wall_s=round(wall, 3) if finite_number(wall) else None, prompt=_label(ep),
        components=ep.components())


def component_names(rows: Sequence[TableRow]) -> list[str]:
    """The reward components of a table's rows, in the order first met."""
    seen: dict[str, None] = {}
    for row in rows:
        for name in row.components:
            seen.setdefault(name)
    return list(seen)
