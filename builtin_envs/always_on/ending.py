"""How an always_on run ends: its outcome (why it ended, how it failed), set by the part of the
loop that finds it, and the real-time budget, which makes a wake the closing one and records
where it ran out."""

from __future__ import annotations

import time
from typing import Any

import attrs

from interplay.errors import ErrorType
from interplay.world.world import World

#: The next wake is the closing one once the budget's time left is under this many times the
#: longest wake so far (what runs past the budget is cut).
CLOSING_MARGIN = 2.0


@attrs.define
class Outcome:
    """Why the run ended, and its error if it failed."""

    #: ``end_time``, ``user_done``, ``max_wakes``, ``budget``, ``stuck``, ... ("" while it runs).
    end_reason: str = ""
    error_type: str | None = None
    error: str | None = None
    #: She said done without a word in a one-sitting run: it ended at once.
    done_at_once: bool = False
    #: The run ended because an agent turn failed (not because the run itself broke).
    turn_failed: bool = False

    def end(self, reason: str) -> None:
        """The run ends for ``reason``; her sim's failure is its error type too."""
        self.end_reason = reason
        if reason == "user_error":
            self.error_type = ErrorType.USER_ERROR


class Budget:
    """The run's real-time budget: when it runs out, what it keeps back for one more wake, why
    it made a wake the closing one, and where it ran out, if it did."""

    def __init__(self, world: World, budget_s: float, *, longest_contact_limit_s: float) -> None:
        self.world = world
        self.budget_s = budget_s
        self.started = time.monotonic()
        #: When the budget runs out (time.monotonic()).
        self.deadline = self.started + budget_s
        #: The longest real time a seat-played contact's answer may take (0 with none): a
        #: settle before a wake may wait that long, so the budget keeps it in reserve.
        self.longest_contact_limit_s = longest_contact_limit_s
        #: Why the budget chose the closing wake, when it did (:meth:`figures`).
        self.closing: dict[str, Any] | None = None
        #: When the budget ran out, if it did: the wake it came in or after, and the time.
        self.spent: dict[str, Any] | None = None
        #: The budget ran out while something still ran (a turn, her read): what it cut.
        self.cut: str | None = None

    def reserve_s(self, longest_wake_s: float) -> float:
        """The real time kept back for one more wake: twice the longest wake so far, and the
        longest contact limit (a settle before the wake may wait that long)."""
        return CLOSING_MARGIN * longest_wake_s + self.longest_contact_limit_s

    def closes(self, longest_wake_s: float) -> bool:
        """Might another wake like the longest so far, after a settle as long as the longest
        contact's limit, not end within the budget?"""
        return time.monotonic() + self.reserve_s(longest_wake_s) > self.deadline

    def moment(self, wake: int, now: float | None = None) -> dict[str, Any]:
        """Wake ``wake``, the task time and the real seconds spent of the budget."""
        spent = (time.monotonic() if now is None else now) - self.started
        return {"wake": wake, "at": self.world.timeline.stamp(self.world.clock.now_us())["at"],
                "spent_s": round(spent, 3)}

    def figures(self, wake: int, longest_wake_s: float) -> dict[str, Any]:
        """Why the budget made wake ``wake`` the closing one: the real seconds spent and left
        when it began, and the reserve that did not fit in them (twice the longest wake so
        far, and the longest contact limit)."""
        now = time.monotonic()
        return {**self.moment(wake, now),
                "left_s": round(max(0.0, self.deadline - now), 3),
                "reserve_s": round(self.reserve_s(longest_wake_s), 3),
                "longest_wake_s": longest_wake_s,
                "longest_contact_limit_s": self.longest_contact_limit_s}

    def ran_out(self, wake: int, cut: str) -> None:
        """The budget ran out in or after wake ``wake``, cutting ``cut`` (``turn``,
        ``between wakes``, ``wrap-up``)."""
        self.cut = cut
        self.spent = self.moment(wake)
