"""The ``harbor`` env: a folder of Harbor tasks (``env.path``: a dataset folder or one task),
each episode one of Harbor's trials.

A trial's course, as Harbor's ``SingleStepTrial`` runs it: the environment set up (the task's
image built from ``environment/``, cached by content; the container started), the agent run
on ``instruction.md`` in the task's working folder until it ends or the task's ``[agent]
timeout_sec`` passes (then it is stopped, and the tests still score what it left, as Harbor
grades an ``AgentTimeoutError``), then the verifier (:mod:`.verifier`). Each phase's start and
end are kept in ``results["harbor"]["timing"]``, named as Harbor's ``TrialResult`` names them.

With ``env.user_sim`` set the instruction becomes the user's scenario instead (with what the
task says she knows, ``[interplay.user]`` of task.toml): the agent hears only what she says,
she answers its questions turn by turn (the relay), and the agent's program is resumed in the
same container between her lines.

This module owns the env and its step; it must not score (the verifier does).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay import (
    Env,
    EpisodeContext,
    InterplayError,
    Relay,
    RelayConfig,
    SeatSpec,
    Step,
    Task,
    Verifier,
)
from interplay_harbor.tasks import HarborTask, read_tasks

#: The key of ``ctx.results`` (and of ``task.info``) this env writes.
RESULTS_KEY = "harbor"
#: Seconds a seat's segment may run beyond the task's agent timeout, so that the task's own
#: limit (which the tests still score) ends the agent first.
TIMEOUT_SLACK_S = 60.0


def examples() -> Path:
    """The ten example tasks shipped with this plugin (its test set and demo)."""
    return Path(str(resources.files("interplay_harbor") / "examples"))


@attrs.define
class HarborConfig:
    """Settings of the ``harbor`` env (``env.*``)."""

    #: A folder of Harbor tasks (a dataset: one folder per task) or one task's folder; empty:
    #: the ten example tasks this plugin ships.
    path: str = ""
    #: Only these tasks, by folder name; empty: every task of ``path``.
    tasks: list[str] = attrs.Factory(list)
    #: With env.user_sim: the agent's turns before the exchange stops.
    max_turns: int = 8
    #: With env.user_sim: who the user is when the task's [interplay.user] persona is unset.
    persona: str = "the person who asked for this task to be done; you know what the task " \
                   "says and only that"


class HarborEnv(Env):
    """Harbor tasks (terminal-bench 2.0's format): each one's image, its agent timeout, its
    tests run after the agent and its reward file read as Harbor reads it."""

    name = "harbor"
    Config: ClassVar[type] = HarborConfig
    needs_sandbox = True
    seats: ClassVar = {"assistant": SeatSpec(harness="chat"),
                       "user": SeatSpec(harness="null", trainable=False,
                                        sampling={"max_tokens": 256})}

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._tasks: list[HarborTask] | None = None
        # Read when the env loads: a task that cannot run is refused before any episode.
        self.harbor_tasks()

    def harbor_tasks(self) -> list[HarborTask]:
        """The tasks, read once (each checked: the first that cannot run is one line)."""
        if self._tasks is None:
            cfg: HarborConfig = self.config
            self._tasks = read_tasks(cfg.path or examples(), cfg.tasks or None)
            # The seat's segment outlasts the longest task's agent timeout: that limit is the
            # task's, and what the agent left is still scored when it passes.
            longest = max((t.agent_timeout_s or 0.0 for t in self._tasks), default=0.0)
            if longest + TIMEOUT_SLACK_S > SeatSpec().timeout_s:
                self.seats = {**self.seats, "assistant": attrs.evolve(  # type: ignore[misc]
                    self.seats["assistant"], timeout_s=longest + TIMEOUT_SLACK_S)}
        return self._tasks

    def check(self) -> None:
        self.harbor_tasks()
        super().check()

    def tasks(self) -> Iterable[Task]:
        for idx, task in enumerate(self.harbor_tasks()):
            info: dict[str, Any] = {RESULTS_KEY: task.info()}
            if task.user.knows:
                info["scenario"] = scenario(task)
            if task.user.persona:
                info["persona"] = task.user.persona
            if task.user.opening:
                info["opening"] = task.user.opening
            yield Task(idx=idx, prompt=task.instruction, info=info, workspace=task.workspace)

    def steps(self) -> list[Step]:
        cfg: HarborConfig = self.config
        return [HarborTrial(TrialConfig(max_turns=cfg.max_turns, persona=cfg.persona))]

    def verifiers(self) -> list[Verifier]:
        from interplay_harbor.verifier import HarborVerifier

        return [HarborVerifier()]


def scenario(task: HarborTask) -> str:
    """The user's scenario in the user-sim variant: the task as she asked for it, and what
    she knows beyond it."""
    return (f"You asked an assistant to do this task for you:\n\n{task.instruction.strip()}\n\n"
            f"What you know that the assistant may need (say it when asked; you know nothing "
            f"more): {task.user.knows.strip()}")


@attrs.define
class TrialConfig:
    """The ``harbor`` step's settings."""

    #: The seat that does the task.
    seat: str = "assistant"
    #: With a user sim: the agent's turns before the exchange stops.
    max_turns: int = 8
    #: With a user sim: her persona when the task names none.
    persona: str = ""


class HarborTrial(Step):
    """One Harbor trial up to its verifier: the environment set up, then the agent on the
    instruction under the task's agent timeout (or, with a user sim, the agent and the user
    in turn). Writes ``results["harbor"]``: the task's name, ``timing`` (environment_setup,
    agent_execution: started_at and finished_at, ISO 8601 UTC, and seconds),
    ``exception_info`` (an ``AgentTimeoutError`` as Harbor records one), and with a user sim
    the relay's record (``results["relay"]``)."""

    name = "harbor"
    Config: ClassVar[type] = TrialConfig
    writes = frozenset({RESULTS_KEY, "relay"})

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.relay: Relay | None = None

    def seats(self) -> set[str]:
        return {self.config.seat, *(self.relay.seats() if self.relay is not None else ())}

    def use_user_sim(self, name: str, settings: dict[str, Any]) -> None:
        cfg: TrialConfig = self.config
        if self.relay is None:
            self.relay = Relay(RelayConfig(seat=cfg.seat, max_turns=cfg.max_turns,
                                           mask_prompt=True,
                                           persona=cfg.persona or RelayConfig().persona))
        self.relay.use_user_sim(name, settings)

    def check(self, steps: Sequence[Step]) -> list[str]:
        return self.relay.check(steps) if self.relay is not None else []

    async def run(self, ctx: EpisodeContext) -> None:
        cfg: TrialConfig = self.config
        harbor = ctx.task.info.get(RESULTS_KEY)
        if not isinstance(harbor, dict):
            raise InterplayError("the harbor step plays Harbor tasks (task.info['harbor']); "
                                 "run it in the harbor env")
        record: dict[str, Any] = {"task_name": harbor["name"], "timing": {}}
        ctx.results[RESULTS_KEY] = record
        with phase(record, "environment_setup"):
            await ctx.sandbox()
        limit = harbor.get("agent_timeout_s")
        with phase(record, "agent_execution"):
            try:
                async with asyncio.timeout(limit):
                    if self.relay is not None:
                        await self.relay.run(ctx)
                    else:
                        await ctx.agent(cfg.seat).run(ctx.task)
            except TimeoutError:
                # Harbor's AgentTimeoutError: the agent is stopped, what it left is graded.
                record["exception_info"] = {
                    "exception_type": "AgentTimeoutError",
                    "exception_message": f"Agent execution timed out after {limit} seconds",
                    "occurred_at": now()}
                ctx.metrics["agent_timed_out"] = 1.0
                for trace in ctx.traces:
                    if trace.seat == cfg.seat and trace.stop_condition in (None, "cancelled"):
                        trace.stop_condition = "agent_timeout"


@contextlib.contextmanager
def phase(record: dict[str, Any], name: str) -> Iterator[None]:
    """Times one phase of a trial into ``record["timing"][name]``: its start and end as
    Harbor's TimingInfo keeps them, and its seconds (also when it raises)."""
    t0 = time.monotonic()
    timing = record["timing"][name] = {"started_at": now()}
    try:
        yield
    finally:
        timing["finished_at"] = now()
        timing["seconds"] = round(time.monotonic() - t0, 3)


def now() -> str:
    """This instant, ISO 8601 in UTC (Harbor's timestamps)."""
    return datetime.now(UTC).isoformat()
