"""Builtin envs written in Python: ``echo`` (one-shot smoke runs) and ``user-sim`` (the
two-session relay with a modeled user)."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import ClassVar

import attrs

from interplay.builtin_envs.steps import OneShot, Relay, RelayConfig
from interplay.builtin_verifiers.match import Contains, MatchConfig
from interplay.builtin_verifiers.state import StepScore, StepScoreConfig
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.values import taskset
from interplay.values.records import Task
from interplay.values.taskset import TasksetSource


def data_file(name: str) -> Path:
    return Path(str(resources.files("interplay.builtin_envs") / "data" / name))


@attrs.define
class EchoConfig:
    #: The tasks to run instead of the env's builtin ones: a JSONL file of task rows, a file or
    #: folder the datasets library reads, or a dataset table ([env.taskset] with dataset = ...); a
    #: relative path is read from the working folder. Empty keeps the builtin tasks.
    taskset: TasksetSource = ""


class EchoEnv(Env):
    """One-shot: the model repeats a word. For smoke runs."""

    name = "echo"
    Config: ClassVar[type] = EchoConfig
    seats = {"assistant": SeatSpec(harness="null")}

    def tasks(self) -> Iterable[Task]:
        return taskset.load(self.config.taskset, data_file("echo.jsonl"))

    def steps(self) -> list[Step]:
        return [OneShot()]

    def verifiers(self) -> list[Verifier]:
        return [Contains(MatchConfig())]


@attrs.define
class UserSimConfig:
    #: The tasks to run instead of the env's builtin ones: a JSONL file of task rows, a file or
    #: folder the datasets library reads, or a dataset table ([env.taskset] with dataset = ...); a
    #: relative path is read from the working folder. Empty keeps the builtin tasks.
    taskset: TasksetSource = ""
    #: The relay step's settings (env.relay.*).
    relay: RelayConfig = attrs.Factory(RelayConfig)
    #: Where the answer must show: any assistant reply.
    verifier: MatchConfig = attrs.Factory(lambda: MatchConfig(scope="any"))


class UserSimEnv(Env):
    """A modeled user with a goal talks to the assistant; scored on whether the answer came up."""

    name = "user-sim"
    Config: ClassVar[type] = UserSimConfig
    # Caps that fit the task (a user line is a sentence or two; answers are brief), so a model
    # that rambles cannot fill its context; raise them with --set seats.<seat>.sampling.max_tokens.
    seats = {"assistant": SeatSpec(harness="chat", sampling={"max_tokens": 256}),
             "user": SeatSpec(harness="null", trainable=False, sampling={"max_tokens": 96})}

    def tasks(self) -> Iterable[Task]:
        return taskset.load(self.config.taskset, data_file("user_sim.jsonl"))

    def steps(self) -> list[Step]:
        return [Relay(self.config.relay)]

    def verifiers(self) -> list[Verifier]:
        return [Contains(self.config.verifier)]


class ScoredStepEnv(Env):
    """An env of one step that scores itself (read by ``step_score``), on a builtin taskset
    unless the config names one. Subclasses say which step, which taskset file, and which
    config field holds the step's settings."""

    seats = {"assistant": SeatSpec(harness="null")}
    step_cls: ClassVar[type[Step]]
    data: ClassVar[str]
    step_field: ClassVar[str] = "puzzle"

    def tasks(self) -> Iterable[Task]:
        return taskset.load(self.config.taskset, data_file(self.data))

    def steps(self) -> list[Step]:
        return [self.step_cls(getattr(self.config, self.step_field))]

    def verifiers(self) -> list[Verifier]:
        return [StepScore(StepScoreConfig(key=self.step_cls.name))]
