"""An always_on episode as a person reads it: the user's chat with times (when she read each
message), the run wake by wake (what woke the agent, what it sent her, its tool calls, the app
changes around it), the items on her phone, and what the world did that woke nobody.

This module turns ``results["always_on"]`` (plain JSON from an episode's line) into plain
values for the page, reading them defensively: a field of an unexpected shape is shown as text
or left out, never a crash. It writes no markup.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

#: App changes listed per wake on the page (the timeline keeps up to 200 per wake).
CHANGES_SHOWN = 30


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seq(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                            default=repr)


def when(at: Any) -> str:
    """A stored task time (ISO-8601 with its offset) as a person reads it."""
    try:
        return f"{dt.datetime.fromisoformat(str(at)):%a %Y-%m-%d %H:%M}"
    except ValueError:
        return _text(at)


def _chat_entry(entry: Mapping[str, Any]) -> dict[str, str]:
    who, kind = _text(entry.get("from")), _text(entry.get("kind"))
    meta: list[str] = []
    if who == "agent":
        meta.append(f"message #{_text(entry.get('n'))} · wake {_text(entry.get('wake'))}")
        if entry.get("read"):
            meta.append(f"read {when(entry['read_at'])}" if entry.get("read_at") else "read")
        elif entry.get("wrap_up"):
            meta.append("seen only in her wrap-up")
        else:
            meta.append("never read")
        if entry.get("leftover"):
            meta.append("leftover of a failed turn")
    elif who == "step":
        return {"who": "step", "when": when(entry.get("at")),
                "meta": f"end: {_text(entry.get('reason'))}", "text": _text(entry.get("note"))}
    else:
        labels = {"opening": "her request", "line": "her line", "reply": "her reply",
                  "undelivered": f"never reached the agent ({_text(entry.get('why'))})",
                  "wrap_up": "her last word, after the end (never sent)"}
        meta.append(labels.get(kind, kind))
        if entry.get("reply_to"):
            meta.append(f"to #{_text(entry.get('reply_to'))}")
        if entry.get("wake") is not None:
            meta.append(f"reached the agent in wake {_text(entry.get('wake'))}")
        if entry.get("done"):
            meta.append("done")
    return {"who": who if who in ("user", "agent") else "user", "when": when(entry.get("at")),
            "meta": " · ".join(meta), "text": _text(entry.get("text"))}


def _source(source: Mapping[str, Any]) -> dict[str, str]:
    kind = _text(source.get("kind"))
    label = {"opening": "her request", "line": "her line", "user_reply": "her reply",
             "alert": f"alert from {_text(source.get('source'))}",
             "contact_reply": f"answer from {_text(source.get('contact'))}",
             "check": f"check #{_text(source.get('check'))}", "rules": "the rules (step)",
             "final_notice": "last-turn notice (step)"}.get(kind, kind)
    due = when(source.get("due")) if source.get("due") else ""
    return {"label": label, "due": due, "late": "late" if source.get("late") else "",
            "text": _text(source.get("text"))}


def _call(call: Mapping[str, Any]) -> dict[str, str]:
    return {"name": _text(call.get("name")), "phase": _text(call.get("phase")),
            "arguments": json.dumps(call.get("arguments"), ensure_ascii=False, default=repr),
            "error": _text(call.get("error"))}


#: What the world did on its own, as the page lists it (kinds of timeline entries).
_WORLD = {
    "fire": lambda e: f"trigger {_text(e.get('trigger'))} fired (#{_text(e.get('fire'))})"
                      + (" (queued)" if e.get("queued") else ""),
    "phone": lambda e: f"{_text(e.get('channel'))} from {_text(e.get('sender'))} on her "
                       f"phone: {_text(e.get('text'))}",
    "change": lambda e: f"{_text(e.get('app'))}.{_text(e.get('action'))} by "
                        f"{_text(e.get('by'))}",
    "contact_asked": lambda e: f"{_text(e.get('contact'))} asked (call {_text(e.get('call'))})",
    "contact_timed_out": lambda e: f"{_text(e.get('contact'))} did not answer in time "
                                   f"(call {_text(e.get('call'))})",
    "contact_failed": lambda e: f"{_text(e.get('contact'))} could not answer "
                                f"(call {_text(e.get('call'))})",
    "action_failed": lambda e: f"trigger {_text(e.get('trigger'))}: {_text(e.get('tool'))} "
                               f"failed: {_text(e.get('error'))}",
    "read_unreachable": lambda e: "she could not be reached (never free within two weeks)",
    "wrap_up_unread": lambda e: f"no wrap-up: she was {_text(e.get('state'))} at the end",
}


def _woke(sources: Sequence[Any]) -> set[tuple[Any, Any]]:
    """The (trigger, fire) pairs whose alerts or lines woke the agent."""
    return {(s.get("trigger"), s.get("fire")) for s in map(_map, sources)
            if s.get("trigger") is not None}


def _world(timeline: Sequence[Any], woke: set[tuple[Any, Any]]) -> list[dict[str, str]]:
    """What the world did that woke nobody, at its time: fires that woke no one, items on her
    phone, app changes made by others or by nobody, contacts asked, actions that failed."""
    out = []
    for entry in map(_map, timeline):
        kind = entry.get("kind")
        describe = _WORLD.get(str(kind))
        if describe is None:
            continue
        if kind == "fire" and (entry.get("trigger"), entry.get("fire")) in woke:
            continue
        if kind == "change" and entry.get("by") in ("agent", "user"):
            continue
        out.append({"when": when(entry.get("at")), "what": describe(entry)})
    return out


def _phone(timeline: Sequence[Any]) -> list[dict[str, str]]:
    """The items on her phone, each with when she saw it (her first read after it)."""
    entries = [e for e in map(_map, timeline) if e.get("kind") in ("phone", "read")]
    out = []
    for i, entry in enumerate(entries):
        if entry.get("kind") != "phone":
            continue
        seen = next((r for r in entries[i + 1:] if r.get("kind") == "read"
                     and isinstance(r.get("phone"), int) and r["phone"] > 0), None)
        out.append({"when": when(entry.get("at")), "channel": _text(entry.get("channel")),
                    "sender": _text(entry.get("sender")), "text": _text(entry.get("text")),
                    "seen": "never seen" if seen is None else
                    f"seen {when(seen.get('at'))}"
                    + (" (her wrap-up)" if seen.get("last_read") else "")})
    return out


def _folded(count: Any) -> str:
    """Which earlier wakes a wake's turns were sent as a digest ("" when none)."""
    if not isinstance(count, int) or count < 1:
        return ""
    return "wake 1" if count == 1 else f"wakes 1-{count}"


def view(record: Any) -> dict[str, Any] | None:
    """Plain values for the page from an episode's ``results["always_on"]`` (None when the
    episode has no always_on record)."""
    if not isinstance(record, Mapping) or not isinstance(record.get("timeline"), list):
        return None
    sent = {m.get("n"): _text(m.get("text")) for m in map(_map, _seq(record.get("response")))}
    wakes: list[dict[str, Any]] = []
    changes: dict[Any, list[dict[str, str]]] = {}
    folded: dict[Any, int] = {}
    for entry in map(_map, record["timeline"]):
        kind = entry.get("kind")
        if kind == "change":
            changes.setdefault(entry.get("wake"), []).append({
                "when": when(entry.get("at")), "app": _text(entry.get("app")),
                "action": _text(entry.get("action")), "by": _text(entry.get("by")),
                "phase": _text(entry.get("phase"))})
        elif kind == "changes_folded":
            folded[entry.get("wake")] = int(entry.get("count") or 0)
        elif kind == "wake":
            wakes.append(entry)
    rows = []
    for entry in wakes:
        n = entry.get("wake")
        listed = changes.get(n, [])
        rows.append({
            "n": _text(n), "when": when(entry.get("at")), "final": bool(entry.get("final")),
            "woke": [_source(_map(s)) for s in _seq(entry.get("sources"))],
            "sent": [{"n": _text(m), "text": sent.get(m, "")} for m in _seq(entry.get("sent"))],
            "quiet": bool(entry.get("quiet")), "nudged": bool(entry.get("nudged")),
            "folded": _folded(_map(entry.get("context")).get("folded_wakes")),
            "tool_calls": [_call(_map(c)) for c in _seq(entry.get("tool_calls"))],
            "changes": listed[:CHANGES_SHOWN],
            "more_changes": max(0, len(listed) - CHANGES_SHOWN) + folded.get(n, 0),
            "note": _text(entry.get("private_note"))})
    summary = _map(record.get("summary"))
    pending = [(k.replace("_", " "), _map(v).get("count"))
               for k, v in _map(summary.get("pending")).items() if _map(v).get("count")]
    woke = {pair for entry in wakes for pair in _woke(_seq(entry.get("sources")))}
    return {"end_reason": _text(record.get("end_reason")),
            "end_note": _text(record.get("end_note")),
            "timezone": _text(record.get("timezone")),
            "span": f"{when(record.get('start'))} to "
                    f"{when(record.get('end')) if record.get('end') else 'no end time'}",
            "counts": [(k.replace("_", " "), _text(v))
                       for k, v in _map(summary.get("counts")).items()],
            "pending": [(k, _text(v)) for k, v in pending],
            "chat": [_chat_entry(_map(e)) for e in _seq(record.get("conversation"))],
            "wakes": rows,
            "phone": _phone(record["timeline"]),
            "world": _world(record["timeline"], woke)}
