"""The ``always_on`` step: an assistant that lives through days of simulated time, woken by
events.

Wake sources: alerts, the user's replies, her scripted lines, contacts' replies and the checks
the agent scheduled. Between wakes the clock jumps to the next event (never past one) and the
world settles (contacts' answers in progress land, each up to its limit) before the next wake;
everything due in the same minute arrives in one wake. The clock runs at the task's rate only
during the agent's turns and is frozen otherwise; what falls due during a turn takes effect at
its time and reaches the agent at its next wake. The agent reaches the user only through
``message_user``; its plain reply is a private note she never reads, and a wake in which it
wrote to nobody gets one nudge turn. Lines the step adds are marked ``[always_on]``.

The run ends at ``end_time`` (a final check-in), on the user's done where it ends the run, at
``max_wakes``, on the real-time budget (which cuts what still runs at it), when nothing can
wake the agent any more (``finished_nothing_pending`` or ``stuck``), when an agent turn fails
(``error``, with its ``error_type``), or when her user sim fails (``user_error``). What it
leaves is in ``ctx.results["always_on"]`` (see :mod:`interplay.builtin_envs.always_on.records`
and docs/always_on.md).

This module owns the step: what it refuses at load (its settings are
:class:`~interplay.builtin_envs.always_on.config.AlwaysOnConfig`), and one run: the loop
(:class:`interplay.builtin_envs.always_on.loop.Loop`) runs it, then the step reads what it
leaves and closes it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from interplay.builtin_envs.always_on import prompts, records
from interplay.builtin_envs.always_on.config import AlwaysOnConfig
from interplay.builtin_envs.always_on.history import (
    floor_tokens,
    keeps_session,
    session_problem,
)
from interplay.builtin_envs.always_on.loop import Loop, deny_problems, spans_days
from interplay.builtin_envs.user_sim_step import UserSimStep, make_sim
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.env import SeatSpec
from interplay.contracts.step import Step
from interplay.contracts.usersim import UserSimError
from interplay.errors import ErrorType, InterplayError
from interplay.log import Verbatim, get_logger
from interplay.plugins import host as plugins
from interplay.run.loader import tasks_of
from interplay.values.clock import Clock
from interplay.values.records import Task
from interplay.world import times
from interplay.world.chat import ChatSettings
from interplay.world.scenario import Scenario, build_world, load_scenario, scenario_from

log = get_logger("interplay.envs.always_on")
#: Keys of a scenario file that set up the env around a world, not the world: a task's world
#: (info.world) may not set them; the env does.
ENV_KEYS = ("tasks", "seats", "verifiers", "always_on")


class AlwaysOn(Step):
    """An assistant that lives through days of simulated time, woken by events."""

    name = "always_on"
    Config: ClassVar[type] = AlwaysOnConfig
    writes = frozenset({"always_on"})

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._scenario: Scenario | None = None

    def scenario(self) -> Scenario:
        if self._scenario is None:
            if not self.config.scenario:
                raise InterplayError("always_on needs a scenario file (scenario = \"path\"), "
                                     "or tasks that bring their worlds (info.world)")
            self._scenario = load_scenario(Path(self.config.scenario))
        return self._scenario

    def scenario_of(self, task: Task) -> Scenario:
        """The world ``task`` runs in: its own (``info.world``, a scenario table as a
        generated task holds, with her ``info.user`` as its ``[user]``), else the step's
        scenario file. A task's world is checked as a file's is, in one line naming it."""
        world = task.info.get("world")
        if world is None:
            return self.scenario()
        if not isinstance(world, Mapping):
            raise InterplayError(f"task {task.idx} info.world: a scenario table (start, "
                                 f"timezone, apps, ...), got {type(world).__name__}")
        data = dict(world)
        for key in ENV_KEYS:
            if key in data:
                raise InterplayError(f"task {task.idx} info.world.{key}: the env sets it "
                                     f"(env.{key}); a task's world is the world alone")
        if "user" not in data and isinstance(task.info.get("user"), Mapping):
            data["user"] = dict(task.info["user"])
        return scenario_from(data, source=f"task {task.idx} info.world")

    def seats(self) -> set[str]:
        if not self.config.scenario:
            return {self.config.seat}
        try:
            contacts = {c.seat for c in self.scenario().contacts if c.persona}
        except InterplayError:
            contacts = set()
        return {self.config.seat, *contacts}

    def check(self, steps: Sequence[Step]) -> list[str]:
        cfg: AlwaysOnConfig = self.config
        users = [s for s in steps[:list(steps).index(self)] if isinstance(s, UserSimStep)] \
            if self in steps else [s for s in steps if isinstance(s, UserSimStep)]
        if not cfg.scenario:
            # Every task brings its world (info.world): it is checked when its episode starts.
            problems = [] if users else ["needs a user_sim step before it (who the user is)"]
            return problems + self._settings_problems(checks=cfg.checks is not False)
        try:
            scenario = self.scenario()
        except InterplayError as exc:
            return [str(exc)]
        problems: list[str] = []
        if not users:
            problems.append("needs a user_sim step before it (who the user is)")
        elif users[-1].config.timezone != scenario.timezone:
            problems.append(f"the user's time zone {users[-1].config.timezone!r} disagrees "
                            f"with the world's {scenario.timezone!r}; set "
                            f"user_sim.timezone to the scenario's")
        if users and users[-1].config.tools:
            offered = _app_tool_names(scenario)
            missing = [t for t in users[-1].config.tools if t not in offered]
            if missing:
                problems.append(f"user_sim.tools: no app of the scenario offers "
                                f"{', '.join(missing)}; its apps offer "
                                f"{', '.join(sorted(offered)) or 'no tools'}")
            if not make_sim(users[-1].record_settings()).seats():
                problems.append(f"user_sim.tools: the user sim {users[-1].config.user_sim!r} "
                                f"plays her with no seat, so nothing could call her tools")
        checks = cfg.checks if cfg.checks is not None else spans_days(scenario)
        problems += self._settings_problems(checks=checks)
        if cfg.budget_s > 0 and math.isfinite(cfg.budget_s):
            problems += budget_problems(cfg.budget_s, scenario)
        for task in tasks_of(scenario):
            problems += deny_problems(task.info.get("deny_tools") or (),
                                      f"tasks[{task.idx}].info.deny_tools",
                                      stay_quiet=cfg.stay_quiet, checks=checks)
        if users and users[-1].config.opening is not None and users[-1].config.opening.at:
            problems += _opening_problems(users[-1].config.opening.at, scenario)
        if users and cfg.history.max_context_tokens is not None and not problems:
            problems += self._budget_floor(scenario, users[-1].config.name)
        return problems

    def _settings_problems(self, *, checks: bool) -> list[str]:
        """What is wrong with the step's own settings, whatever the world."""
        cfg: AlwaysOnConfig = self.config
        problems: list[str] = []
        if cfg.max_wakes < 1:
            problems.append("max_wakes must be at least 1")
        if cfg.idle_jumps < 1:
            problems.append("idle_jumps must be at least 1")
        if cfg.rate is not None and (cfg.rate < 0 or not math.isfinite(cfg.rate)):
            problems.append("rate must be a finite number >= 0")
        if not (cfg.budget_s > 0 and math.isfinite(cfg.budget_s)):
            problems.append(f"budget_s must be a number of seconds more than 0, got "
                            f"{cfg.budget_s:g}")
        problems += times.check_delay(cfg.min_check_interval, "min_check_interval")
        problems += deny_problems(cfg.deny_tools, "deny_tools", stay_quiet=cfg.stay_quiet,
                                  checks=checks)
        problems += cfg.history.problems()
        return problems

    def _world_problems(self, scenario: Scenario, ctx: EpisodeContext) -> list[str]:
        """A task's own world, checked when its episode starts as a file's is at load: her
        zone against the world's, the budget against its contacts' limits."""
        problems = []
        zone = ctx.results["user"].get("timezone")
        if zone != scenario.timezone:
            problems.append(f"the user's time zone {zone!r} disagrees with the world's "
                            f"{scenario.timezone!r}")
        problems += budget_problems(self.config.budget_s, scenario)
        return problems

    def _budget_floor(self, scenario: Scenario, name: str) -> list[str]:
        """A budget that cannot hold the system prompt, the tools and the first wake of the
        scenario's tasks is refused (a taskset from a file is met at run time, where such a
        turn is sent whole and marked ``over_budget``)."""
        cfg: AlwaysOnConfig = self.config
        checks = cfg.checks if cfg.checks is not None else spans_days(scenario)
        world = build_world(scenario, clock=Clock(scenario.start_time, rate=0.0),
                            rng=random.Random(0), user_name=name,
                            chat=ChatSettings(stay_quiet=cfg.stay_quiet, checks=checks,
                                              min_check_interval_s=times.parse_duration(
                                                  cfg.min_check_interval)))
        try:
            tools = world.tools_for(cfg.seat, cfg.deny_tools)
        finally:
            world.close()
        rules = prompts.rules_text(name, scenario.timezone, checks=checks,
                                   stay_quiet=cfg.stay_quiet,
                                   min_check_interval=cfg.min_check_interval)
        when = times.readable(scenario.start_time, scenario.timezone)
        floor = 0
        for task in tasks_of(scenario):
            opening = prompts.opening_text(task, scenario)
            lines = [] if task.system_prompt else [prompts.step_line(rules)]
            if opening:
                lines.append(prompts.user_line(when, name, opening))
            system = prompts.agent_system_prompt(task.system_prompt, rules)
            floor = max(floor, floor_tokens(system, tools, "\n".join(lines),
                                            cfg.history.chars_per_token))
        budget = cfg.history.max_context_tokens
        if budget is not None and budget < floor:
            return [f"history.max_context_tokens {budget} cannot hold the system prompt, the "
                    f"tools and the first wake (about {floor} tokens); raise it to at least "
                    f"{floor}, or set history.mode = \"all\""]
        return []

    def check_seats(self, seats: Mapping[str, SeatSpec]) -> list[str]:
        """The budget against the agent seat's turn timeout, as the run resolved it: a budget
        below it is allowed (a short budget is how one takes a quick look at a long
        scenario), with a warning when the run starts: the budget, not the seat's timeout,
        then cuts a turn that hangs, and the run ends ``budget`` (scored as far as it went,
        counted apart as truncated) rather than as a timeout error. Folding asked for on a
        seat whose harness keeps its own session is refused (:meth:`history_problem`)."""
        spec = seats.get(self.config.seat)
        if spec is not None and self.config.budget_s < spec.timeout_s:
            log.warning("always_on.budget_below_turn_timeout", seat=self.config.seat,
                        budget_s=self.config.budget_s, turn_timeout_s=spec.timeout_s,
                        effect=Verbatim("the budget cuts a hung turn before its timeout; "
                                        "the run then ends on its budget, truncated"))
        problem = self.history_problem(seats)
        return [problem] if problem else []

    def history_problem(self, seats: Mapping[str, SeatSpec]) -> str | None:
        """Folding asked for on a seat whose harness keeps its own session."""
        spec = seats.get(self.config.seat)
        if not self.config.history.asks_to_fold or spec is None:
            return None
        try:
            harness = plugins.get("harnesses", spec.harness)
        except InterplayError:
            return None  # an unknown harness is refused where the seats are checked
        return session_problem(spec.harness) if keeps_session(harness) else None

    async def run(self, ctx: EpisodeContext) -> None:
        if "user" not in ctx.results:
            raise InterplayError("always_on needs a user_sim step before it")
        scenario = self.scenario_of(ctx.task)
        if "world" in ctx.task.info:
            problems = self._world_problems(scenario, ctx)
            if problems:
                raise InterplayError(f"task {ctx.task.idx} info.world: {'; '.join(problems)}")
        loop = Loop(self.config, scenario, ctx, step=self.name)
        try:
            await loop.run()
        finally:
            try:
                ctx.results["always_on"] = result = records.build(loop.view())
                ctx.metrics.update(records.metrics(result))
            finally:
                await loop.close()
        outcome = loop.outcome
        if outcome.error_type == ErrorType.USER_ERROR:
            # Recorded: now the episode is the user sim's failure, never scored.
            raise UserSimError(outcome.error or "the user sim failed")
        if outcome.end_reason == "error" and outcome.error_type is not None:
            # Recorded, not raised: the episode ends in the turn's error, never scored (the
            # trace of a turn the harness cut at its turn cap carries no error type itself).
            ctx.fail(outcome.error_type, outcome.error or f"the run ended on {outcome.error_type}")


def budget_problems(budget_s: float, scenario: Scenario) -> list[str]:
    """A budget no longer than a seat-played contact's ``limit_s`` is refused: a settle before
    a wake may wait that long for the contact's answer, so the budget could be spent before
    the agent's turn, and the closing wake (which keeps the longest limit in reserve) would
    come at once."""
    played = [c for c in scenario.contacts if not c.replies]
    longest = max(played, key=lambda c: c.limit_s, default=None)
    if longest is None or budget_s > longest.limit_s:
        return []
    return [f"budget_s {budget_s:g} cannot hold contact {longest.name!r}'s limit_s "
            f"{longest.limit_s:g}: a wait for its answer could spend the whole budget before "
            f"a turn; raise budget_s above {longest.limit_s:g} or lower the contact's limit_s"]


def _opening_problems(at: str, scenario: Scenario) -> list[str]:
    try:
        when = times.parse_when(at, scenario.timezone, scenario.start_time)
    except ValueError as exc:
        return [f"user_sim.opening.at: {exc}"]
    if when < scenario.start_time - 1e-6:
        return [f"user_sim.opening.at: {at} is before the start ({scenario.start}); give a time "
                f"in the run"]
    end = scenario.end_time
    if end is not None and when > end:
        return [f"user_sim.opening.at: {at} is after the end; give a time in the run"]
    return []


def _app_tool_names(scenario: Scenario) -> set[str]:
    return {t.name for app in scenario.make_apps() for t in app.tools()}


