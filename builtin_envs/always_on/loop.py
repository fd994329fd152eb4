"""One always_on run: the loop that builds the world and her side, sets up the agent's seat,
composes the parts that run it (:mod:`.arrivals`, :mod:`.delivery`, :mod:`.wakes`,
:mod:`.ending`), has her wrap-up read and hands what the run leaves to :mod:`.records` (see
:mod:`interplay.builtin_envs.always_on` for what it does and docs/always_on.md for the records
it leaves). The world owns the clock, the queue and what events do; the user's side owns her
reads.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from interplay.builtin_envs.always_on.arrivals import Arrivals
from interplay.builtin_envs.always_on.delivery import ContactSessions, Delivery
from interplay.builtin_envs.always_on.ending import Budget, Outcome
from interplay.builtin_envs.always_on.history import HistoryFold, resolve
from interplay.builtin_envs.always_on.records import RunView
from interplay.builtin_envs.always_on.wakes import Wakes
from interplay.builtin_envs.user_sim_step import UserSide, make_sim, person_from
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.usersim import UserSimError, set_up
from interplay.errors import ErrorType, InterplayError, error_of
from interplay.log import get_logger
from interplay.values.tools import Tool
from interplay.world import times
from interplay.world.chat import CHANNEL_TOOLS, CHECK_TOOLS, ChatSettings
from interplay.world.scenario import Scenario, build_world
from interplay.world.world import World, denied

if TYPE_CHECKING:
    from interplay.builtin_envs.always_on.config import AlwaysOnConfig

log = get_logger("interplay.envs.always_on")


def spans_days(scenario: Scenario) -> bool:
    """Does the run span more than one day in the user's zone?"""
    end = scenario.end_time
    if end is None:
        return False
    tz = str(scenario.user.get("timezone") or scenario.timezone)
    try:
        times.zone(tz)
    except ValueError:
        tz = scenario.timezone  # her zone is refused where it is checked
    return times.local(end, tz).date() > times.local(scenario.start_time, tz).date()


def deny_problems(deny: Sequence[str], where: str, *, stay_quiet: bool,
                  checks: bool) -> list[str]:
    """A deny-list that names one of the agent's ways to the user: ``message_user``,
    ``stay_quiet``, ``get_time`` or a check tool while checks are on. (A pattern such as ``*``
    never takes them: only a name can, and that is refused here, so it is never by accident.)"""
    out = []
    for name in deny:
        if name == "message_user":
            out.append(f"{where}: message_user is the agent's only way to reach the user; a "
                       f"deny-list never takes it")
        elif name == "get_time":
            out.append(f"{where}: get_time is always there while the clock is set; a "
                       f"deny-list never takes it")
        elif name == "stay_quiet":
            out.append(f"{where}: stay_quiet is how the agent says there is nothing to tell "
                       f"her; to not offer it, set always_on.stay_quiet = false")
        elif name in CHECK_TOOLS and checks:
            out.append(f"{where}: {name} is one of the agent's scheduled checks; to not offer "
                       f"them, set always_on.checks = false")
        elif not isinstance(name, str) or not name.strip():
            out.append(f"{where}: {name!r} is not a tool name or a pattern")
    return out


class Loop:
    """One always_on run: its parts made and composed (the clock and the queue,
    :mod:`.arrivals`; what reaches whom, :mod:`.delivery`; the wakes, :mod:`.wakes`; how it
    ends, :mod:`.ending`), her set-up and wrap-up, and what it leaves (:meth:`view`)."""

    def __init__(self, cfg: AlwaysOnConfig, scenario: Scenario, ctx: EpisodeContext, *,
                 step: str) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.scenario = scenario
        self.multi_day = spans_days(self.scenario)
        self.user_record: dict[str, Any] = ctx.results["user"]
        done_ends_run = self.cfg.done_ends_run if self.cfg.done_ends_run is not None \
            else not self.multi_day
        person, schedule = person_from(self.user_record)
        person = attrs.evolve(person, done_ends_run=done_ends_run)
        self.checks = self.cfg.checks if self.cfg.checks is not None else self.multi_day
        self.contact_sessions = ContactSessions(ctx, user_name=person.name)
        self.world: World = build_world(
            self.scenario, clock=ctx.clock, rng=_world_rng(ctx),
            user_name=person.name,
            chat=ChatSettings(stay_quiet=self.cfg.stay_quiet, checks=self.checks,
                              min_check_interval_s=times.parse_duration(
                                  self.cfg.min_check_interval)),
            ask=self.contact_sessions.ask, contacts_side_by_side=self.cfg.contacts_side_by_side)
        # ``step``: the step's name, as her sim and the logs know it.
        self.user = UserSide(self.world, make_sim(self.user_record), person, schedule,
                             done_ends_run=done_ends_run,
                             sim_name=self.user_record["user_sim"], step=step,
                             reply_lands=self.user_record.get("reply_lands", "anyway"),
                             seat=self.cfg.seat)
        self.world.chat.on_message = self.user.on_message
        # A change the agent or she makes names the seat that made it.
        self.world.seats = {"agent": self.cfg.seat,
                            "user": min(self.user.sim.seats(), default="user")}
        self.outcome = Outcome()
        self.budget = Budget(self.world, self.cfg.budget_s, longest_contact_limit_s=max(
            (c.limit_s for c in self.scenario.contacts if not c.replies), default=0.0))
        #: The task time the run ended at (before her wrap-up read, which may come later).
        self.ended_us = self.world.clock.now_us()
        #: The agent seat's turn timeout (known once its agent is made, in run()).
        self.turn_timeout_s: float | None = None
        self.arrivals = Arrivals(self.world, self.user, self.outcome, seat=self.cfg.seat,
                                 idle_jumps=self.cfg.idle_jumps)
        self.delivery = Delivery(self.world, self.cfg, task=ctx.task, scenario=self.scenario,
                                 person=person, checks=self.checks)
        self.wakes = Wakes(self.world, self.cfg,
                           rate=self.cfg.rate if self.cfg.rate is not None else self.scenario.rate,
                           arrivals=self.arrivals, delivery=self.delivery, budget=self.budget,
                           outcome=self.outcome, done_ends_run=done_ends_run,
                           episode_id=ctx.info.episode_id)

    async def run(self) -> None:
        """The run to its end and her wrap-up read; what it leaves is read from :meth:`view`
        (:mod:`interplay.builtin_envs.always_on.records`) before :meth:`close`."""
        world, ctx, outcome = self.world, self.ctx, self.outcome
        log.debug("always_on.start", episode_id=ctx.info.episode_id, triggers=len(
            world.triggers.runs), contacts=len(world.contacts.specs), apps=len(world.apps))
        try:
            if self.user_record.get("tools"):
                for seat in self.user.sim.seats():
                    user_agent = ctx.agent(seat)
                    user_agent.tools = [*user_agent.tools,
                                        *world.user_tools(self.user_record["tools"])]
            await set_up(self.user.sim, self.user.person, ctx, name=self.user.sim_name,
                         step=self.user.step)
            self.delivery.queue_opening()
            agent = ctx.agent(self.cfg.seat)
            # A budget below it was warned of when the run started (AlwaysOn.check_seats).
            self.turn_timeout_s = agent.spec.timeout_s
            deny = self._deny_list()
            own = world.tools_for(self.cfg.seat, deny)
            _refuse_clashes(self.cfg.seat, agent.tools, own)
            agent.tools = [*(t for t in agent.tools if not denied(t.name, deny)), *own]
            policy = resolve(self.cfg.history, agent)
            task = self.delivery.agent_task()
            self.wakes.folder = HistoryFold(policy, tools=agent.tools, timezone=world.timezone,
                                       system=task.system_prompt,
                                       user_name=self.user.person.name,
                                       rules=None if ctx.task.system_prompt
                                       else self.delivery.rules())
            async with agent.chat(task) as session:
                # Read beside the trace's messages: what each model call was sent may be less.
                session.trace.info["history"] = policy.record()
                try:
                    async with asyncio.timeout_at(self.budget.deadline) as budget:
                        await self.wakes.run(session)
                except TimeoutError:
                    if not budget.expired():
                        raise
                    self.wakes.out_of_budget()
                except asyncio.CancelledError:
                    outcome.end_reason, outcome.error_type = "cancelled", ErrorType.CANCELLED
                    raise
                except Exception as exc:
                    outcome.end_reason = "error"
                    outcome.error_type, outcome.error = error_of(exc, ErrorType.ENV_ERROR,
                                                                 located=False)
                    raise
                if outcome.error_type in (None, ErrorType.USER_ERROR):
                    session.stop(f"always_on_{outcome.end_reason}")
        except UserSimError as exc:  # her sim could not set up
            outcome.end_reason = "user_error"
            outcome.error_type, outcome.error = error_of(exc, ErrorType.ENV_ERROR)
            raise
        finally:
            world.enter("end")
            self.ended_us = world.clock.now_us()
            await self._wrap_up()

    async def _wrap_up(self) -> None:
        """Her last read, after the last wake, when she would read it: at once when she is
        free, else when she is next free if that comes before the run's end; otherwise it is
        recorded unread (``wrap_up_unread``). None after a run that broke, one the budget cut,
        or one she ended with her done."""
        outcome = self.outcome
        if outcome.end_reason in ("error", "user_error", "cancelled", "user_done", "") \
                or self.budget.cut is not None:
            return
        world, schedule = self.world, self.user.schedule
        now = world.clock.now()
        read_at, mode = schedule.read_plan(now)
        if read_at is None or (read_at > now and world.end is not None
                               and read_at > world.end):
            world.timeline.add("wrap_up_unread", world.clock.now_us(),
                               state=schedule.state_at(now),
                               free_at=None if read_at is None
                               else times.iso(read_at, world.timezone))
            return
        world.jump_to(world.us(read_at), "wrap_up")
        try:
            async with asyncio.timeout_at(self.budget.deadline):
                record = await self.user.wrap_up(mode)
        except TimeoutError:
            self.budget.ran_out(len(self.wakes.entries), "wrap-up")
            return
        if record["outcome"] == "error":
            outcome.end_reason, outcome.error_type = "user_error", ErrorType.USER_ERROR
            outcome.error = record.get("error")

    def view(self) -> RunView:
        """What the run leaves, as :mod:`interplay.builtin_envs.always_on.records` reads it;
        taken before :meth:`close`."""
        user, outcome, budget, wakes = self.user, self.outcome, self.budget, self.wakes
        folder = wakes.folder
        return RunView(
            cfg=self.cfg, scenario=self.scenario.name or self.scenario.source, world=self.world,
            user_name=user.person.name, ended_us=self.ended_us,
            end_reason=outcome.end_reason, error_type=outcome.error_type, error=outcome.error,
            done_at_once=outcome.done_at_once, turn_failed=outcome.turn_failed,
            wakes=wakes.entries, wake_real_s=wakes.real_s, nudges=wakes.nudges,
            late=self.delivery.late, early=self.delivery.early,
            budget_closing=budget.closing, budget_spent=budget.spent, budget_cut=budget.cut,
            replies=user.records, user_malformed=user.malformed, sim_name=user.sim_name,
            done_ends_run=user.done_ends_run, reply_lands=user.reply_lands,
            held=self.arrivals.arrived, pending=self.arrivals.pending(),
            rate=wakes.rate, checks=self.checks, multi_day=self.multi_day,
            longest_contact_limit_s=budget.longest_contact_limit_s,
            turn_timeout_s=self.turn_timeout_s,
            folded_wakes=folder.folded if folder else 0,
            folded_turns=folder.folded_turns if folder else 0,
            history=folder.policy.record() if folder else None)

    async def close(self) -> None:
        """Close what the run opened (contacts, sessions, her sim, the world), once what it
        leaves has been read from it (:meth:`view`)."""
        world, ctx = self.world, self.ctx
        await world.contacts.aclose()
        await self.contact_sessions.close()
        await self.user.sim.close()
        world.close()
        log.debug("always_on.end", episode_id=ctx.info.episode_id, wakes=len(self.wakes.entries),
                  end_reason=self.outcome.end_reason, error_type=self.outcome.error_type)

    def _deny_list(self) -> list[str]:
        """The step's deny-list and the task's; a task from a taskset file that names the
        agent's channel to the user is refused here (a scenario's tasks were, at load)."""
        task = self.ctx.task
        extra = list(task.info.get("deny_tools") or ())
        problems = deny_problems(extra, f"task {task.idx} info.deny_tools",
                                 stay_quiet=self.cfg.stay_quiet, checks=self.checks)
        if problems:
            raise InterplayError(problems[0])
        return [*self.cfg.deny_tools, *extra]


def _refuse_clashes(seat: str, seat_tools: Sequence[Tool], world_tools: Sequence[Tool]) -> None:
    """A tool the seat already has (the env's, made per episode) may not take the name of one
    of the world's: the model's call would reach one of the two, and for a channel tool
    (``message_user``, ...) something other than her chat. Refused before the first turn."""
    mine = {t.name for t in world_tools}
    for tool in seat_tools:
        if tool.name in CHANNEL_TOOLS:
            raise InterplayError(f"seat {seat!r} has a tool {tool.name!r} of the env's, a name "
                                 f"always_on keeps for the agent's channel to the user "
                                 f"({', '.join(sorted(CHANNEL_TOOLS))}); rename the env's tool")
        if tool.name in mine:
            raise InterplayError(f"seat {seat!r} has a tool {tool.name!r} of the env's and an "
                                 f"app of the scenario has one of that name; rename one of "
                                 f"them")


def _world_rng(ctx: EpisodeContext) -> random.Random:
    """The world's own generator, seeded from the episode's: its draws (delays) never shift
    the episode's other uses of ``ctx.rng``."""
    return random.Random(ctx.rng.getrandbits(64))
