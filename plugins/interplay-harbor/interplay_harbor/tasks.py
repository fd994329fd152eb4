"""Harbor task folders, read as Harbor 0.26 reads them (``harbor.models.task``).

A task is a folder::

    task.toml            schema_version, [agent] timeout_sec, user, [verifier] timeout_sec,
                         env, user, [environment] (build_timeout_sec, cpus, memory_mb,
                         workdir, env, docker_image), [solution] env

``[agent] user`` is the user every harness's commands run as inside (its program, its tools,
the oracle's solve.sh: the workspace's ``user``); ``[verifier] user`` the user test.sh runs as;
unset, the image's.
    instruction.md       what the agent is told
    environment/         the image's build context: a Dockerfile
    tests/test.sh        run after the agent; writes /logs/verifier/reward.json or reward.txt
    solution/solve.sh    what the oracle runs

A dataset is a folder of such folders. What interplay cannot run as Harbor would is refused
here, in one line naming the file and what to change: a folder with no task, a task.toml that
does not parse or has a schema version Harbor 0.26 does not write, a missing instruction.md or
tests/test.sh, an environment written as docker-compose, a multi-step task, a verifier in a
separate environment, a Windows task.

Beside Harbor's keys, a task may say what its user knows for the user-sim variant, in a
table Harbor ignores (its ``TaskConfig`` keeps no unknown key)::

    [interplay.user]
    knows = "The service must listen on port 8123."   # what she answers from
    persona = "a developer in a hurry"                 # who she is (optional)
    opening = "Can you set up the service for me?"     # her first line (optional)

This module owns reading a task; it must not start anything.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from interplay import InterplayError, Workspace

#: The task.toml schema versions Harbor 0.26 reads (its TaskConfig writes "1.4"; terminal-bench
#: 2.0's tasks say "1.0"; an omitted one is read as the current).
SCHEMA_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
#: Harbor's default [verifier] timeout_sec.
VERIFIER_TIMEOUT_S = 600.0
#: Where Harbor's paths are inside the environment (``EnvironmentPaths``).
LOGS_DIR = "/logs"
AGENT_LOGS = "/logs/agent"
VERIFIER_LOGS = "/logs/verifier"
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
#: The workspace folder of a task whose image and task.toml name none (Harbor would run in
#: the container's "/"; interplay compares what changed in the workspace, so it has one).
DEFAULT_WORKDIR = "/workspace"
_COMPOSE = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@attrs.frozen
class UserKnows:
    """What the user knows in the user-sim variant (``[interplay.user]`` of task.toml)."""

    knows: str = ""
    persona: str = ""
    opening: str = ""


@attrs.frozen
class HarborTask:
    """One Harbor task as interplay runs it."""

    #: Its name: the folder's name (Harbor's ``task_name`` of a local task).
    name: str
    #: The task folder.
    path: Path
    #: instruction.md, as the agent is told it.
    instruction: str
    #: task.toml's schema version.
    schema_version: str
    #: [agent] timeout_sec; None: no limit but the seat's own.
    agent_timeout_s: float | None
    #: [verifier] timeout_sec.
    verifier_timeout_s: float
    #: [agent] user and [verifier] user (None: the image's).
    agent_user: str | None
    verifier_user: str | None
    #: [verifier] env and [solution] env, ${VAR} resolved from this machine's environment.
    verifier_env: Mapping[str, str]
    solution_env: Mapping[str, str]
    #: What the sandbox starts from: the Dockerfile (or image), workdir, env, limits.
    workspace: Workspace
    #: [interplay.user], for the user-sim variant.
    user: UserKnows
    #: task.toml's [metadata], as written.
    metadata: Mapping[str, Any] = attrs.Factory(dict)

    @property
    def tests(self) -> Path:
        return self.path / "tests"

    @property
    def solution(self) -> Path:
        return self.path / "solution"

    def info(self) -> dict[str, Any]:
        """What an episode's task keeps of it (``task.info["harbor"]``)."""
        return {"name": self.name, "path": str(self.path),
                "schema_version": self.schema_version,
                "agent_timeout_s": self.agent_timeout_s,
                "verifier_timeout_s": self.verifier_timeout_s}


def find_tasks(path: str | os.PathLike[str]) -> list[Path]:
    """The task folders at ``path``: the folder itself when it holds a task.toml, else its
    sub-folders that do, by name. None is one line saying what a task is."""
    root = Path(path).expanduser()
    if not root.exists():
        raise InterplayError(f"env.path: {root} does not exist; name a Harbor task folder or "
                             f"a folder of them")
    if not root.is_dir():
        raise InterplayError(f"env.path: {root} is not a folder; name a Harbor task folder "
                             f"(task.toml, instruction.md, environment/, tests/) or a folder "
                             f"of them")
    if (root / "task.toml").is_file():
        return [root]
    found = sorted(p for p in root.iterdir() if p.is_dir() and (p / "task.toml").is_file())
    if not found:
        raise InterplayError(f"env.path: {root} holds no Harbor task: a task is a folder with "
                             f"task.toml, instruction.md, environment/Dockerfile and "
                             f"tests/test.sh, and a dataset a folder of them")
    return found


def read_task(folder: Path) -> HarborTask:
    """The task in ``folder``; InterplayError, one line naming the file, when interplay
    cannot run it as Harbor would."""
    toml_path = folder / "task.toml"
    try:
        data = tomllib.loads(toml_path.read_text())
    except OSError as exc:
        raise InterplayError(f"{toml_path}: cannot be read ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InterplayError(f"{toml_path}: not valid TOML ({exc}); fix the file") from None
    version = str(data.get("schema_version", data.get("version", SCHEMA_VERSIONS[-1])))
    if version not in SCHEMA_VERSIONS:
        raise InterplayError(f"{toml_path}: schema_version {version!r} is not one Harbor "
                             f"0.26 reads ({', '.join(SCHEMA_VERSIONS)}); write the task in "
                             f"that format")
    agent = _table(data, "agent", toml_path)
    verifier = _table(data, "verifier", toml_path)
    environment = _table(data, "environment", toml_path)
    solution = _table(data, "solution", toml_path)
    if data.get("steps"):
        raise InterplayError(f"{toml_path}: multi-step tasks ([[steps]]) are not supported; "
                             f"write one task per step")
    if verifier.get("environment_mode") == "separate" or "environment" in verifier:
        raise InterplayError(f"{toml_path}: a verifier in a separate environment "
                             f"([verifier] environment) is not supported; let the tests run "
                             f"in the agent's environment")
    if str(environment.get("os", "linux")).lower() != "linux":
        raise InterplayError(f"{toml_path}: [environment] os = {environment['os']!r}: only "
                             f"linux tasks run")
    instruction_path = folder / "instruction.md"
    if not instruction_path.is_file():
        raise InterplayError(f"{folder}: no instruction.md; write what the agent is told there")
    if not (folder / "tests" / "test.sh").is_file():
        raise InterplayError(f"{folder}: no tests/test.sh; write the test that scores the "
                             f"task (it writes /logs/verifier/reward.txt or reward.json)")
    env_dir = folder / "environment"
    compose = next((env_dir / n for n in _COMPOSE if (env_dir / n).is_file()), None)
    if compose is not None:
        raise InterplayError(f"{compose}: environments written as docker-compose are not "
                             f"supported; give the task an environment/Dockerfile")
    dockerfile = env_dir / "Dockerfile"
    image = environment.get("docker_image")
    if not dockerfile.is_file() and not image:
        raise InterplayError(f"{folder}: no environment/Dockerfile (nor [environment] "
                             f"docker_image in task.toml); write the task's image there")
    where = f"{toml_path}: "
    agent_user = _user(agent.get("user"))
    # Harbor's environment has its log folders (mounted from the trial's); the agent's and the
    # verifier's programs write there, the agent's as its own user.
    logs = f"mkdir -p {AGENT_LOGS} {VERIFIER_LOGS}"
    if agent_user is not None:
        logs += f" && chown {shlex.quote(agent_user)} {AGENT_LOGS}"
    workspace = Workspace(
        dockerfile=str(dockerfile) if dockerfile.is_file() else None,
        image=None if dockerfile.is_file() else str(image),
        build_timeout_s=_timeout(environment.get("build_timeout_sec"),
                                 where + "[environment] build_timeout_sec"),
        workdir=_text(environment.get("workdir"), where + "[environment] workdir"),
        env=resolve_env(_strings(environment.get("env", {}), where + "[environment] env")),
        cpus=_number(environment.get("cpus"), where + "[environment] cpus"),
        memory_mb=_int(environment.get("memory_mb"), where + "[environment] memory_mb"),
        # [agent] user: the agent's harness and its tools run as that user inside.
        user=agent_user, setup=[logs])
    users = data.get("interplay", {}).get("user", {}) if isinstance(data.get("interplay"),
                                                                   dict) else {}
    if not isinstance(users, dict):
        raise InterplayError(f"{toml_path}: [interplay.user] must be a table")
    user = UserKnows(**{k: _text(users.get(k), f"{where}[interplay.user] {k}") or ""
                        for k in ("knows", "persona", "opening")})
    unknown = set(users) - {"knows", "persona", "opening"}
    if unknown:
        raise InterplayError(f"{toml_path}: [interplay.user] has unknown key(s) "
                             f"{', '.join(sorted(unknown))}; it takes knows, persona, opening")
    metadata = data.get("metadata", {})
    return HarborTask(
        name=folder.name, path=folder.resolve(), instruction=instruction_path.read_text(),
        schema_version=version,
        agent_timeout_s=_timeout(agent.get("timeout_sec"), where + "[agent] timeout_sec"),
        verifier_timeout_s=_timeout(verifier.get("timeout_sec", VERIFIER_TIMEOUT_S),
                                    where + "[verifier] timeout_sec") or VERIFIER_TIMEOUT_S,
        agent_user=agent_user, verifier_user=_user(verifier.get("user")),
        verifier_env=resolve_env(_strings(verifier.get("env", {}), where + "[verifier] env")),
        solution_env=resolve_env(_strings(solution.get("env", {}), where + "[solution] env")),
        workspace=workspace, user=user,
        metadata=metadata if isinstance(metadata, dict) else {})


def read_tasks(path: str | os.PathLike[str], names: list[str] | None = None) -> list[HarborTask]:
    """Every task at ``path`` (only those ``names`` names, in their folder order), read and
    checked; the first that cannot run is one line."""
    folders = find_tasks(path)
    if names:
        by_name = {f.name: f for f in folders}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise InterplayError(f"env.tasks: no task {missing[0]!r} in {path} (its tasks: "
                                 f"{', '.join(sorted(by_name)[:20])})")
        folders = [f for f in folders if f.name in set(names)]
    return [read_task(f) for f in folders]


def resolve_env(values: Mapping[str, str]) -> dict[str, str]:
    """``${VAR}`` and ``${VAR:-default}`` in the values, from this machine's environment (as
    Harbor resolves a task's env); a variable that is unset and has no default is one line."""
    out = {}
    for key, value in values.items():
        def sub(m: re.Match[str], key: str = key) -> str:
            found = os.environ.get(m.group(1))
            if found is not None:
                return found
            if m.group(2) is not None:
                return m.group(2)
            raise InterplayError(f"the task's env {key} needs ${{{m.group(1)}}}, which is not "
                                 f"set here; set it, or give it a default (${{VAR:-value}})")
        out[key] = _VAR.sub(sub, value)
    return out


def _table(data: Mapping[str, Any], key: str, path: Path) -> dict[str, Any]:
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise InterplayError(f"{path}: [{key}] must be a table, got {type(table).__name__}")
    return table


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InterplayError(f"{where} must be a table of strings")
    return dict(value)


def _text(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InterplayError(f"{where} must be a string, got {type(value).__name__}")
    return value


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or value <= 0:
        raise InterplayError(f"{where} must be a positive number, got {value!r}")
    return float(value)


def _int(value: Any, where: str) -> int | None:
    number = _number(value, where)
    return None if number is None else int(number)


def _timeout(value: Any, where: str) -> float | None:
    return _number(value, where)


def _user(value: Any) -> str | None:
    return None if value is None else str(value)
