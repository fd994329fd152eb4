"""The Env contract: a taskset, an ordered list of steps, verifiers and seats under one name.

An env is written in Python (subclass :class:`Env`), as a TOML file of steps, or as an always_on
scenario file; a plugin registers a file by its path (:class:`EnvFile`), and the loader
(:mod:`interplay.run.loader`) makes an Env class of it. ``Env.check`` runs every step's and
verifier's ``check`` when the env loads, so a misfit is refused before any model is called.

Every env is open to the run's plug-ins (:class:`EnvOptions`, ``env.user_sim`` and
``env.verifiers``), whatever its own settings: the loader takes those keys for every env, and a
run plays :meth:`Env.run_steps` and scores with :meth:`Env.run_verifiers`, the env's own with
the run's choices applied. An env's author writes ``steps()`` and ``verifiers()`` only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay.config.loading import read_toml, settle
from interplay.contracts.contexts import EpisodeContext, SeatSpec
from interplay.contracts.harness import NoConfig
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.values.records import Task
from interplay.values.tools import Tool


@attrs.frozen
class EnvOptions:
    """What every env takes from the run beside its own settings (``env.*`` of any env): the
    user sim that plays its user and verifiers beside (or instead of) its own. The loader reads
    these keys for every env, so an env's own settings class never declares them."""

    #: The user sim that plays the env's user, by registered name (`interplay list user-sims`);
    #: empty: the env's own. Every step that plays a user takes it (the user-sim relay,
    #: always_on's user, tau2's customer); an env without a user refuses it.
    user_sim: str = ""
    #: Settings of that user sim (its own, `interplay describe user-sims NAME`); with user_sim
    #: empty, laid key by key over the settings of the env's own user sim.
    user_sim_settings: dict[str, Any] = attrs.Factory(dict)
    #: Verifiers that score beside the env's own: rows as an env file's [[verifiers]], each a
    #: table with its kind (`interplay list verifiers`) and that verifier's settings.
    verifiers: list[dict[str, Any]] = attrs.Factory(list)
    #: Whether the env's own verifiers score too; false: only env.verifiers do.
    own_verifiers: bool = True


#: The keys of ``env.*`` every env takes (:class:`EnvOptions`); no env's Config may use them.
OPTION_KEYS: frozenset[str] = frozenset(f.name for f in attrs.fields(EnvOptions))


@attrs.frozen
class AddedVerifier:
    """A verifier ``env.verifiers`` adds: its class and settings (made fresh for each use, as
    an env makes its own), and where the run named it."""

    cls: type[Verifier]
    config: Any
    where: str

    def make(self) -> Verifier:
        return self.cls(self.config)


class Env:
    """Base class of every env. Subclass it and register it with ``register_envs``."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig
    seats: ClassVar[Mapping[str, SeatSpec]] = {"assistant": SeatSpec()}
    #: Whether every episode needs a sandbox to work in (its tasks are work in files): with
    #: none configured it gets the ``docker`` one, and a run that gives it none is refused.
    #: An env that does not need one still gets one for a task that brings a workspace, or
    #: when the run names a sandbox.
    needs_sandbox: ClassVar[bool] = False
    #: The seats whose agents work in the episode's sandbox, when it has one (their chat
    #: harness's bash, python and text_editor tools run in it; a program harness runs inside
    #: it). A user sim's seat stays outside.
    sandbox_seats: ClassVar[frozenset[str]] = frozenset({"assistant"})
    #: What the run gives this env beside its own settings; set by the loader.
    options: EnvOptions = EnvOptions()
    #: The verifiers ``options.verifiers`` names, made by the loader (which knows the
    #: registered names).
    added_verifiers: tuple[AddedVerifier, ...] = ()

    def __init__(self, config: Any = None) -> None:
        self.config = settle(config, self, "env")

    def tasks(self) -> Iterable[Task]:
        """The env's tasks, in order (each a :class:`Task` with its ``idx``)."""
        raise NotImplementedError(f"env {self.name!r} does not implement tasks()")

    def steps(self) -> list[Step]:
        """The episode's program: its steps, made fresh for each call."""
        raise NotImplementedError(f"env {self.name!r} does not implement steps()")

    def verifiers(self) -> list[Verifier]:
        """The env's own verifiers (none by default), made fresh for each call."""
        return []

    def tools(self, seat: str, ctx: EpisodeContext) -> list[Tool]:
        """Tools the agent in ``seat`` may call in one episode (fresh per episode), called when
        a step first opens the seat: ``ctx`` is the context the episode's steps run in, so what
        they keep in ``ctx.store`` or wrote to ``ctx.results`` is there."""
        return []

    def run_steps(self) -> list[Step]:
        """The steps a run plays: :meth:`steps`, each that plays a user given the run's
        ``env.user_sim`` (:meth:`Step.use_user_sim`)."""
        steps = self.steps()
        options = self.options
        if options.user_sim or options.user_sim_settings:
            for step in steps:
                step.use_user_sim(options.user_sim, dict(options.user_sim_settings))
        return steps

    def run_verifiers(self) -> list[Verifier]:
        """The verifiers a run scores with: :meth:`verifiers` (unless ``env.own_verifiers``
        is false), then those ``env.verifiers`` adds, in its order."""
        own = self.verifiers() if self.options.own_verifiers else []
        return [*own, *(added.make() for added in self.added_verifiers)]

    def check(self) -> None:
        """Refuse a step or verifier that does not fit, naming it and the reason."""
        steps = self.run_steps()
        if not steps:
            raise InterplayError(f"env {self.name!r} has no steps")
        options = self.options
        if (options.user_sim or options.user_sim_settings) and not any(
                step.plays_user() for step in steps):
            key = "env.user_sim" if options.user_sim else "env.user_sim_settings"
            raise InterplayError(f"{key}: env {self.name!r} has no user for a user sim to "
                                 f"play (its steps: {', '.join(s.name for s in steps)}); "
                                 f"envs with one: user-sim, tau2-*, always_on scenarios")
        if not options.own_verifiers and not self.added_verifiers:
            raise InterplayError("env.own_verifiers = false, and env.verifiers names none: "
                                 "nothing would score the episodes; name verifiers in "
                                 "env.verifiers, or leave env.own_verifiers unset")
        problems: list[str] = []
        for step in steps:
            problems += [f"step {step.name!r}: {p}" for p in step.check(steps)]
            unknown = step.seats() - set(self.seats)
            if unknown:
                problems.append(f"step {step.name!r} uses seat(s) {', '.join(sorted(unknown))} "
                                f"that env {self.name!r} does not have "
                                f"(seats: {', '.join(self.seats)})")
        scoring = {}
        for verifier in self.verifiers() if options.own_verifiers else []:
            problems += [f"verifier {verifier.name!r}: {p}" for p in verifier.check(steps)]
            scoring[verifier.name] = "one of the env's own"
        for added in self.added_verifiers:
            name = added.cls.name
            if name in scoring:
                # Two verifiers of one name would write one reward and one metric.
                raise InterplayError(
                    f"{added.where}: verifier {name!r} scores already ({scoring[name]}); "
                    f"name it once, or set env.own_verifiers = false to score with "
                    f"env.verifiers alone")
            scoring[name] = added.where
            problems += [f"verifier {name!r}: {p}" for p in added.make().check(steps)]
        if problems:
            raise InterplayError(f"env {self.name!r} does not fit together: {problems[0]}")

    def check_seats(self, seats: Mapping[str, SeatSpec]) -> None:
        """Refuse seats, as a run resolved them (the env's settings under the run's
        overrides), that one of the env's steps cannot run with, naming the step and why."""
        problems = [f"step {step.name!r}: {p}" for step in self.run_steps()
                    for p in step.check_seats(seats)]
        if problems:
            raise InterplayError(f"env {self.name!r} does not fit its seats: {problems[0]}")


@attrs.frozen
class EnvFile:
    """An env written as a file and registered by its path (``register(Path(...))`` in
    ``register_envs``): a TOML file of steps, or an always_on scenario (TOML or JSON). The
    registry keeps it under ``name`` (the file's ``name``, else its stem); the loader
    (:func:`interplay.run.loader.env_class`) reads the rest of it when the env is first looked up,
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
