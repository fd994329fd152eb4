"""``tests``: score an episode by running its tests in the episode's sandbox, after the agent
is done.

The command (``bash -c``, in the workspace) runs once the env's steps are over, in what the
agent left; files the tests need that the agent must not have changed (the held-back tests)
are written first, over whatever is there. The reward is the command's exit status (0: 1.0,
anything else 0.0), unless it writes a reward file in ``$INTERPLAY_REWARD_DIR``:
``reward.json``, an object of finite numbers, each a metric and ``reward`` the reward; else
``reward.txt``, one number. A reward file that does not hold that (not JSON, no ``reward``, a
value that is not a finite number) leaves the episode unscored, saying why; so does an episode
with no sandbox, or one whose sandbox is gone (a regrade of stored episodes). Tests that run
past their time limit score 0.0, saying so. The command's output, bounded, is the reward's
reason; what the reward file held and how the command ended are its ``info``.

A task brings its own tests in ``info["tests"]``: the command as text, or a table with
``command``, ``files`` (path -> text) and ``timeout_s``, over the verifier's settings.

This module owns scoring by tests; it must not start the sandbox's work (the run does) or
keep anything in it after scoring.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.sandbox import Sandbox, bounded_text
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.values.records import Episode, Reward

#: The variable that tells the tests where to write their reward file.
REWARD_DIR_VAR = "INTERPLAY_REWARD_DIR"
#: The reward files, in the order they are read.
REWARD_FILES = ("reward.json", "reward.txt")
#: The largest reward file read.
REWARD_FILE_BYTES = 64 * 1024


class TestsError(InterplayError):
    """The tests could not score the episode (no sandbox, no command, a malformed reward
    file): the episode is left unscored, with this as the reason."""

    __test__ = False  # not a test class, whatever pytest makes of its name


@attrs.define
class TestsConfig:
    """The ``tests`` verifier's settings (a row of ``env.verifiers`` with ``kind =
    "tests"``)."""

    __test__: ClassVar[bool] = False

    #: The shell command (bash -c) that runs the tests in the workspace after the agent is
    #: done; a task's info.tests (its command, or a table with command) replaces it.
    command: str = ""
    #: Seconds the tests may run; past them they are stopped and the episode scores 0.0,
    #: saying so. A task's info.tests.timeout_s replaces it.
    timeout_s: float = attrs.field(default=600.0, validator=attrs.validators.gt(0))
    #: Files written just before the tests run (path, relative to the workspace or absolute,
    #: -> text), over what the agent left there: tests held back from the agent. A task's
    #: info.tests.files are added over them.
    files: dict[str, str] = attrs.Factory(dict)
    #: The folder the tests may write reward.json or reward.txt in (absolute, or relative to
    #: the workspace), emptied of both before they run; they find it in
    #: $INTERPLAY_REWARD_DIR. Empty: a fresh folder for each scoring, outside the workspace.
    reward_dir: str = ""
    #: Bytes of the tests' output kept as the reward's reason (past them its middle is left
    #: out, and the text says how many bytes).
    output_bytes: int = attrs.field(default=4096, validator=attrs.validators.ge(256))
    #: The user the tests run as inside (empty: the sandbox's own).
    user: str = ""
    #: Its share of the episode's reward, a mean of the verifiers' rewards weighted by this (0
    #: records the reward without counting it).
    weight: float = 1.0


@attrs.frozen
class Plan:
    """What one scoring runs: the command, its limit, the files it needs."""

    command: str
    timeout_s: float
    files: Mapping[str, str]


def plan(cfg: TestsConfig, task_tests: Any, name: str = "tests") -> Plan:
    """The tests of one task: the verifier's settings under the task's ``info["tests"]``
    (its command as text, or a table with ``command``, ``files`` and ``timeout_s``)."""
    command, timeout_s, files = cfg.command, cfg.timeout_s, dict(cfg.files)
    if isinstance(task_tests, str):
        command = task_tests
    elif isinstance(task_tests, Mapping):
        unknown = sorted(set(task_tests) - {"command", "files", "timeout_s"})
        if unknown:
            raise TestsError(f"the task's info.tests has {unknown[0]!r}; it takes command, "
                             f"files and timeout_s")
        given = task_tests.get("command", command)
        if not isinstance(given, str):
            raise TestsError(f"the task's info.tests.command is {type(given).__name__}; give "
                             f"the shell command as text")
        command = given
        limit = task_tests.get("timeout_s", timeout_s)
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0:
            raise TestsError(f"the task's info.tests.timeout_s is {limit!r}; give seconds "
                             f"above 0")
        timeout_s = float(limit)
        more = task_tests.get("files", {})
        if not isinstance(more, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in more.items()):
            raise TestsError("the task's info.tests.files must be a table of path -> text")
        files.update(more)
    elif task_tests is not None:
        raise TestsError(f"the task's info.tests is {type(task_tests).__name__}; give the "
                         f"command as text or a table with command")
    if not command.strip():
        raise TestsError(f"verifier {name!r} has no command to run: set its command (a row "
                         f"of env.verifiers with kind = \"tests\", command = \"...\"), or give "
                         f"the task info.tests")
    return Plan(command=command, timeout_s=timeout_s, files=files)


def read_reward(name: str, data: bytes) -> tuple[float, dict[str, float]]:
    """The reward and the metrics a reward file ``name`` holds; TestsError saying what is
    wrong with it."""
    text = data.decode(errors="replace").strip()
    if name == "reward.txt":
        try:
            value = float(text)
        except ValueError:
            shown = text[:60] + ("..." if len(text) > 60 else "")
            raise TestsError(f"reward.txt holds {shown!r}, not a number") from None
        if not math.isfinite(value):
            raise TestsError(f"reward.txt holds {text!r}, not a finite number")
        return value, {}
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise TestsError(f"reward.json is not JSON ({exc})") from None
    if not isinstance(found, dict):
        raise TestsError(f"reward.json holds a {type(found).__name__}; it must be an object "
                         f"of numbers with a \"reward\"")
    metrics: dict[str, float] = {}
    for key, value in found.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or \
                not math.isfinite(value):
            raise TestsError(f"reward.json's {key!r} is {json.dumps(value)[:60]}, not a "
                             f"finite number")
        metrics[str(key)] = float(value)
    if "reward" not in metrics:
        keys = ", ".join(sorted(metrics)) or "nothing"
        raise TestsError(f"reward.json has no \"reward\" (it holds {keys})")
    return metrics.pop("reward"), metrics


class Tests(Verifier):
    """Runs the task's tests in the episode's sandbox, scored by exit status or reward file.

    The reward is their exit status (0: 1.0), or what the reward file they write says."""

    name = "tests"
    Config: ClassVar[type] = TestsConfig
    __test__: ClassVar[bool] = False

    async def score(self, episode: Episode, ctx: EpisodeContext) -> list[Reward]:
        cfg: TestsConfig = self.config
        tests = plan(cfg, episode.task.info.get("tests"), self.name)
        sandbox = await ctx.sandbox()
        if sandbox is None:
            raise TestsError(f"verifier {self.name!r} runs the tests in the episode's "
                             f"sandbox, and this episode has none: run it with --sandbox "
                             f"docker (or local)")
        folder, made = await self._reward_dir(sandbox)
        try:
            for path, text in tests.files.items():
                await sandbox.write_file(path, text)
            result = await sandbox.exec(["bash", "-c", tests.command],
                                        env={REWARD_DIR_VAR: folder},
                                        timeout_s=tests.timeout_s,
                                        output_bytes=cfg.output_bytes, user=cfg.user or None)
            found = None if result.timed_out or result.stopped else \
                await self._reward_file(sandbox, folder)
        finally:
            if made:
                await sandbox.exec(["rm", "-rf", "--", folder], timeout_s=60)
        if result.stopped is not None:
            raise TestsError(f"the tests could not run to their end: {result.stopped}")
        output, cut = bounded_text(result.output(), cfg.output_bytes)
        info: dict[str, Any] = {"exit_code": result.exit_code, "timed_out": result.timed_out,
                                "duration_s": round(result.duration_s, 3),
                                "output_cut": cut + result.stdout_cut + result.stderr_cut}
        metrics: dict[str, float] = {}
        if result.timed_out:
            value, source = 0.0, f"ran past their {tests.timeout_s:g} s limit"
        elif found is not None:
            file, data = found
            value, metrics = read_reward(file, data)
            source = f"{file} (tests {result.ending()})"
            info["reward_file"] = file
            info["metrics"] = metrics
        else:
            value = 1.0 if result.exit_code == 0 else 0.0
            source = result.ending()
        reason = f"tests {source}" + (f"\n{output}" if output.strip() else "")
        rewards = [Reward(self.name, value, weight=cfg.weight, reason=reason, info=info)]
        # Each other number of reward.json is a metric of the episode, counted in no reward.
        rewards += [Reward(f"{self.name}.{key}", number, weight=0.0)
                    for key, number in metrics.items()]
        return rewards

    async def _reward_dir(self, sandbox: Sandbox) -> tuple[str, bool]:
        """The folder the tests write their reward file in, with no reward file of before in
        it, and whether it was made for this scoring (then removed after)."""
        configured = self.config.reward_dir
        if configured:
            folder = posixpath.normpath(posixpath.join(sandbox.workdir, configured))
            argv = ["sh", "-c", 'mkdir -p "$1" && rm -f "$1/reward.json" "$1/reward.txt"',
                    "sh", folder]
        else:
            argv = ["mktemp", "-d", "-t", "interplay-tests.XXXXXX"]
        result = await sandbox.exec(argv, timeout_s=60, user=self.config.user or None)
        if not result.ok:
            raise TestsError(f"cannot make the reward folder in the sandbox "
                             f"({result.ending()}: {result.output().strip()[:200]})")
        return (folder, False) if configured else (result.stdout.strip(), True)

    async def _reward_file(self, sandbox: Sandbox, folder: str) -> tuple[str, bytes] | None:
        for file in REWARD_FILES:
            try:
                data = await sandbox.read_file(posixpath.join(folder, file),
                                               max_bytes=REWARD_FILE_BYTES)
            except FileNotFoundError:
                continue
            return file, data
        return None


__all__ = ["REWARD_DIR_VAR", "Tests", "TestsConfig", "TestsError", "plan", "read_reward"]
