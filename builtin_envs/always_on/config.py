"""The ``always_on`` step's settings (docs/always_on.md says what each does to the run)."""

from __future__ import annotations

import attrs

from interplay.builtin_envs.always_on.history import HistoryConfig

#: The real-time budget of a run whose settings name none (docs/always_on.md says why).
DEFAULT_BUDGET_S = 3600.0


@attrs.define
class AlwaysOnConfig:
    #: The seat of the agent under test (the always-on assistant).
    seat: str = "assistant"
    #: The scenario file (TOML or JSON): absolute, or relative to the current directory.
    scenario: str = ""
    #: The wake that is the last (it gets the last-turn notice).
    max_wakes: int = 100
    #: Real seconds the run may take: once the time left is less than twice the longest wake
    #: so far, the next wake is the closing one, and whatever still runs at the budget (a
    #: turn, a model call that hangs) is cut there. Sized for always-on-week on the embedded
    #: model.
    budget_s: float = DEFAULT_BUDGET_S
    #: A wake in which the agent wrote to nobody (and said something) gets a nudge turn.
    nudge: bool = True
    #: The nudge turn's tool_choice for its first model call ("" leaves it to the model).
    nudge_tool_choice: str = "required"
    #: Offer the agent the stay_quiet tool, to say in a wake that there is nothing to tell the user.
    stay_quiet: bool = True
    #: Scheduled checks; None: on when the run spans more than one day in the user's zone.
    checks: bool | None = None
    #: The shortest time ahead (an ISO-8601 duration) the agent may schedule a check for.
    min_check_interval: str = "PT3H"
    #: Tools the agent may not call (get_time stays).
    deny_tools: list[str] = attrs.Factory(list)
    #: The clock's rate during the agent's turns; None: the scenario's.
    rate: float | None = None
    #: Clock jumps with no wake, with only recurring triggers ahead, before a run without an
    #: end time is over (nothing can wake the agent any more).
    idle_jumps: int = 24
    #: What of its conversation the agent is sent each turn (docs/always_on.md).
    history: HistoryConfig = attrs.Factory(HistoryConfig)
    #: Text the step adds to every wake, e.g. "check the calendar before replying".
    reminder: str = ""
    #: Whether her done ends the run; None: in a one-sitting run (not spanning two days in
    #: her zone) it does, in a multi-day run it is recorded and the run goes on.
    done_ends_run: bool | None = None
