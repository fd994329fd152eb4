"""The ``always-on-generated`` env: always_on tasks a scenario kind makes from seeds, scored by
code.

Task ``i`` is the kind's scenario of seed ``seed + i`` (``interplay.contracts.scenario``): its own
world, her person and its goals, so ``-n 1000`` runs a thousand different weeks. Its program is the
``user_sim`` step (each task says who she is; the env says who plays her) and the ``always_on``
step (each task brings its world); its verifier, ``always_on_goals``, scores each goal of the
task from the run's records. ``env.taskset`` runs a taskset file instead (one ``interplay
generate`` wrote, perhaps edited).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from interplay.commands.generate import make_kind
from interplay.config import loading as config
from interplay.contracts.contexts import SeatSpec
from interplay.contracts.env import Env
from interplay.contracts.scenario import ScenarioKind, generate_tasks
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.run.loader import build, build_verifiers
from interplay.values import taskset
from interplay.values.records import Task
from interplay.values.taskset import TasksetSource

#: The always_on settings the env starts from (under env.always_on): checks as close as half
#: an hour (news that came in her night is passed on when she wakes), and room for a month of
#: wakes.
ALWAYS_ON = {"min_check_interval": "PT30M", "max_wakes": 400}
#: The env's own verifiers: each task's goals, from the records.
VERIFIERS = ({"kind": "always_on_goals"},)


@attrs.define
class GeneratedConfig:
    #: The scenario kind that makes the tasks (`interplay list scenario-kinds`).
    kind: str = "errands"
    #: The kind's knobs (`interplay describe scenario-kinds KIND`), e.g. {days = 14}.
    knobs: dict[str, Any] = attrs.Factory(dict)
    #: Task i is made from seed + i: the same seed and knobs give the same tasks.
    seed: int = 0
    #: How many tasks the taskset holds (-n runs the first n).
    count: int = 1000
    #: A taskset to run instead of generating one (a JSONL file `interplay generate` wrote,
    #: or a dataset).
    taskset: TasksetSource = ""
    #: Settings of the always_on step, over the env's own (min_check_interval PT30M,
    #: max_wakes 400).
    always_on: dict[str, Any] = attrs.Factory(dict)
    #: Settings of the user_sim step: who plays her (user_sim, its settings, the seat); each
    #: task says who she is.
    user: dict[str, Any] = attrs.Factory(dict)


class GeneratedEnv(Env):
    """always_on tasks a scenario kind makes from seeds (errands by default), scored by code."""

    name = "always-on-generated"
    Config = GeneratedConfig
    seats = {
        "assistant": SeatSpec(harness="chat", sampling={"max_tokens": 160}),
        "user": SeatSpec(harness="null", trainable=False, sampling={"max_tokens": 80}),
        "contact": SeatSpec(harness="null", trainable=False, sampling={"max_tokens": 80}),
    }

    def kind(self) -> ScenarioKind:
        cfg: GeneratedConfig = self.config
        return make_kind(cfg.kind, dict(cfg.knobs), "env.knobs")

    def tasks(self) -> Iterable[Task]:
        cfg: GeneratedConfig = self.config
        if cfg.taskset:
            return taskset.load(cfg.taskset)
        return generate_tasks(self.kind(), seed=cfg.seed, count=cfg.count)

    def steps(self) -> list[Step]:
        cfg: GeneratedConfig = self.config
        if "scenario" in cfg.always_on:
            raise InterplayError("env.always_on.scenario: each task brings its world "
                                 "(info.world); run a scenario file to run one world")
        return [build("steps", "user_sim", cfg.user, "env.user"),
                build("steps", "always_on", config.merge(ALWAYS_ON, cfg.always_on),
                      "env.always_on")]

    def verifiers(self) -> list[Verifier]:
        # The judge, or any verifier, scores beside these as on every env: env.verifiers.
        return build_verifiers(VERIFIERS, "the env's verifiers")

    def check(self) -> None:
        cfg: GeneratedConfig = self.config
        if cfg.count < 1:
            raise InterplayError(f"env.count: at least 1 task, got {cfg.count}")
        if not cfg.taskset:
            self.kind()  # its knobs, refused here in one line
        super().check()
