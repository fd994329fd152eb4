"""The Env contract: a taskset, an ordered list of steps, verifiers and seats under one name.

An env is written in Python (subclass :class:`Env`), as a TOML file of steps
(:func:`env_from_toml`), or as an always_on scenario file. ``Env.check`` runs every step's and
verifier's ``check`` when the env loads, so a misfit is refused before any model is called.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from interplay.config import settle
from interplay.endpoint import Endpoint
from interplay.errors import InterplayError
from interplay.harness import NoConfig
from interplay.records import Task

if TYPE_CHECKING:
    from interplay.run.episode import EpisodeContext
    from interplay.step import Step
    from interplay.tools import Tool
    from interplay.verifier import Verifier


@attrs.define
class SeatSpec:
    """How a seat is filled: harness, model, sampling, trainable, retries, limits.

    ``model`` None means the run's model. ``retries`` re-runs a failed one-shot run; it never
    applies to a chat (the user's side cannot be replayed).
    """

    harness: str = "chat"
    harness_config: dict[str, Any] = attrs.Factory(dict)
    model: Endpoint | None = None
    sampling: dict[str, Any] = attrs.Factory(dict)
    trainable: bool = True
    retries: int = 0
    timeout_s: float = 600.0


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


def build(kind: str, name: str, settings: Mapping[str, Any], path: str) -> Any:
    """Instantiate a registered step or verifier from its settings (structured into Config)."""
    from interplay import config, plugins

    try:
        cls = plugins.get(kind, name)
    except InterplayError as exc:
        raise InterplayError(f"{path}: {exc.message}") from None
    cfg = config.structure(dict(settings), cls.Config, path=path)
    return cls(cfg)


def _entries(p: Path, data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The ``[[key]]`` array of tables, each with a ``kind``; one-line errors otherwise."""
    rows = data.get(key, [])
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise InterplayError(f"{p}: {key} must be an array of tables, written [[{key}]] "
                             f"(not [{key}]); got {type(rows).__name__}")
    for i, row in enumerate(rows):
        if "kind" not in row:
            raise InterplayError(f"{p}: every [[{key}]] entry needs a kind "
                                 f"(entry {i + 1} has none)")
        if not isinstance(row["kind"], str):
            raise InterplayError(f"{p}: {key}[{i}].kind must be a string, "
                                 f"got {row['kind']!r}")
    return rows


def env_from_toml(path: str | Path) -> type[Env]:
    """An Env class from a TOML file of steps (or from an always_on scenario file, TOML or
    JSON: see :mod:`interplay.world.env`)::

        name = "my-env"
        taskset = "tasks.jsonl"          # relative to this file; or a [taskset] table
                                         # naming a dataset (interplay.taskset.DatasetTaskset)
        [seats.assistant]
        harness = "chat"
        [[steps]]
        kind = "one_shot"
        [[verifiers]]
        kind = "exact"
    """
    from interplay import config, taskset

    p = Path(path)
    if p.suffix == ".json":
        from interplay.world.env import scenario_env

        return scenario_env(p)
    data = config.read_toml(p)
    from interplay.world.env import looks_like_scenario, scenario_env

    if looks_like_scenario(data):
        return scenario_env(p)
    allowed = {"name", "description", "taskset", "seats", "steps", "verifiers"}
    extra = set(data) - allowed
    if extra:
        raise InterplayError(f"{p}: unknown key {', '.join(sorted(extra))}; "
                             f"allowed: {', '.join(sorted(allowed))}")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise InterplayError(f"{p}: {key} must be a string, got "
                                 f"{type(data[key]).__name__} {data[key]!r}")
    env_name = data.get("name") or p.stem
    if "taskset" not in data:
        raise InterplayError(f"{p}: missing value taskset; expected a JSONL path or a "
                             f"[taskset] table naming a dataset")
    source = data["taskset"]
    if isinstance(source, dict):
        source = config.structure(source, taskset.DatasetTaskset, path=f"{p}: taskset")
    elif not isinstance(source, str):
        raise InterplayError(f"{p}: taskset must be a path or a [taskset] table, got "
                             f"{type(source).__name__} {source!r}")
    seat_table = data.get("seats", {})
    if not isinstance(seat_table, dict):
        raise InterplayError(f"{p}: seats must be a table of seats, e.g. [seats.assistant]; "
                             f"got {type(seat_table).__name__} {seat_table!r}")
    seats = {
        seat: config.structure(spec, SeatSpec, path=f"{p}: seats.{seat}")
        for seat, spec in (seat_table or {"assistant": {}}).items()
    }
    step_rows = _entries(p, data, "steps")
    verifier_rows = _entries(p, data, "verifiers")

    def _build_all(kind: str, rows: Sequence[dict[str, Any]], label: str) -> list[Any]:
        out = []
        for i, row in enumerate(rows):
            settings = {k: v for k, v in row.items() if k != "kind"}
            out.append(build(kind, row["kind"], settings, f"{p}: {label}[{i}]"))
        return out

    class TomlEnv(Env):
        __doc__ = data.get("description") or f"env from {p.name}"
        name = env_name
        source = str(p)

        def tasks(self) -> Iterable[Task]:
            return taskset.load(source, base=p.parent)

        def steps(self) -> list[Step]:
            return _build_all("steps", step_rows, "steps")

        def verifiers(self) -> list[Verifier]:
            return _build_all("verifiers", verifier_rows, "verifiers")

    TomlEnv.seats = seats
    TomlEnv.__name__ = TomlEnv.__qualname__ = f"TomlEnv_{env_name}"
    return TomlEnv
