"""The Env contract: a taskset, an ordered list of steps, verifiers and seats under one name.

An env is written in Python (subclass :class:`Env`), as a TOML file of steps, or as an always_on
scenario file; a plugin registers a file by its path (:class:`EnvFile`), and the loader
(:mod:`interplay.loader`) makes an Env class of it. ``Env.check`` runs every step's and
verifier's ``check`` when the env loads, so a misfit is refused before any model is called.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay.config import read_toml, settle
from interplay.contexts import EpisodeContext, SeatSpec
from interplay.errors import InterplayError
from interplay.harness import NoConfig
from interplay.records import Task
from interplay.step import Step
from interplay.tools import Tool
from interplay.verifier import Verifier


class Env:
    """Base class of every env. Subclass it and register it with ``register_envs``."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig
    seats: ClassVar[Mapping[str, SeatSpec]] = {"assistant": SeatSpec()}

    def __init__(self, config: Any = None) -> None:
        self.config = settle(config, self, "env")

    def tasks(self) -> Iterable[Task]:
        raise NotImplementedError(f"env {self.name!r} does not implement tasks()")

    def steps(self) -> list[Step]:
        raise NotImplementedError(f"env {self.name!r} does not implement steps()")

    def verifiers(self) -> list[Verifier]:
        return []

    def tools(self, seat: str, ctx: EpisodeContext) -> list[Tool]:
        """Tools the agent in ``seat`` may call in one episode (fresh per episode)."""
        return []

    def check(self) -> None:
        """Refuse a step or verifier that does not fit, naming it and the reason."""
        steps = self.steps()
        if not steps:
            raise InterplayError(f"env {self.name!r} has no steps")
        problems: list[str] = []
        for step in steps:
            problems += [f"step {step.name!r}: {p}" for p in step.check(steps)]
            unknown = step.seats() - set(self.seats)
            if unknown:
                problems.append(f"step {step.name!r} uses seat(s) {', '.join(sorted(unknown))} "
                                f"that env {self.name!r} does not have "
                                f"(seats: {', '.join(self.seats)})")
        for verifier in self.verifiers():
            problems += [f"verifier {verifier.name!r}: {p}" for p in verifier.check(steps)]
        if problems:
            raise InterplayError(f"env {self.name!r} does not fit together: {problems[0]}")


    def check_seats(self, seats: Mapping[str, SeatSpec]) -> None:
        """Refuse seats, as a run resolved them (the env's settings under the run's
        overrides), that one of the env's steps cannot run with, naming the step and why."""
        problems = [f"step {step.name!r}: {p}" for step in self.steps()
                    for p in step.check_seats(seats)]
        if problems:
            raise InterplayError(f"env {self.name!r} does not fit its seats: {problems[0]}")


@attrs.frozen
class EnvFile:
    """An env written as a file and registered by its path (``register(Path(...))`` in
    ``register_envs``): a TOML file of steps, or an always_on scenario (TOML or JSON). The
    registry keeps it under ``name`` (the file's ``name``, else its stem); the loader
    (:func:`interplay.loader.env_class`) reads the rest of it when the env is first looked up,
    so a registration needs nothing above the contracts."""

    path: Path
    name: str

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> EnvFile:
        """The file at ``path``, with the name it gives itself; a file that is missing or
        does not parse is refused in one line naming it."""
        p = Path(path)
        if p.suffix == ".json":
            try:
                data = json.loads(p.read_bytes())
            except OSError as exc:
                raise InterplayError(f"{p}: cannot be read: "
                                     f"{exc.strerror or type(exc).__name__}") from None
            except ValueError as exc:
                raise InterplayError(f"{p}: not valid JSON: {exc}") from None
        else:
            data = read_toml(p)
        name = data.get("name") if isinstance(data, dict) else None
        if name is not None and not isinstance(name, str):
            raise InterplayError(f"{p}: name must be a string, got "
                                 f"{type(name).__name__} {name!r}")
        return cls(path=p, name=name or p.stem)
