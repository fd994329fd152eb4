"""The env a scenario file makes on its own: ``interplay eval my_week.toml`` (or a registered
scenario path) runs it with no Python.

Its program is two registered steps, ``user_sim`` (from the scenario's ``[user]`` table) and
``always_on`` (the scenario, with its ``[always_on]`` table), built by name like a TOML env's
steps. Its tasks are the scenario's ``[[tasks]]`` (the user's opening requests), else one task
opened by ``opening``; its verifiers the scenario's ``[[verifiers]]``; its seats an
``assistant`` on the chat harness, the ``user`` and a ``contact`` seat (both untrainable, on the
null harness) under the scenario's ``[seats.*]``. ``--set env.always_on.max_wakes=5`` and
``--set env.user.awake=[...]`` override the two tables; ``env.taskset`` names a taskset (JSONL or
a dataset) instead of the scenario's tasks, and ``env.verifiers`` (rows as in
``[[verifiers]]``) grades with other verifiers than the scenario's.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from interplay import config
from interplay.env import Env, SeatSpec, build
from interplay.errors import InterplayError
from interplay.records import Task
from interplay.taskset import TasksetSource
from interplay.world.scenario import Scenario, load_scenario

DEFAULT_SEATS = {
    "assistant": {"harness": "chat", "sampling": {"max_tokens": 512}},
    "user": {"harness": "null", "trainable": False, "sampling": {"max_tokens": 128}},
    "contact": {"harness": "null", "trainable": False, "sampling": {"max_tokens": 128}},
}


@attrs.define
class ScenarioEnvConfig:
    #: A taskset to use instead of the scenario's tasks (a JSONL file, or a dataset).
    taskset: TasksetSource = ""
    #: Settings of the always_on step, over the scenario's [always_on] table.
    always_on: dict[str, Any] = attrs.Factory(dict)
    #: Settings of the user_sim step, over the scenario's [user] table.
    user: dict[str, Any] = attrs.Factory(dict)
    #: Verifier rows (each with its kind) used instead of the scenario's [[verifiers]].
    verifiers: list[dict[str, Any]] | None = None


#: Keys only a scenario file has: a file with one of them and no steps is a scenario (missing
#: its start, which the scenario's check then names).
SCENARIO_KEYS = frozenset({"start", "end", "timezone", "rate", "opening", "user", "apps",
                           "contacts", "triggers", "lines", "queued", "tasks", "always_on"})


def looks_like_scenario(data: dict[str, Any]) -> bool:
    """A scenario file has a start time; an env file of steps never does. A file without
    steps but with a scenario's keys is a scenario that lacks its start."""
    return "start" in data or ("steps" not in data and bool(SCENARIO_KEYS & set(data)))


def scenario_env(path: str | Path) -> type[Env]:
    """An Env class running the scenario in ``path`` (TOML or JSON)."""
    p = Path(path).resolve()
    scenario = load_scenario(p)
    env_name = scenario.name or p.stem

    class ScenarioEnv(Env):
        __doc__ = scenario.description or f"always_on scenario from {p.name}"
        name = env_name
        Config = ScenarioEnvConfig
        source = str(p)

        def tasks(self) -> Iterable[Task]:
            if self.config.taskset:
                from interplay import taskset

                return taskset.load(self.config.taskset)
            return tasks_of(scenario)

        def steps(self) -> list[Any]:
            user = config.merge(scenario.user, self.config.user)
            # Her zone is the world's unless the scenario says otherwise.
            user.setdefault("timezone", scenario.timezone)
            always_on = config.merge(scenario.always_on, self.config.always_on)
            if "scenario" in always_on:
                raise InterplayError("env.always_on.scenario: the scenario is the env's own "
                                     "file; run another file to run another scenario")
            return [build("steps", "user_sim", user, "env.user"),
                    build("steps", "always_on", {**always_on, "scenario": str(p)},
                          "env.always_on")]

        def verifiers(self) -> list[Any]:
            rows, where = scenario.verifiers, f"{p}: verifiers"
            if self.config.verifiers is not None:
                rows, where = self.config.verifiers, "env.verifiers"
            out = []
            for i, row in enumerate(rows):
                if not isinstance(row.get("kind"), str):
                    raise InterplayError(f"{where}[{i}] needs a kind (a registered verifier, "
                                         f"`interplay list verifiers`)")
                settings = {k: v for k, v in row.items() if k != "kind"}
                out.append(build("verifiers", row["kind"], settings, f"{where}[{i}]"))
            return out

        def check(self) -> None:
            super().check()
            for step in self.steps():
                for name in ("history_problem",):
                    problem = getattr(step, name, None)
                    if problem is not None and (text := problem(dict(self.seats))):
                        raise InterplayError(f"env {self.name!r}: step {step.name!r}: {text}")

    ScenarioEnv.seats = seats_of(scenario, p)
    ScenarioEnv.__name__ = ScenarioEnv.__qualname__ = f"ScenarioEnv_{env_name}"
    return ScenarioEnv


def seats_of(scenario: Scenario, path: Path) -> dict[str, SeatSpec]:
    names = set(DEFAULT_SEATS) | set(scenario.seats)
    return {seat: config.structure(config.merge(DEFAULT_SEATS.get(seat, {}),
                                                scenario.seats.get(seat, {})),
                                   SeatSpec, path=f"{path.name}: seats.{seat}")
            for seat in sorted(names)}


def tasks_of(scenario: Scenario) -> list[Task]:
    if not scenario.tasks:
        return [Task(idx=0)]
    return [Task(idx=i, prompt=row.prompt, system_prompt=row.system_prompt, answer=row.answer,
                 info=dict(row.info)) for i, row in enumerate(scenario.tasks)]
