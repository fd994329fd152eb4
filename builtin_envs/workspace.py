"""The ``workspace`` env: small repository tasks an agent does in the episode's sandbox, each
scored by its tests.

Five tasks (``data/workspace_tasks.toml``): a bug with a failing test, a missing function, a
CLI to finish, a parser that misreads its input, a feature to complete. Each is a repository
of a few files put in the sandbox's workspace (made a git repository when the image has git,
so ``git diff`` shows the agent's work) and a task in words; the ``tests`` verifier runs
``python3 -m unittest`` in what the agent left, after writing the task's test files back as
they were, so a test the agent changed cannot pass. Any harness works the seat: ``chat`` with
its sandbox tools (the default), or a program harness run inside the sandbox (Claude Code,
codex, ``command``). It needs a sandbox: ``docker`` unless the run names another; a run that
cannot have one is refused when it starts, saying what to install or set.

This module owns the env and reading its task file; the tests verifier owns scoring.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from typing import Any, ClassVar

import attrs

from interplay.builtin_envs.envs import data_file
from interplay.builtin_envs.steps import OneShot
from interplay.builtin_verifiers.tests import Tests, TestsConfig
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.values import taskset
from interplay.values.records import Task, Workspace
from interplay.values.taskset import TasksetSource

TASKS_FILE = "workspace_tasks.toml"

SYSTEM_PROMPT = ("You are working in a software repository: your working folder. Read the "
                 "code, change the files, and run commands and tests as you need to. When "
                 "the task is done, reply with a short summary of what you changed.")

#: Makes the workspace a git repository of the task as given, when the image has git.
GIT_SETUP = ('if command -v git >/dev/null 2>&1; then git init -q && git add -A && '
             'git -c user.name=interplay -c user.email=interplay@localhost commit -qm '
             '"the task as given"; fi')


#: The variables of every command in the sandbox: no bytecode caches in the workspace, whose
#: changes are the agent's work.
ENV = {"PYTHONDONTWRITEBYTECODE": "1"}


@attrs.define
class WorkspaceConfig:
    """The ``workspace`` env's settings (``env.*``)."""

    #: The tasks to run instead of the env's builtin ones: a JSONL file of task rows, each
    #: with its workspace and its tests in info.tests (docs/sandboxes.md), a file or folder
    #: the datasets library reads, or a dataset table; a relative path is read from the
    #: working folder. Empty keeps the builtin tasks.
    taskset: TasksetSource = ""
    #: The tests verifier's settings (env.tests.*; `interplay describe verifiers tests`): its
    #: time limit, the bytes of output kept as the reason; each task gives its command.
    tests: TestsConfig = attrs.Factory(lambda: TestsConfig(timeout_s=120.0))


class WorkspaceEnv(Env):
    """Small repository tasks done in a sandbox, scored by their tests."""

    name = "workspace"
    Config: ClassVar[type] = WorkspaceConfig
    needs_sandbox = True
    # A repository task takes more than a few tool calls: 30 model calls bound a segment, and
    # the turn may take half an hour (its commands' time included).
    seats = {"assistant": SeatSpec(harness="chat", harness_config={"max_turns": 30},
                                   timeout_s=1800.0)}

    def tasks(self) -> Iterable[Task]:
        if self.config.taskset:
            return taskset.load(self.config.taskset, data_file(TASKS_FILE))
        return builtin_tasks()

    def steps(self) -> list[Step]:
        return [OneShot()]

    def verifiers(self) -> list[Verifier]:
        return [Tests(self.config.tests)]


def builtin_tasks() -> list[Task]:
    """The env's own tasks, read from its task file."""
    path = data_file(TASKS_FILE)
    with path.open("rb") as f:
        rows = tomllib.load(f).get("tasks", [])
    return [task_of(row, idx, where=f"{path}: task {idx}") for idx, row in enumerate(rows)]


def task_of(row: dict[str, Any], idx: int, *, where: str) -> Task:
    """One task of the file: its repository as the workspace's files, its tests (the command,
    and the files written back before it runs) in ``info["tests"]``."""
    files = row.get("files")
    if not isinstance(files, dict) or not files:
        raise InterplayError(f"{where}: no files; a task is a repository of files")
    restore = row.get("restore", [])
    missing = [p for p in restore if p not in files]
    if missing:
        raise InterplayError(f"{where}: restore names {missing[0]!r}, which is not one of "
                             f"its files")
    tests = {"command": row["tests"], "files": {p: files[p] for p in restore}}
    return Task(idx=idx, prompt=row["prompt"], system_prompt=SYSTEM_PROMPT,
                workspace=Workspace(files=dict(files), setup=[GIT_SETUP], env=dict(ENV)),
                info={"name": row["name"], "kind": row.get("kind", ""), "tests": tests})


__all__ = ["WorkspaceConfig", "WorkspaceEnv", "builtin_tasks"]
