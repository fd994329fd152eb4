"""What an always_on run leaves in ``ctx.results["always_on"]``: plain JSON a verifier, the report
and a later reader take from the episode's line without interplay's Python objects.

- ``response``: every ``message_user`` text of the agent's seat, in order, with its task time
  and wake (never the private notes); what text verifiers grade.
- ``conversation``: the user's chat for graders: her lines and the agent's messages with times
  and wakes, then what never reached the agent, then an end marker with the reason.
- ``replies``: one record per read of hers (when she read, wrote, and when her reply reached
  the agent, if a wake delivered it; what it answers; the outcome).
- ``timeline``: the run's entries in order (docs/always_on.md lists the kinds).
- ``summary``: counts, the end reason and note, the settings and what was pending at the end.
- ``queued_by_others``: what other seats queued for her before the run (never in her reads).
- ``real``: what real time did (each wake's seconds, the settles, the budget), kept beside the
  timeline, which a seed replays to the byte.

docs/always_on.md describes every key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from interplay.world import times

if TYPE_CHECKING:
    from interplay.builtin_envs.always_on.config import AlwaysOnConfig
    from interplay.world.events import Event
    from interplay.world.world import World


@attrs.frozen(kw_only=True)
class RunView:
    """What the records read of one run once it has ended (or was cut), made by the loop
    (:meth:`interplay.builtin_envs.always_on.run.Loop.view`) before it closes the world."""

    cfg: AlwaysOnConfig
    #: The scenario's name, else its source.
    scenario: str
    world: World
    #: Her name, as the end note says it.
    user_name: str
    #: The task time the run ended at (before her wrap-up read, which may come later).
    ended_us: int
    # How it ended (:class:`interplay.builtin_envs.always_on.ending.Outcome`).
    end_reason: str
    error_type: str | None
    error: str | None
    #: She said done without a word in a one-sitting run: it ended at once.
    done_at_once: bool
    #: The run ended because an agent turn failed.
    turn_failed: bool
    #: Each wake's timeline entry, and its real seconds.
    wakes: Sequence[dict[str, Any]]
    wake_real_s: Sequence[float]
    nudges: int
    #: Events told after the minute they fell due, and before their due time.
    late: int
    early: int
    # The real-time budget (:class:`interplay.builtin_envs.always_on.ending.Budget`).
    budget_closing: dict[str, Any] | None
    budget_spent: dict[str, Any] | None
    budget_cut: str | None
    #: One record per read of hers.
    replies: Sequence[dict[str, Any]]
    user_malformed: int
    sim_name: str
    done_ends_run: bool
    reply_lands: str
    #: Events that took effect but never reached the agent (a wake would have told them).
    held: Sequence[Event]
    #: What was left when the run ended, by kind.
    pending: Mapping[str, dict[str, Any]]
    # The settings as the run took them.
    rate: float
    checks: bool
    multi_day: bool
    longest_contact_limit_s: float
    turn_timeout_s: float | None
    #: How far the history policy folded (0 with no policy made), and its record.
    folded_wakes: int
    folded_turns: int
    history: dict[str, Any] | None


def build(run: RunView) -> dict[str, Any]:
    world = run.world
    reason = _reason(run)
    end = {"reason": reason, "note": end_note(run, reason)}
    return {
        "seat": run.cfg.seat,
        "scenario": run.scenario,
        "timezone": world.timezone,
        "start": times.iso(world.start, world.timezone),
        "end": None if world.end is None else times.iso(world.end, world.timezone),
        "ended_at": world.timeline.stamp(run.ended_us)["at"],
        # At a rate above 0 the final check-in's turn runs on the clock past the end time.
        "overran_s": 0.0 if world.end is None
        else round(max(0.0, run.ended_us / 1e6 - world.end), 6),
        "end_reason": reason,
        "end_note": end["note"],
        "error_type": run.error_type,
        "error": run.error,
        "response": response(run),
        "conversation": conversation(run, end),
        "replies": run.replies,
        "timeline": world.timeline.entries,
        "queued_by_others": queued_by_others(run),
        "real": {"wake_s": run.wake_real_s, "settled_calls": world.settled,
                 "settles": world.settles,
                 "budget": {"budget_s": run.cfg.budget_s, "closing": run.budget_closing,
                            "ran_out": run.budget_spent, "cut": run.budget_cut}},
        "summary": {"counts": counts(run), "app_changes_by": dict(world.changes_by),
                    "nudges_led_to": nudges_led_to(run),
                    "end_reason": reason, "end_note": end["note"],
                    "settings": settings(run), "pending": run.pending},
        "apps": {name: {k: v for k, v in app.state.items() if k != "_ids"}
                 for name, app in world.apps.items()},
        "triggers": world.triggers.state(),
    }


def _reason(run: RunView) -> str:
    return run.end_reason or ("error" if run.error_type else "cancelled")


def response(run: RunView) -> list[dict[str, Any]]:
    world = run.world
    return [{"n": m.number, "text": m.text, **world.timeline.stamp(m.at_us), "wake": m.wake,
             "phase": m.phase, "read": m.read_at_us is not None,
             "read_at": None if m.read_at_us is None else world.timeline.stamp(m.read_at_us)["at"],
             "wrap_up": m.wrap_up, "leftover": m.leftover}
            for m in world.chat.sent_by(run.cfg.seat)]


def queued_by_others(run: RunView) -> list[dict[str, Any]]:
    """Messages other seats queued for her before the run: in her chat's numbering, never in
    her reads in this run (which hold the agent's messages alone), never graded."""
    world = run.world
    return [{"n": m.number, "seat": m.seat, "text": m.text, **world.timeline.stamp(m.at_us)}
            for m in world.chat.sent if m.seat != run.cfg.seat]


def nudges_led_to(run: RunView) -> dict[str, int]:
    """How many nudges led to each outcome (``message``, ``stay_quiet``, ``tools``,
    ``reply``, ``nothing``, ``stopped``, ``cut``)."""
    out: dict[str, int] = {}
    for wake in run.wakes:
        if "nudge" in wake:
            led_to = str(wake["nudge"]["led_to"])
            out[led_to] = out.get(led_to, 0) + 1
    return out


def conversation(run: RunView, end: dict[str, Any]) -> list[dict[str, Any]]:
    world = run.world
    chat: list[tuple[float, int, dict[str, Any]]] = []
    for wake in run.wakes:
        for source in wake["sources"]:
            if source.get("from") != "user":
                continue
            entry = {"from": "user", "kind": source["kind"] if source["kind"] != "user_reply"
                     else "reply", "text": source.get("text", ""), "at": source["due"],
                     "t": source["due_t"], "wake": wake["wake"]}
            if source["kind"] == "user_reply":
                entry.update(reply_to=source.get("reply_to"), done=source.get("done", False))
            chat.append((entry["t"], 0, entry))
    for m in world.chat.sent_by(run.cfg.seat):
        stamp = world.timeline.stamp(m.at_us)
        entry = {"from": "agent", "kind": "message", "n": m.number, "text": m.text, **stamp,
                 "wake": m.wake, "read": m.read_at_us is not None,
                 "read_at": None if m.read_at_us is None
                 else world.timeline.stamp(m.read_at_us)["at"]}
        if m.wrap_up:
            entry["wrap_up"] = True
        if m.leftover:
            entry["leftover"] = True
        chat.append((stamp["t"], 1, entry))
    out = [entry for _, _, entry in sorted(chat, key=lambda item: (item[0], item[1]))]
    for event in [*run.held, *world.queue]:
        if event.kind == "user_reply":
            record = event.data["record"]
            out.append({"from": "user", "kind": "undelivered", "why": "held",
                        "text": event.data["text"], "at": record["wrote_at"],
                        "t": record["wrote_t"]})
        elif event.kind == "user_line" and event.data.get("text"):
            stamp = world.timeline.stamp(event.due_us)
            out.append({"from": "user", "kind": "undelivered",
                        "why": "held" if event in run.held else "not due",
                        "text": event.data["text"], **stamp})
    for record in run.replies:
        if record["last_read"] and record["text"]:
            out.append({"from": "user", "kind": "wrap_up", "text": record["text"],
                        "at": record["read_at"], "t": record["read_t"]})
    out.append({"from": "step", "kind": "end", **end, **world.timeline.stamp(run.ended_us)})
    return out


def counts(run: RunView) -> dict[str, int]:
    world = run.world
    sources = [s for wake in run.wakes for s in wake["sources"]]
    mine = world.chat.sent_by(run.cfg.seat)
    records = run.replies
    calls = [c for wake in run.wakes for c in wake.get("tool_calls", ())]
    contact_calls = world.contacts.calls
    return {
        "wakes": len(run.wakes),
        "nudges": run.nudges,
        "messages_sent": len(mine),
        "messages_read": sum(m.read_at_us is not None for m in mine),
        "leftover_messages": sum(m.leftover for m in mine),
        "user_lines": sum(s["kind"] in ("opening", "line") for s in sources),
        "user_reads": len(records),
        "user_replies": sum(s["kind"] == "user_reply" for s in sources),
        "user_nothing": sum(r["outcome"] == "nothing" for r in records),
        # Every done of hers (in a multi-day run it is recorded and the run goes on).
        "user_dones": sum(bool(r["done"]) for r in records if not r["last_read"]
                          and r["outcome"] != "error"),
        "user_malformed": run.user_malformed,
        "alerts": sum(s["kind"] == "alert" for s in sources),
        "contact_calls": len(contact_calls),
        "contact_replies": sum(s["kind"] == "contact_reply" for s in sources),
        "contact_timeouts": sum(c.status == "timed_out" for c in contact_calls),
        "checks_scheduled": len(world.chat.checks),
        "checks_due": sum(s["kind"] == "check" for s in sources),
        "tool_calls": len(calls),
        "tool_errors": sum("error" in c for c in calls),
        "app_changes": world.timeline.changes,
        "clock_jumps": world.timeline.jumps,
        "late_events": run.late,
        "early_events": run.early,
        "real_waits": world.clock.real_waits,
        "folded_wakes": run.folded_wakes,
        "folded_turns": run.folded_turns,
        "queued_by_others": sum(m.seat != run.cfg.seat for m in world.chat.sent),
    }


def settings(run: RunView) -> dict[str, Any]:
    cfg = run.cfg
    return {"rate": run.rate, "max_wakes": cfg.max_wakes, "budget_s": cfg.budget_s,
            "nudge": cfg.nudge, "nudge_tool_choice": cfg.nudge_tool_choice,
            "stay_quiet": cfg.stay_quiet, "checks": run.checks,
            "checks_from": "settings" if cfg.checks is not None else "run_length",
            "min_check_interval": cfg.min_check_interval, "deny_tools": list(cfg.deny_tools),
            "idle_jumps": cfg.idle_jumps,
            "longest_contact_limit_s": run.longest_contact_limit_s,
            "turn_timeout_s": run.turn_timeout_s, "multi_day": run.multi_day,
            "done_ends_run": run.done_ends_run, "reply_lands": run.reply_lands,
            "reminder": cfg.reminder, "contacts_side_by_side": cfg.contacts_side_by_side,
            "final_check_in": cfg.final_check_in,
            "history": run.history}


def end_note(run: RunView, reason: str) -> str:
    name = run.user_name
    world = run.world
    if reason == "end_time":
        assert world.end is not None
        return (f"The task's time ran out at {times.readable(world.end, world.timezone)}; "
                f"the agent had a final check-in.")
    if reason == "user_done":
        if run.done_at_once:
            return f"{name} said she was done without a word; the run ended at once."
        return f"{name} said she was done; the run ended after the agent's turn on it."
    if reason == "max_wakes":
        return (f"The run reached its cap of {run.cfg.max_wakes} wakes; the last one carried "
                f"the last-turn notice.")
    if reason == "budget":
        budget = f"The real-time budget of {run.cfg.budget_s:g} s"
        if run.budget_cut == "turn":
            return (f"{budget} ran out during wake {len(run.wakes)}: its turn was cut short "
                    f"there (what it sent is kept, marked leftover); no wrap-up was read.")
        if run.budget_cut is not None:
            where = "during her wrap-up read" if run.budget_cut == "wrap-up" else \
                "between wakes"
            return f"{budget} ran out after wake {len(run.wakes)}, {where}; the run ended there."
        return f"{budget} was nearly spent; the closing wake carried the last-turn notice."
    if reason == "finished_nothing_pending":
        return "Nothing could wake the agent any more, and nothing was pending."
    if reason == "stuck":
        left = ", ".join(f"{v['count']} {k.replace('_', ' ')}"
                         for k, v in run.pending.items() if v["count"])
        return f"Nothing could wake the agent any more, yet things were pending: {left}."
    if reason == "error":
        wake = len(run.wakes)
        if run.turn_failed:
            return (f"The agent's turn in wake {wake} failed ({run.error_type}); the run "
                    f"ended there.")
        where = f"after wake {wake}" if run.wakes else "before any wake"
        return f"The run stopped on an error ({run.error_type}) {where}: {run.error}."
    if reason == "user_error":
        sim = run.sim_name
        read = next((r["read"] for r in reversed(run.replies)
                     if r["outcome"] == "error"), None)
        at = f"read {read}" if read is not None else "setting up"
        return (f"The user simulator {sim!r} could not answer ({at}): {run.error}; the run "
                f"ended there, not scored.")
    return "The run was cancelled."


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """Per-episode numbers the run's summary averages."""
    c = result["summary"]["counts"]
    out = {key: float(c[key]) for key in ("wakes", "nudges", "messages_sent", "user_replies",
                                          "late_events", "early_events", "folded_wakes",
                                          "folded_turns")}
    # A run the real-time budget ended is scored as far as it went: the run's summary counts
    # it apart (``truncated``) rather than averaging it in unmarked.
    out["truncated"] = 1.0 if result["end_reason"] == "budget" else 0.0
    return out
