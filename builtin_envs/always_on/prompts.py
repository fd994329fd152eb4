"""What the always_on step tells the models it runs, in one place: the agent's rules and system
prompt, the line each waking event becomes, the nudge after a private note, the final notice,
and the prompt a modeled contact answers under. The loop's parts decide when each is sent
(:mod:`interplay.builtin_envs.always_on.delivery`); the wording is here, so changing what the
agent is told touches one file. (The digest of folded wakes has its own terser wording, in
:mod:`interplay.builtin_envs.always_on.history`.)
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING

from interplay.world import times

if TYPE_CHECKING:
    from interplay.values.records import Task
    from interplay.world.scenario import Scenario

#: Opens every line the step (not the user, not an app) adds to the agent's conversation.
STEP_MARK = "[always_on]"
CONTACT_PROMPT = ("You are {name}. {persona}\nYou receive messages from {user}'s assistant. "
                  "Write only your reply to each, briefly, as {name} would.")


def rules_text(name: str, timezone: str, *, checks: bool, stay_quiet: bool,
               min_check_interval: str) -> str:
    """What the agent is told of its situation (with the task's system prompt, or opening the
    first wake)."""
    rules = [f"You are {name}'s always-on assistant. You are woken when something "
             f"happens: {name} writes, an alert comes in, someone you contacted replies"
             + (", or a check you scheduled is due" if checks else "")
             + f". Each line you are given starts with its time ({timezone}).",
             f"{name} sees only what you send with message_user; your plain replies are "
             f"private notes she never reads."]
    if stay_quiet:
        rules.append(f"When there is nothing to tell {name}, call stay_quiet.")
    if checks:
        rules.append(f"To look at something again later, call schedule_check (at least "
                     f"{min_check_interval} ahead); list_checks and cancel_check "
                     f"manage them.")
    rules.append("get_time tells the current time.")
    return " ".join(rules)


def step_line(text: str) -> str:
    """A line the step itself adds to a wake (rules, nudge, final notice)."""
    return f"{STEP_MARK} {text}"


def agent_system_prompt(task_system_prompt: str | None, rules: str) -> str | None:
    """The agent's system prompt: the task's with the rules after it; None when the task has
    none (the rules then open the first wake)."""
    return f"{task_system_prompt}\n\n{rules}" if task_system_prompt else None


def opening_text(task: Task, scenario: Scenario, hers: str = "") -> str:
    """The user's first line: the task's prompt, else her opening's words (``hers``), else the
    scenario's opening ("" for none)."""
    return task.prompt if isinstance(task.prompt, str) else hers or scenario.opening


def late_when(when: str, reached: datetime) -> str:
    """An event's time as the agent reads it when it reaches the agent after the minute it
    fell due in (it came while a turn ran on): when it was due, and when it reached it."""
    return f"{when}; reached you at {reached:%H:%M}"


def reminder_text(reminder: str) -> str:
    """The step's reminder, added to every wake (``always_on.reminder``)."""
    return f"Reminder: {reminder}"


def user_line(when: str, name: str, text: str) -> str:
    """A line the user wrote, as the agent is given it."""
    return f"[{when}] {name} (the user) wrote: {text}"


def user_reply_line(when: str, name: str, reply_to: int | None, text: str) -> str:
    about = f" to your message #{reply_to}" if reply_to else ""
    return f"[{when}] {name} (the user) replied{about}: {text}"


def alert_line(when: str, source: str, text: str) -> str:
    return f"[{when}] Alert from {source}: {text}"


def contact_line(when: str, channel: str, who: str, text: str | None) -> str:
    return f"[{when}] {channel.capitalize()} from {who}: {text}"


def check_line(when: str, number: int, note: str) -> str:
    return f"[{when}] Your check #{number} is due: {note}"


def nudge_text(name: str, stay_quiet: bool) -> str:
    """Sent after a wake's reply that was only a private note."""
    quiet = " If there is nothing to tell her, call stay_quiet." if stay_quiet else ""
    return (f"Your reply above is a private note: {name} does not see it. To write to her, "
            f"call message_user.{quiet}")


def final_notice(reason: str, name: str, now: datetime, timezone: str,
                 check_in: str = "") -> str:
    """Opens the run's last wake: at the scenario's end time (``check_in``, when given, with
    its ``{time}`` and ``{name}`` filled in one pass), or when the run ends otherwise
    (``reason``)."""
    if reason == "end_time":
        when = times.readable(now, timezone)
        if check_in:
            values = {"time": when, "name": name}
            return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], m[0]), check_in)
        return (f"Final check-in ({when}): the task's time is up. "
                f"This is your last turn; tell {name} what she needs to know with "
                f"message_user.")
    return f"This is your last turn; tell {name} what she needs to know now."
