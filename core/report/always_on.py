"""An always_on episode as a person reads it: the user's chat with times (when she read each
message), the run wake by wake (what woke the agent, what it sent her, its tool calls, the app
changes around it), the items on her phone, and what the world did that woke nobody.

This module turns ``results["always_on"]`` (plain JSON from an episode's line) into plain
values for the page, reading them defensively (:mod:`interplay.values.plain`): a field of an
unexpected shape is shown as text or left out, never a crash. It writes no markup.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from interplay.values.plain import as_json, as_map, as_seq, as_text

#: App changes listed per wake on the page (the timeline keeps up to 200 per wake).
CHANGES_SHOWN = 30


def when(at: Any) -> str:
    """A stored task time (ISO-8601 with its offset) as a person reads it."""
    try:
        return f"{dt.datetime.fromisoformat(str(at)):%a %Y-%m-%d %H:%M}"
    except ValueError:
        return as_text(at)


def _chat_entry(entry: Mapping[str, Any]) -> dict[str, str]:
    who, kind = as_text(entry.get("from")), as_text(entry.get("kind"))
    meta: list[str] = []
    if who == "agent":
        meta.append(f"message #{as_text(entry.get('n'))} · wake {as_text(entry.get('wake'))}")
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
                "meta": f"end: {as_text(entry.get('reason'))}", "text": as_text(entry.get("note"))}
    else:
        labels = {"opening": "her request", "line": "her line", "reply": "her reply",
                  "undelivered": f"never reached the agent ({as_text(entry.get('why'))})",
                  "wrap_up": "her last word, after the end (never sent)"}
        meta.append(labels.get(kind, kind))
        if entry.get("reply_to"):
            meta.append(f"to #{as_text(entry.get('reply_to'))}")
        if entry.get("wake") is not None:
            meta.append(f"reached the agent in wake {as_text(entry.get('wake'))}")
        if entry.get("done"):
            meta.append("done")
    return {"who": who if who in ("user", "agent") else "user", "when": when(entry.get("at")),
            "meta": " · ".join(meta), "text": as_text(entry.get("text"))}


def _source(source: Mapping[str, Any]) -> dict[str, str]:
    kind = as_text(source.get("kind"))
    label = {"opening": "her request", "line": "her line", "user_reply": "her reply",
             "alert": f"alert from {as_text(source.get('source'))}",
             "contact_reply": f"answer from {as_text(source.get('contact'))}",
             "check": f"check #{as_text(source.get('check'))}", "rules": "the rules (step)",
             "final_notice": "last-turn notice (step)"}.get(kind, kind)
    due = when(source.get("due")) if source.get("due") else ""
    return {"label": label, "due": due, "late": "late" if source.get("late") else "",
            "text": as_text(source.get("text"))}


def _call(call: Mapping[str, Any]) -> dict[str, str]:
    return {"name": as_text(call.get("name")), "phase": as_text(call.get("phase")),
            "arguments": as_json(call.get("arguments")),
            "error": as_text(call.get("error"))}


#: What the world did on its own, as the page lists it (kinds of timeline entries).
_WORLD = {
    "fire": lambda e: f"trigger {as_text(e.get('trigger'))} fired (#{as_text(e.get('fire'))})"
                      + (" (queued)" if e.get("queued") else ""),
    "phone": lambda e: f"{as_text(e.get('channel'))} from {as_text(e.get('sender'))} on her "
                       f"phone: {as_text(e.get('text'))}",
    "change": lambda e: f"{as_text(e.get('app'))}.{as_text(e.get('action'))} by "
                        f"{as_text(e.get('by'))}",
    "contact_asked": lambda e: f"{as_text(e.get('contact'))} asked (call {as_text(e.get('call'))})",
    "contact_timed_out": lambda e: f"{as_text(e.get('contact'))} did not answer in time "
                                   f"(call {as_text(e.get('call'))})",
    "contact_failed": lambda e: f"{as_text(e.get('contact'))} could not answer "
                                f"(call {as_text(e.get('call'))})",
    "action_failed": lambda e: f"trigger {as_text(e.get('trigger'))}: {as_text(e.get('tool'))} "
                               f"failed: {as_text(e.get('error'))}",
    "read_unreachable": lambda e: "she could not be reached (never free within two weeks)",
    "wrap_up_unread": lambda e: f"no wrap-up: she was {as_text(e.get('state'))} at the end",
    "world_only_repeats": lambda e: "the run ended: only the repeats of "
                                    f"{', '.join(map(as_text, as_seq(e.get('triggers'))))} "
                                    f"were left ({as_text(e.get('jumps'))} idle jumps)",
}


def _woke(sources: Sequence[Any]) -> set[tuple[Any, Any]]:
    """The (trigger, fire) pairs whose alerts or lines woke the agent."""
    return {(s.get("trigger"), s.get("fire")) for s in map(as_map, sources)
            if s.get("trigger") is not None}


def _world(timeline: Sequence[Any], woke: set[tuple[Any, Any]]) -> list[dict[str, str]]:
    """What the world did that woke nobody, at its time: fires that woke no one, items on her
    phone, app changes made by others or by nobody, contacts asked, actions that failed."""
    out = []
    for entry in map(as_map, timeline):
        kind = entry.get("kind")
        describe = _WORLD.get(str(kind))
        if describe is None:
            continue
        if kind == "fire" and (entry.get("trigger"), entry.get("fire")) in woke:
            continue
        if kind == "change" and entry.get("actor", entry.get("by")) in ("agent", "user"):
            continue
        out.append({"when": when(entry.get("at")), "what": describe(entry)})
    return out


def _phone(timeline: Sequence[Any]) -> list[dict[str, str]]:
    """The items on her phone, each with when she saw it (her first read after it)."""
    entries = [e for e in map(as_map, timeline) if e.get("kind") in ("phone", "read")]
    out = []
    for i, entry in enumerate(entries):
        if entry.get("kind") != "phone":
            continue
        seen = next((r for r in entries[i + 1:] if r.get("kind") == "read"
                     and isinstance(r.get("phone"), int) and r["phone"] > 0), None)
        out.append({"when": when(entry.get("at")), "channel": as_text(entry.get("channel")),
                    "sender": as_text(entry.get("sender")), "text": as_text(entry.get("text")),
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
    sent = {m.get("n"): as_text(m.get("text")) for m in map(as_map, as_seq(record.get("response")))}
    wakes: list[dict[str, Any]] = []
    changes: dict[Any, list[dict[str, str]]] = {}
    folded: dict[Any, int] = {}
    for entry in map(as_map, record["timeline"]):
        kind = entry.get("kind")
        if kind == "change":
            changes.setdefault(entry.get("wake"), []).append({
                "when": when(entry.get("at")), "app": as_text(entry.get("app")),
                "action": as_text(entry.get("action")), "by": as_text(entry.get("by")),
                "phase": as_text(entry.get("phase"))})
        elif kind == "changes_folded":
            folded[entry.get("wake")] = int(entry.get("count") or 0)
        elif kind == "wake":
            wakes.append(entry)
    rows = []
    for entry in wakes:
        n = entry.get("wake")
        listed = changes.get(n, [])
        rows.append({
            "n": as_text(n), "when": when(entry.get("at")), "final": bool(entry.get("final")),
            "woke": [_source(as_map(s)) for s in as_seq(entry.get("sources"))],
            "sent": [{"n": as_text(m), "text": sent.get(m, "")} for m in as_seq(entry.get("sent"))],
            "quiet": bool(entry.get("quiet")), "nudged": bool(entry.get("nudged")),
            "folded": _folded(as_map(entry.get("context")).get("folded_wakes")),
            "tool_calls": [_call(as_map(c)) for c in as_seq(entry.get("tool_calls"))],
            "changes": listed[:CHANGES_SHOWN],
            "more_changes": max(0, len(listed) - CHANGES_SHOWN) + folded.get(n, 0),
            "note": as_text(entry.get("private_note"))})
    summary = as_map(record.get("summary"))
    pending = [(k.replace("_", " "), as_map(v).get("count"))
               for k, v in as_map(summary.get("pending")).items() if as_map(v).get("count")]
    woke = {pair for entry in wakes for pair in _woke(as_seq(entry.get("sources")))}
    return {"end_reason": as_text(record.get("end_reason")),
            "end_note": as_text(record.get("end_note")),
            "timezone": as_text(record.get("timezone")),
            "span": f"{when(record.get('start'))} to "
                    f"{when(record.get('end')) if record.get('end') else 'no end time'}",
            "counts": [(k.replace("_", " "), as_text(v))
                       for k, v in as_map(summary.get("counts")).items()],
            "pending": [(k, as_text(v)) for k, v in pending],
            "chat": [_chat_entry(as_map(e)) for e in as_seq(record.get("conversation"))],
            "wakes": rows,
            "phone": _phone(record["timeline"]),
            "world": _world(record["timeline"], woke)}
