"""What the judge reads of an always_on run besides the user's chat: the run's context and a
wake-by-wake summary, as text, from the run's plain records (``episode.results["always_on"]``
and ``["user"]``, docs/always_on.md).

Never every wake's trajectory, and never the agent's private notes (a wake's
``private_note``, its plain replies): the user never read them, so they are not graded as if
she had. What woke the agent, what it called and what changed in the world are facts of the
run, shown briefly. Nothing here calls a model or changes a record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The parts of the run's context a verifier may name (``context = [...]``).
CONTEXT_PARTS = ("scenario", "user", "triggers", "phone", "apps")
#: What the judge is shown when the verifier names no parts of its own.
DEFAULT_CONTEXT = ("scenario", "triggers")
#: Characters of one piece of world text (an alert, a contact's answer, tool arguments).
SNIPPET = 240

PREAMBLE = (
    "This was an always_on run: the assistant lived through simulated time, woken only when "
    "something happened, and reached the user only through messages (marked ASSISTANT "
    "message in the transcript, with their times); everything else it did happened in the "
    "world, summarized below wake by wake. Grade the run as the user lived it: what she was "
    "told and when, set against what actually happened. The assistant's claims are not "
    "evidence; the summary and the run's end are.")

_SOURCES = {"opening": "her opening request", "line": "a line from her",
            "user_reply": "her reply", "alert": "an alert", "contact_reply": "a contact's answer",
            "check": "its own scheduled check", "rules": "the run's rules",
            "reminder": "the run's reminder",
            "final_notice": "the last-turn notice"}


def snippet(value: Any, limit: int = SNIPPET) -> str:
    """``value`` as one line of at most ``limit`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def fit(lines: Sequence[str], max_chars: int) -> str:
    """``lines`` joined, keeping whole lines from both ends when they do not all fit: the run's
    start and its end matter most to a judge."""
    text = "\n".join(lines)
    if len(text) <= max_chars:
        return text
    head: list[str] = []
    tail: list[str] = []
    used = 0
    budget = max_chars - 60  # the marker line
    i, j = 0, len(lines) - 1
    while i <= j:
        line = lines[i] if len(head) <= len(tail) else lines[j]
        if used + len(line) + 1 > budget:
            break
        if len(head) <= len(tail):
            head.append(line)
            i += 1
        else:
            tail.insert(0, line)
            j -= 1
        used += len(line) + 1
    return "\n".join([*head, f"[... {j - i + 1} lines left out ...]", *tail])


# -- the run's context ------------------------------------------------------------------------


def context(record: Mapping[str, Any], user: Mapping[str, Any], parts: Iterable[str],
            max_chars: int) -> str:
    """The parts of the run's context the verifier names, as one section."""
    lines = ["Run context:"]
    for part in parts:
        lines += _PARTS[part](record, user)
    return fit(lines, max_chars)


def _scenario(record: Mapping[str, Any], user: Mapping[str, Any]) -> list[str]:
    lines = [f"- Scenario {record.get('scenario')!s}: from {record.get('start')} to "
             f"{record.get('end') or '(no set end)'} in {record.get('timezone')}; the run "
             f"ended at {record.get('ended_at')}."]
    if user:
        who = f"{user.get('name')}" + (f" <{user['email']}>" if user.get("email") else "")
        lines.append(f"- The user: {who}: {snippet(user.get('description') or '', 600)}")
        if user.get("scenario"):
            lines.append(f"- What she was after (the assistant was not told this): "
                         f"{snippet(user['scenario'], 1200)}")
    return lines


def _user(record: Mapping[str, Any], user: Mapping[str, Any]) -> list[str]:
    if not user:
        return []
    awake = user.get("awake")
    busy = "; ".join(f"{b.get('label') or 'busy'} {b.get('start')}-{b.get('end')}"
                     + (f" ({', '.join(b['days'])})" if b.get("days") else "")
                     for b in user.get("busy") or () if isinstance(b, Mapping))
    return [f"- Her day ({user.get('timezone')}): awake "
            f"{'-'.join(awake) if awake else 'at any hour'}; busy: {busy or 'never'}."]


def _triggers(record: Mapping[str, Any], user: Mapping[str, Any]) -> list[str]:
    lines = ["- Trigger log (what the world did on its own):"]
    shown = {"fire": lambda e: f"trigger {e.get('trigger')} fired (#{e.get('fire')})"
                               + (" (queued)" if e.get("queued") else ""),
             "action_failed": lambda e: f"trigger {e.get('trigger')} #{e.get('fire')}: tool "
                                        f"{e.get('tool')} failed: {snippet(e.get('error'))}",
             "contact_asked": lambda e: f"{e.get('contact')} was asked (call {e.get('call')})",
             "contact_timed_out": lambda e: f"{e.get('contact')} did not answer in time "
                                            f"(call {e.get('call')})",
             "contact_failed": lambda e: f"{e.get('contact')} could not answer "
                                         f"(call {e.get('call')})"}
    for entry in _timeline(record):
        describe = shown.get(entry.get("kind"))
        if describe is not None:
            lines.append(f"  [{entry.get('at')}] {describe(entry)}")
    return lines if len(lines) > 1 else ["- Trigger log: no trigger fired."]


def _phone(record: Mapping[str, Any], user: Mapping[str, Any]) -> list[str]:
    lines = ["- What reached her phone:"]
    lines += [f"  [{e.get('at')}] {e.get('channel')} from {e.get('sender')}: "
              f"{snippet(e.get('text'))}" for e in _timeline(record) if e.get("kind") == "phone"]
    return lines if len(lines) > 1 else ["- Nothing reached her phone."]


def _apps(record: Mapping[str, Any], user: Mapping[str, Any]) -> list[str]:
    apps = record.get("apps") or {}
    return ["- The apps at the end:"] + [f"  {name}: {snippet(state, 2000)}"
                                         for name, state in apps.items()]


_PARTS = {"scenario": _scenario, "user": _user, "triggers": _triggers, "phone": _phone,
          "apps": _apps}


def _timeline(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [e for e in record.get("timeline") or () if isinstance(e, Mapping)]


# -- wake by wake -----------------------------------------------------------------------------


def wakes(record: Mapping[str, Any], max_chars: int) -> str:
    """Each wake's time, what woke the agent, what it sent the user, its tool calls and the
    app changes in it; then how the run ended and what was pending."""
    timeline = _timeline(record)
    changes: dict[Any, list[str]] = {}
    for entry in timeline:
        if entry.get("kind") == "change":
            changes.setdefault(entry.get("wake"), []).append(
                f"{entry.get('app')} {entry.get('action')} by {entry.get('by')} "
                f"{snippet(entry.get('data') or {}, 160)}")
        elif entry.get("kind") == "changes_folded":
            changes.setdefault(entry.get("wake"), []).append(
                f"{entry.get('count')} more changes")
    sent = {m.get("n"): m for m in record.get("response") or () if isinstance(m, Mapping)}
    lines = ["Wake by wake (what the assistant did; its private notes are not shown):"]
    woken = [e for e in timeline if e.get("kind") == "wake"]
    for entry in woken:
        n = entry.get("wake")
        head = f"Wake {n}, {entry.get('at')}" + (" (the final one)" if entry.get("final") else "")
        woken_by = _woken_by(entry.get("sources") or ())
        lines.append(f"{head}: woken by {woken_by}" + ("" if woken_by[-1:] in ".!?" else "."))
        numbers = [k for k in entry.get("sent") or () if k in sent]
        if numbers:
            chars = sum(len(str(sent[k].get("text") or "")) for k in numbers)
            lines.append(f"  Sent the user {len(numbers)} message(s) "
                         f"({', '.join(f'#{k}' for k in numbers)}; {chars} characters).")
        elif entry.get("quiet"):
            lines.append("  Stayed quiet on purpose (stay_quiet).")
        else:
            lines.append("  Sent the user nothing.")
        if entry.get("nudged"):
            lines.append("  Was nudged to write to someone.")
        calls = [c for c in entry.get("tool_calls") or () if isinstance(c, Mapping)
                 and c.get("name") not in ("message_user", "stay_quiet")]
        if calls:
            lines.append("  Tool calls: " + "; ".join(
                f"{c.get('name')}({snippet(c.get('arguments') or '', 160)})"
                + (f" -> error: {snippet(c['error'], 120)}" if c.get("error") else "")
                for c in calls))
        if changes.get(n):
            lines.append("  App changes: " + "; ".join(changes.pop(n)))
    between = [c for items in changes.values() for c in items]  # of no wake shown
    if between:
        lines.append("Changes outside any wake: " + "; ".join(between))
    if not woken:
        lines.append("The assistant was never woken.")
    lines += ending(record)
    return fit(lines, max_chars)


def _woken_by(sources: Sequence[Any]) -> str:
    out = []
    for s in sources:
        if not isinstance(s, Mapping):
            continue
        kind = str(s.get("kind"))
        what = _SOURCES.get(kind, kind)
        if kind == "user_reply" and s.get("reply_to"):
            what += f" to #{s['reply_to']}"
        elif kind == "alert":
            what += f" from {s.get('source')}: {snippet(s.get('text'))}"
        elif kind == "contact_reply":
            what += f" from {s.get('contact')}: {snippet(s.get('text'))}"
        elif kind == "check":
            what += f" #{s.get('check')}: {snippet(s.get('text'))}"
        if s.get("late"):
            what += " (late)"
        out.append(what)
    return "; ".join(out) or "nothing recorded"


def ending(record: Mapping[str, Any]) -> list[str]:
    """How the run ended and what was pending then."""
    lines = [f"The run ended: {record.get('end_reason')}. {record.get('end_note') or ''}".strip()]
    pending = (record.get("summary") or {}).get("pending") or {}
    left = []
    for kind, item in pending.items():
        if isinstance(item, Mapping) and item.get("count"):
            first = [_pending_item(x) for x in (item.get("first") or ())[:3]]
            left.append(f"{kind.replace('_', ' ')}: {item['count']}"
                        + (f" ({'; '.join(first)})" if first else ""))
    lines.append("Pending at the end: " + (" | ".join(left) if left else "nothing."))
    return lines


def _pending_item(item: Any) -> str:
    if not isinstance(item, Mapping):
        return snippet(item, 120)
    label = f"#{item['n']} " if "n" in item else (f"{item['at']} " if "at" in item else "")
    text = item.get("text") or item.get("note") or item.get("contact") or item.get("trigger")
    return label + snippet(text or "", 120)
