"""An episode as the report shows it: its row in the page's table (:func:`table_row`, the
fields :data:`ROW_COLUMNS` names) and its section (:func:`episode_view`): each seat's
transcript (messages, tool calls with their arguments, rewards with a judge's criteria), the
episode's rewards, metrics and error, and an always_on episode's chat and wakes (values from
:mod:`interplay.report.always_on`, charts from :mod:`interplay.report.charts`).

This module turns one episode record into plain values for the templates, reading it
defensively (:mod:`interplay.report.plain`); it must not write markup or read a file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from interplay.report import always_on, charts
from interplay.report.plain import as_json, as_map, as_seq, as_text, fmt
from interplay.run.notes import is_private_note, private_notes
from interplay.run.results import finite_number
from interplay.run.summary import is_error, scored_reward


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


def seat_name(t: Mapping[str, Any]) -> str:
    """The seat a trace is of (an older record names its agent)."""
    return as_text(t.get("seat") or t.get("agent"))


def _stops(ep: Mapping[str, Any]) -> list[str]:
    return [f"{seat_name(as_map(t))}: {as_text(as_map(t).get('stop_condition'))}"
            for t in as_seq(ep.get("traces"))]


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


def _messages(messages: Any, notes: Sequence[str] = (),
              starts: Sequence[int] = ()) -> list[dict[str, Any]]:
    """The messages as the page shows them; ``starts``: where each segment's messages begin
    (the first the launch, each later one a resume), each such message marked."""
    if messages is not None and not isinstance(messages, list | tuple):
        # Not a list of messages: shown as what it is rather than dropped.
        return [_message({"role": "?", "content": messages})]
    out = [_message(as_map(m), notes) for m in as_seq(messages)]
    for n, at in enumerate(starts, start=1):
        if 0 <= at < len(out) and not out[at].get("segment"):
            out[at]["segment"] = f"segment {n}: " + ("launch" if n == 1 else "resume")
    return out


def segment_starts(t: Mapping[str, Any]) -> list[int]:
    """Where each of a trace's segments begins among its messages (the kernel records it in
    ``info["segment_starts"]``; a record without it has none)."""
    return [at for at in as_seq(as_map(t.get("info")).get("segment_starts"))
            if type(at) is int and at >= 0]


def episode_turns(ep: Mapping[str, Any]) -> float | int | None:
    """An episode's turns: the count its env records (``metrics.turns``), else the most
    segments any of its seats ran; None when neither is known."""
    turns = as_map(ep.get("metrics")).get("turns")
    if finite_number(turns):
        return turns  # type: ignore[no-any-return]
    counts = [len(segment_starts(as_map(t))) for t in as_seq(ep.get("traces"))]
    return max(counts) if counts and max(counts) > 0 else None


def _rewards(rewards: Any, judged: Collection[str]) -> list[dict[str, Any]]:
    """Rewards as rows; a judge's (a rubric verifier's, named in ``judged``) with a row per
    criterion: its score, weight and reason."""
    out = []
    for r in map(as_map, as_seq(rewards)):
        name = as_text(r.get("name"))
        criteria = as_map(as_map(r.get("info")).get("criteria")) if name in judged else {}
        info = {k: v for k, v in as_map(r.get("info")).items()
                if not (k == "criteria" and criteria)}
        out.append({"name": name, "value": fmt(r.get("value")),
                    "weight": fmt(r.get("weight")), "seat": as_text(r.get("seat")),
                    "reason": as_text(r.get("reason")),
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


def _trace(t: Mapping[str, Any], errored: bool, judged: Collection[str],
           notes: Sequence[str] = ()) -> dict[str, Any]:
    calls = [as_map(c) for c in as_seq(t.get("model_calls"))]
    tokens = 0
    for c in calls:
        count = as_map(c.get("usage")).get("total_tokens")
        tokens += count if isinstance(count, int) else 0
    # The kernel's own key is shown as the transcript's segment marks, not as harness info.
    info = {k: v for k, v in as_map(t.get("info")).items() if k != "segment_starts"}
    starts = segment_starts(t)
    return {"seat": seat_name(t), "agent": as_text(t.get("agent")),
            "harness": as_text(t.get("harness")),
            "model": as_text(t.get("model")), "trainable": t.get("trainable") is True,
            "stop_condition": as_text(t.get("stop_condition")),
            "reward": "-" if errored else fmt(t.get("reward")), "calls": len(calls),
            "failed_calls": sum(1 for c in calls if c.get("error_type")), "tokens": tokens,
            "tool_runs": len(as_seq(t.get("tool_runs"))),
            "error_type": as_text(t.get("error_type")), "error": as_text(t.get("error")),
            "messages": _messages(t.get("messages"), notes, starts),
            "segments": len(starts),
            "model_calls": [_call(n, c) for n, c in enumerate(calls, start=1)],
            "other_calls": sum(1 for c in calls if c.get("caller") == "other"),
            "tool_run_rows": [_tool_run(as_map(r)) for r in as_seq(t.get("tool_runs"))],
            # What the harness recorded of its program (codex's, Claude Code's session),
            # whatever its keys: shown as it is.
            "info": as_json(info, indent=2) if info else "",
            "rewards": _rewards(t.get("rewards"), judged)}


def _label(ep: Mapping[str, Any]) -> str:
    """What the episode was asked: the task's prompt, or for a task whose env makes its
    prompt (a puzzle, a game), the first message a seat was sent."""
    text = _prompt_text(as_map(ep.get("task")).get("prompt"))
    if not text.strip():
        for t in map(as_map, as_seq(ep.get("traces"))):
            first = next((m for m in map(as_map, as_seq(t.get("messages")))
                          if m.get("role") == "user"), None)
            if first is not None:
                text = _content_text(first.get("content"))
                break
    label = " ".join(text.split())
    return label[:90] + ("…" if len(label) > 90 else "")


def cause(error: Any) -> str:
    """An error's one-line cause: its first line, shortened."""
    line = next((x.strip() for x in as_text(error).splitlines() if x.strip()), "")
    return line[:160] + ("…" if len(line) > 160 else "")


def episode_view(i: int, ep: Mapping[str, Any], judged: Collection[str]) -> dict[str, Any]:
    """The ``i``-th episode's section of the page; ``judged`` names the rubric verifiers,
    whose rewards are shown per criterion."""
    info, task = as_map(ep.get("info")), as_map(ep.get("task"))
    reward = scored_reward(ep)
    traces = [as_map(t) for t in as_seq(ep.get("traces"))]
    turns = episode_turns(ep)
    stops = _stops(ep)
    record = as_map(ep.get("results")).get("always_on")
    notes = private_notes(ep)
    view = always_on.view(record)
    if view is not None:
        view["timeline_chart"] = charts.always_on_timeline(
            as_map(record), awake=as_map(as_map(ep.get("results")).get("user")).get("awake"))
        view["latency_chart"] = charts.reply_latencies(as_map(record))
    return {
        "index": i, "episode_id": as_text(info.get("episode_id")),
        "task_idx": as_text(info.get("task_idx")), "rollout": as_text(info.get("rollout")),
        "seed": as_text(info.get("seed")),
        "reward": fmt(reward),
        "error_type": as_text(ep.get("error_type")), "error": as_text(ep.get("error")),
        "stops": stops, "turns": fmt(turns),
        "calls": sum(len(as_seq(t.get("model_calls"))) for t in traces),
        "wall_s": fmt(ep.get("wall_s"), 3),
        "metrics": ", ".join(f"{k} = {fmt(v)}" for k, v in as_map(ep.get("metrics")).items()),
        "rewards": _rewards(ep.get("rewards"), judged),
        "system_prompt": as_text(task.get("system_prompt")),
        "prompt": _prompt_text(task.get("prompt")), "answer": as_json(task.get("answer")),
        "results": as_json(ep["results"], indent=2) if ep.get("results") else "",
        "traces": [_trace(t, is_error(ep), judged, notes) for t in traces],
        "always_on": view,
        "sandbox": sandbox_view(ep.get("sandbox")),
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


def seat_rewards(ep: Mapping[str, Any]) -> dict[str, float | None]:
    """Each seat's reward in an episode (None for an error episode, which is not scored, and
    for a seat nothing scored)."""
    errored = is_error(ep)
    out: dict[str, float | None] = {}
    for t in map(as_map, as_seq(ep.get("traces"))):
        reward = t.get("reward")
        out[seat_name(t)] = None if errored or not finite_number(reward) else reward
    return out


def components(ep: Mapping[str, Any]) -> dict[str, float | None]:
    """An episode's reward components: each verifier's reward by its name (a seat's own as
    ``NAME (SEAT)``, a name met again as ``NAME #2``), None for an error episode (not scored)
    and for a value that is not a finite number."""
    errored = is_error(ep)
    out: dict[str, float | None] = {}
    for r in map(as_map, as_seq(ep.get("rewards"))):
        name = as_text(r.get("name")) or "?"
        if r.get("seat"):
            name = f"{name} ({as_text(r.get('seat'))})"
        key, n = name, 1
        while key in out:
            n += 1
            key = f"{name} #{n}"
        value = r.get("value")
        # One string per name however many rows hold it (the view keeps a row per episode).
        out[sys.intern(key)] = None if errored or not finite_number(value) else float(value)
        if len(out) >= COMPONENTS_KEPT:
            break
    return out


#: Reward components a row keeps at most (an env with more is shown by its first ones).
COMPONENTS_KEPT = 64


def table_row(i: int, ep: Mapping[str, Any], seats: Sequence[str],
              stop_index: dict[str, int]) -> list[Any]:
    """An episode's row of the table, as the page's script reads it (see ROW_COLUMNS)."""
    info = as_map(ep.get("info"))
    traces = [as_map(t) for t in as_seq(ep.get("traces"))]
    by_seat = seat_rewards(ep)
    stops = [stop_index.setdefault(s, len(stop_index)) for s in _stops(ep)]
    wall = ep.get("wall_s")
    turns = episode_turns(ep)
    return [i, as_text(info.get("episode_id")), info.get("task_idx"), info.get("rollout") or 0,
            scored_reward(ep), [by_seat.get(s) for s in seats], as_text(ep.get("error_type")),
            cause(ep.get("error")),
            stops, turns if finite_number(turns) else None,
            sum(len(as_seq(t.get("model_calls"))) for t in traces),
            round(wall, 3) if finite_number(wall) else None, _label(ep), components(ep)]


#: The fields of a row of the episode table, in order (the page's script and its CSV read
#: them by these names); ``components`` maps each reward component's name to its value.
ROW_COLUMNS = ("index", "episode_id", "task", "rollout", "reward", "seat_rewards", "error_type",
               "error", "stops", "turns", "calls", "wall_s", "prompt", "components")


def component_names(rows: Sequence[Sequence[Any]]) -> list[str]:
    """The reward components of a table's rows, in the order first met."""
    seen: dict[str, None] = {}
    for row in rows:
        for name in as_map(row[13] if len(row) > 13 else None):
            seen.setdefault(name)
    return list(seen)
