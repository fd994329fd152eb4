"""What a mini-swe-agent segment's trajectory says: how it ended and the commands it ran.

mini-swe-agent saves its trajectory (``-o``: ``trajectory_format`` ``mini-swe-agent-1.1``)
after every step: its ``info`` (``exit_status``, ``submission``, ``model_stats``, its config)
and its ``messages``, each with an ``extra`` of its own (a model answer's ``actions``, a
command's ``returncode`` and ``exception_type``, the ``exit`` message that ends a run). The
harness keeps it whole on the trace as its own record, bounded (:func:`bounded`), and reads
from it how the segment ended (:func:`ending`) and which commands ran (:func:`commands`).

This module owns reading a trajectory; it must not start anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

#: Bytes of a segment's trajectory kept on the trace (as JSON); past them its messages lose
#: the model's raw responses (the trace's model calls hold them), then the messages go.
KEEP_TRAJECTORY = 8 * 1024 * 1024
#: How a run that ran out of one of its limits ends.
LIMITS = "LimitsExceeded"
TIME = "TimeExceeded"
SUBMITTED = "Submitted"
FORMAT = "RepeatedFormatError"


def load(path: Path) -> dict[str, Any] | None:
    """The trajectory at ``path``, or None when there is none (mini-swe-agent did not get
    to its first step) or it is not whole."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def info(trajectory: Mapping[str, Any] | None) -> dict[str, Any]:
    found = (trajectory or {}).get("info")
    return found if isinstance(found, dict) else {}


def messages(trajectory: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    found = (trajectory or {}).get("messages")
    return [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []


def exit_message(trajectory: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``extra`` of the message that ended the run (``role`` ``exit``), or empty."""
    found = messages(trajectory)
    if found and found[-1].get("role") == "exit":
        extra = found[-1].get("extra")
        return extra if isinstance(extra, dict) else {}
    return {}


@attrs.frozen
class Ending:
    """How a segment's run ended, as its trajectory says: ``status`` (mini-swe-agent's
    ``exit_status``: ``Submitted``, ``LimitsExceeded``, ``TimeExceeded``,
    ``RepeatedFormatError``, or the name of the exception that stopped it), its model calls
    and cost, and for an exception, its text."""

    status: str
    calls: int = 0
    cost: float = 0.0
    submission: str = ""
    exception: str = ""


def ending(trajectory: Mapping[str, Any] | None) -> Ending | None:
    """How the run ended, or None when the trajectory does not say (it was killed mid-step,
    or never saved one)."""
    about = info(trajectory)
    status = about.get("exit_status") or exit_message(trajectory).get("exit_status")
    if not status:
        return None
    stats = about.get("model_stats") if isinstance(about.get("model_stats"), dict) else {}
    extra = exit_message(trajectory)
    return Ending(status=str(status), calls=int(stats.get("api_calls") or 0),
                  cost=float(stats.get("instance_cost") or 0.0),
                  submission=str(about.get("submission") or ""),
                  exception=str(extra.get("exception_str") or ""))


@attrs.frozen
class Command:
    """One command the model asked for (a ``bash`` tool call), and whether it ran."""

    call_id: str
    #: Its result as the model read it (a tool message), or None (it submitted, or the run
    #: ended first).
    result: Mapping[str, Any] | None
    #: Seconds between the model's answer and its result, when both carry a time.
    duration_s: float = 0.0

    @property
    def timed_out(self) -> bool:
        extra = (self.result or {}).get("extra") or {}
        return extra.get("exception_type") == "TimeoutExpired"


def commands(trajectory: Mapping[str, Any] | None) -> list[Command]:
    """The tool calls of its model answers, in order, each with its result (a model
    answer's ``extra.actions``; a ``tool`` message's ``tool_call_id``)."""
    found = messages(trajectory)
    results = {m.get("tool_call_id"): m for m in found if m.get("role") == "tool"}
    out = []
    for message in found:
        if message.get("role") != "assistant":
            continue
        extra = message.get("extra") or {}
        asked = extra.get("timestamp")
        for action in extra.get("actions") or []:
            call_id = action.get("tool_call_id") if isinstance(action, dict) else None
            if not call_id:
                continue  # a text-based model's command has no call of its own
            result = results.get(call_id)
            answered = ((result or {}).get("extra") or {}).get("timestamp")
            duration = float(answered) - float(asked) \
                if isinstance(asked, int | float) and isinstance(answered, int | float) else 0.0
            out.append(Command(call_id=str(call_id), result=result,
                               duration_s=round(max(0.0, duration), 4)))
    return out


def bounded(trajectory: dict[str, Any], bound: int = KEEP_TRAJECTORY) -> dict[str, Any]:
    """The trajectory to keep on the trace: whole when its JSON fits ``bound`` bytes; else
    without the model's raw responses (``extra.response``: the model calls hold them); else
    its ``info`` alone, with how many messages were left out (``messages_cut``)."""
    if len(json.dumps(trajectory)) <= bound:
        return trajectory
    slim = {**trajectory, "messages": [
        {**m, "extra": {k: v for k, v in (m.get("extra") or {}).items() if k != "response"}}
        if isinstance(m.get("extra"), dict) else m for m in messages(trajectory)],
        "responses_cut": True}
    if len(json.dumps(slim)) <= bound:
        return slim
    return {k: v for k, v in trajectory.items() if k != "messages"} | {
        "messages": [], "messages_cut": len(messages(trajectory))}
