"""Loading an env: from a registered name, from a TOML file of steps, or from an always_on
scenario file (TOML or JSON), configured with the env's settings.

The one place an env is made of what names it: ``interplay eval NAME_OR_FILE``, a results
folder's ``config.json`` (``--resume``, ``interplay report``, ``interplay regrade``) and the
rollout API all come through :func:`load_env`. A plugin may register an env as a file
(``register(Path(...))``): the registry keeps it as an :class:`~interplay.contracts.env.EnvFile` and
:func:`env_class` reads it here on first lookup. A file env's steps and verifiers are the
registered ones its rows name (:func:`build`).

It sits above the world (a scenario is the world's) and below the run, which loads envs
through it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from interplay.config import loading as config
from interplay.contracts.contexts import SeatSpec
from interplay.contracts.env import OPTION_KEYS, AddedVerifier, Env, EnvFile, EnvOptions
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.plugins import host as plugins
from interplay.values import taskset
from interplay.values.records import Task
from interplay.values.taskset import TasksetSource
from interplay.world.scenario import Scenario, load_scenario


def load_env(name: str, settings: Mapping[str, Any]) -> Env:
    """The env registered as ``name`` (or a TOML env file, or an always_on scenario file),
    configured with ``settings``."""
    if not name:
        raise InterplayError("no env given; name one, e.g. `interplay eval echo` "
                             "(`interplay list envs` shows them)")
    if name.endswith((".toml", ".json")) and Path(name).is_file():
        env_cls = env_from_toml(name)
    else:
        env_cls = env_class(name)
    own, options = split_options(settings)
    env_config = config.structure(own, env_cls.Config, path="env")
    return open_env(env_cls(env_config), options)


def split_options(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An env's ``env.*`` settings parted into its own (its ``Config``'s) and those every env
    takes (:class:`~interplay.contracts.env.EnvOptions`); an option given as null is left unset."""
    own = {k: v for k, v in settings.items() if k not in OPTION_KEYS}
    options = {k: v for k, v in settings.items() if k in OPTION_KEYS and v is not None}
    return own, options


def open_env(env: Env, options: Mapping[str, Any]) -> Env:
    """``env`` with the run's options (``env.user_sim``, ``env.verifiers``, ...), the verifiers
    they name made now: an unknown name or a bad setting is refused in one line naming where."""
    opts = config.structure(dict(options), EnvOptions, path="env")
    added = []
    for i, row in enumerate(opts.verifiers):
        where = f"env.verifiers[{i}]"
        kind = row.get("kind")
        if not isinstance(kind, str):
            raise InterplayError(f"{where} needs a kind: the registered name of a verifier "
                                 f"(`interplay list verifiers`), e.g. {{kind = \"exact\"}}")
        try:
            cls = plugins.get("verifiers", kind)
        except InterplayError as exc:
            raise InterplayError(f"{where}: {exc.message}") from None
        settings = {k: v for k, v in row.items() if k != "kind"}
        added.append(AddedVerifier(cls=cls, where=where, config=config.structure(
            settings, cls.Config, path=where)))
    env.options = opts
    env.added_verifiers = tuple(added)
    return env


def options_given(env: Env) -> dict[str, Any]:
    """The options ``env`` was given that differ from their defaults, as plain data (what a
    results folder's config keeps beside the env's own settings)."""
    plain = attrs.asdict(env.options)
    defaults = attrs.asdict(EnvOptions())
    return {k: v for k, v in plain.items() if v != defaults[k]}


def lookup(kind: str, name: str) -> Any:
    """The class registered as ``name`` of ``kind`` (``"harnesses"``, ``"user-sims"``,
    ``"steps"``, ``"verifiers"`` or ``"envs"``), e.g. ``lookup("verifiers", "payoff")``; an env
    registered as a file is read into its Env class. An unknown name raises InterplayError
    listing the known ones."""
    return env_class(name) if kind == "envs" else plugins.get(kind, name)


_file_envs: dict[EnvFile, type[Env]] = {}
_file_envs_lock = threading.Lock()


def env_class(name: str) -> type[Env]:
    """The Env class registered as ``name``: the class itself, or for an env registered as a
    file, the class read from it (:func:`file_env`)."""
    registered = plugins.get("envs", name)
    if isinstance(registered, EnvFile):
        return file_env(registered)
    return registered  # type: ignore[no-any-return]


def file_env(env_file: EnvFile) -> type[Env]:
    """The Env class of a registered env file, read once: every lookup gives the same class."""
    with _file_envs_lock:
        if env_file not in _file_envs:
            _file_envs[env_file] = env_from_toml(env_file.path)
        return _file_envs[env_file]


def build(kind: str, name: str, settings: Mapping[str, Any], path: str) -> Any:
    """Instantiate a registered step or verifier from its settings (structured into Config)."""
    try:
        cls = plugins.get(kind, name)
    except InterplayError as exc:
        raise InterplayError(f"{path}: {exc.message}") from None
    cfg = config.structure(dict(settings), cls.Config, path=path)
    return cls(cfg)


def build_verifiers(rows: Sequence[Mapping[str, Any]], where: str) -> list[Verifier]:
    """Verifiers from rows as a config writes them (``{"kind": NAME, ...settings}``); a row
    without a kind, an unknown kind or settings it does not take is one line naming
    ``where[i]``."""
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row.get("kind"), str):
            raise InterplayError(f"{where}[{i}] needs a kind (a registered verifier, "
                                 f"`interplay list verifiers`)")
        settings = {k: v for k, v in row.items() if k != "kind"}
        out.append(build("verifiers", row["kind"], settings, f"{where}[{i}]"))
    return out


# -- a TOML file of steps ------------------------------------------------------------------


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
    JSON: see :func:`scenario_env`)::

        name = "my-env"
        taskset = "tasks.jsonl"          # relative to this file; or a [taskset] table
                                         # naming a dataset
                                         (interplay.values.taskset.DatasetTaskset),
                                         # or the tasks themselves as [[tasks]] rows
        [seats.assistant]
        harness = "chat"
        [[steps]]
        kind = "one_shot"
        [[verifiers]]
        kind = "exact"
    """
    p = Path(path)
    if p.suffix == ".json":
        return scenario_env(p)
    data = config.read_toml(p)
    if looks_like_scenario(data):
        return scenario_env(p)
    allowed = {"name", "description", "taskset", "tasks", "seats", "steps", "verifiers"}
    extra = set(data) - allowed
    if extra:
        raise InterplayError(f"{p}: unknown key {', '.join(sorted(extra))}; "
                             f"allowed: {', '.join(sorted(allowed))}")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise InterplayError(f"{p}: {key} must be a string, got "
                                 f"{type(data[key]).__name__} {data[key]!r}")
    env_name = data.get("name") or p.stem
    if ("taskset" in data) == ("tasks" in data):
        what = "both taskset and tasks" if "taskset" in data else "missing value taskset"
        raise InterplayError(f"{p}: {what}; expected a JSONL path, a [taskset] table naming "
                             f"a dataset, or [[tasks]] rows")
    source = data.get("taskset")
    rows = data.get("tasks")
    inline: list[Task] = []
    if rows is not None:
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise InterplayError(f"{p}: tasks must be [[tasks]] rows (tables), got "
                                 f"{type(rows).__name__}")
        for i, row in enumerate(rows):
            try:
                inline.append(taskset.task_from_row(row, i, base=p.parent.resolve()))
            except InterplayError as exc:
                raise InterplayError(f"{p}: tasks[{i}]: {exc.message}") from None
            except Exception as exc:
                raise InterplayError(f"{p}: tasks[{i}]: bad task row: "
                                     f"{config.explain(exc, 'task')}") from None
    elif isinstance(source, dict):
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
            return list(inline) if rows is not None else taskset.load(source, base=p.parent)

        def steps(self) -> list[Step]:
            return _build_all("steps", step_rows, "steps")

        def verifiers(self) -> list[Verifier]:
            return _build_all("verifiers", verifier_rows, "verifiers")

    TomlEnv.seats = seats
    TomlEnv.__name__ = TomlEnv.__qualname__ = f"TomlEnv_{env_name}"
    return TomlEnv


# -- an always_on scenario file --------------------------------------------------------------

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


#: Keys only a scenario file has: a file with one of them and no steps is a scenario (missing
#: its start, which the scenario's check then names).
SCENARIO_KEYS = frozenset({"start", "end", "timezone", "rate", "opening", "user", "apps",
                           "contacts", "triggers", "lines", "queued", "tasks", "always_on"})


def looks_like_scenario(data: dict[str, Any]) -> bool:
    """A scenario file has a start time; an env file of steps never does. A file without
    steps but with a scenario's keys is a scenario that lacks its start."""
    return "start" in data or ("steps" not in data and bool(SCENARIO_KEYS & set(data)))


def scenario_env(path: str | Path) -> type[Env]:
    """An Env class running the scenario in ``path`` (TOML or JSON) with no Python:
    ``interplay eval my_week.toml``, or a registered scenario path.

    Its program is two registered steps, ``user_sim`` (from the scenario's ``[user]`` table) and
    ``always_on`` (the scenario, with its ``[always_on]`` table), built by name like a TOML
    env's steps. Its tasks are the scenario's ``[[tasks]]`` (the user's opening requests), else
    one task opened by ``opening``; its verifiers the scenario's ``[[verifiers]]``; its seats an
    ``assistant`` on the chat harness, the ``user`` and a ``contact`` seat (both untrainable, on
    the null harness) under the scenario's ``[seats.*]``. ``--set env.always_on.max_wakes=5``
    and ``--set env.user.awake=[...]`` override the two tables; ``env.taskset`` names a taskset
    (JSONL or a dataset) instead of the scenario's tasks. As every env, it takes
    ``env.verifiers`` (rows as in ``[[verifiers]]``) beside the scenario's own verifiers, or
    instead of them with ``env.own_verifiers = false``, and ``env.user_sim``."""
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
            return build_verifiers(scenario.verifiers, f"{p}: verifiers")

        def check(self) -> None:
            super().check()
            # The env's own seats, at load (a run checks them again as it resolved them).
            for step in self.run_steps():
                problem = getattr(step, "history_problem", None)
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
