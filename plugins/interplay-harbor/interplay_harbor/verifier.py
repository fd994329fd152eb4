"""The ``harbor`` verifier: a task's tests run as Harbor's ``Verifier`` runs them, its reward
read as Harbor reads it.

In the episode's sandbox, after the agent: the reward files of an earlier run removed,
``tests/`` copied to ``/tests``, ``test.sh`` made executable and run (``(/tests/test.sh) >
/logs/verifier/test-stdout.txt 2>&1``, as the task's ``[verifier] user``, with its ``[verifier]
env``) under the task's ``[verifier] timeout_sec``; its exit code is not the score. The reward is
``/logs/verifier/reward.json`` when it exists (an object of finite numbers, each key a metric),
else ``/logs/verifier/reward.txt`` (one number, as ``{"reward": x}``). A file that is missing,
empty, not a number or not finite, or tests that outlast their timeout, leave the episode
unscored (a ``verifier_error``) saying why, as Harbor leaves such a trial without a reward.

The episode's reward is the dict's ``reward`` (its only key when it has one other; the mean
when several and no ``reward``); every key is also a metric (``harbor/KEY``). The test output
and the files of ``/logs/verifier`` are kept in ``results["harbor"]["verifier"]``, bounded.

This module owns the scoring; it must not run the agent.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay import (
    Episode,
    EpisodeContext,
    InterplayError,
    Reward,
    SandboxError,
    Step,
    Verifier,
)
from interplay_harbor.env import RESULTS_KEY, now
from interplay_harbor.tasks import TESTS_DIR, VERIFIER_LOGS, read_task

#: Bytes of the test output kept on the record.
OUTPUT_BYTES = 64 * 1024
#: Bytes of each file of /logs/verifier kept (for the export), and of all of them.
FILE_BYTES = 64 * 1024
FILES_BYTES = 512 * 1024
#: Lines of test output a reward's reason ends with.
REASON_LINES = 5


class RewardError(Exception):
    """The tests gave no reward Harbor would read: the episode is left unscored, saying why."""


@attrs.define
class HarborVerifierConfig:
    """Settings of the ``harbor`` verifier."""

    #: Multiplies every task's [verifier] timeout_sec (Harbor's --verifier-timeout-multiplier).
    timeout_multiplier: float = attrs.field(default=1.0, validator=attrs.validators.gt(0))


class HarborVerifier(Verifier):
    """Runs a Harbor task's tests/test.sh in the sandbox and reads its reward file."""

    name = "harbor"
    Config: ClassVar[type] = HarborVerifierConfig

    def check(self, steps: Sequence[Step]) -> list[str]:
        return []

    async def score(self, episode: Episode, ctx: EpisodeContext) -> list[Reward]:
        harbor = ctx.task.info.get(RESULTS_KEY)
        if not isinstance(harbor, dict):
            raise InterplayError("the harbor verifier scores Harbor tasks (task.info['harbor'])")
        sandbox = await ctx.sandbox()
        if sandbox is None:
            raise InterplayError("the harbor verifier runs the task's tests in its sandbox; "
                                 "the run gave this episode none")
        record = episode.results.setdefault(RESULTS_KEY, {"task_name": harbor["name"],
                                                          "timing": {}})
        timing = record.setdefault("timing", {})["verifier"] = {"started_at": now()}
        kept: dict[str, Any] = {}
        record["verifier"] = kept
        t0 = time.monotonic()
        try:
            return await self._verify(ctx, sandbox, harbor, kept)
        finally:
            timing["finished_at"] = now()
            timing["seconds"] = round(time.monotonic() - t0, 3)

    async def _verify(self, ctx: EpisodeContext, sandbox: Any, harbor: dict[str, Any],
                      kept: dict[str, Any]) -> list[Reward]:
        task = read_task(Path(harbor["path"]))
        root = "root"
        cleared = await sandbox.exec(
            ["bash", "-c", f"rm -f -- {VERIFIER_LOGS}/reward.txt {VERIFIER_LOGS}/reward.json"
                           f" && mkdir -p {VERIFIER_LOGS} {TESTS_DIR}"], user=root)
        if not cleared.ok:
            raise SandboxError(f"the verifier's folders could not be made "
                               f"({cleared.ending()}): {cleared.output().strip()[-200:]}")
        await sandbox.put(task.tests, TESTS_DIR)
        await sandbox.exec(["chmod", "+x", f"{TESTS_DIR}/test.sh"], user=root)
        limit = task.verifier_timeout_s * self.config.timeout_multiplier
        command = f"({TESTS_DIR}/test.sh) > {VERIFIER_LOGS}/test-stdout.txt 2>&1"
        result = await sandbox.exec(["bash", "-c", command], env=dict(task.verifier_env),
                                    timeout_s=limit, user=task.verifier_user)
        kept["command"] = command
        kept["exit_code"] = result.exit_code
        kept["duration_s"] = round(result.duration_s, 3)
        files = await _verifier_files(sandbox)
        kept["files"] = files
        output = files.get("test-stdout.txt", "")
        kept["test_output"] = output[-OUTPUT_BYTES:]
        if result.timed_out:
            kept["exception"] = "VerifierTimeoutError"
            raise RewardError(f"the tests ran past the task's [verifier] timeout_sec of "
                              f"{limit:g} s: no reward")
        if result.stopped is not None:
            raise RewardError(f"the tests were stopped ({result.stopped}): no reward")
        try:
            rewards = await _rewards(sandbox)
        except RewardError as exc:
            kept["exception"] = type(exc).__name__
            raise
        kept["rewards"] = rewards
        return as_rewards(rewards, self.name, _tail(output))


async def _verifier_files(sandbox: Any) -> dict[str, str]:
    """The files /logs/verifier holds after the tests (text, each bounded): what Harbor
    downloads into a trial's ``verifier/`` folder."""
    with tempfile.TemporaryDirectory(prefix="interplay-harbor-") as scratch:
        target = Path(scratch) / "verifier"
        try:
            await sandbox.get(VERIFIER_LOGS, target, max_bytes=64 * 1024 * 1024)
        except (FileNotFoundError, SandboxError):
            return {}
        out: dict[str, str] = {}
        total = 0
        for path in sorted(p for p in target.rglob("*") if p.is_file()):
            data = path.read_bytes()[:FILE_BYTES]
            if total + len(data) > FILES_BYTES:
                break
            total += len(data)
            out[path.relative_to(target).as_posix()] = data.decode(errors="replace")
        return out


async def _rewards(sandbox: Any) -> dict[str, float | int]:
    """The reward dict as Harbor's Verifier parses it: reward.json first, then reward.txt."""
    try:
        data = await sandbox.read_file(f"{VERIFIER_LOGS}/reward.json")
    except FileNotFoundError:
        data = None
    if data is not None:
        return parse_reward_json(data)
    try:
        text = await sandbox.read_file(f"{VERIFIER_LOGS}/reward.txt")
    except FileNotFoundError:
        raise RewardError(f"the tests wrote no reward: neither {VERIFIER_LOGS}/reward.json "
                          f"nor {VERIFIER_LOGS}/reward.txt exists") from None
    return parse_reward_text(text)


def parse_reward_json(data: bytes) -> dict[str, float | int]:
    """reward.json as Harbor reads it: an object whose values are finite numbers."""
    if not data:
        raise RewardError(f"{VERIFIER_LOGS}/reward.json is empty: no reward")
    try:
        rewards = json.loads(data)
    except ValueError:
        raise RewardError(f"{VERIFIER_LOGS}/reward.json is not JSON: no reward") from None
    if not isinstance(rewards, dict):
        raise RewardError(f"{VERIFIER_LOGS}/reward.json holds {type(rewards).__name__}, not an "
                          f"object of numbers: no reward")
    for key, value in rewards.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RewardError(f"{VERIFIER_LOGS}/reward.json: {key} is {value!r}, not a number: "
                              f"no reward")
        if not math.isfinite(value):
            raise RewardError(f"{VERIFIER_LOGS}/reward.json: {key} is {value!r}, not finite: "
                              f"no reward")
    return rewards


def parse_reward_text(data: bytes) -> dict[str, float | int]:
    """reward.txt as Harbor reads it: one finite number, as ``{"reward": x}``."""
    if not data:
        raise RewardError(f"{VERIFIER_LOGS}/reward.txt is empty: no reward")
    text = data.decode(errors="replace")
    try:
        value = float(text)
    except ValueError:
        raise RewardError(f"{VERIFIER_LOGS}/reward.txt holds {text.strip()[:40]!r}, not a "
                          f"number: no reward") from None
    if not math.isfinite(value):
        raise RewardError(f"{VERIFIER_LOGS}/reward.txt holds {value!r}, not finite: no reward")
    return {"reward": value}


def as_rewards(rewards: dict[str, float | int], name: str, reason: str) -> list[Reward]:
    """interplay's rewards of a Harbor reward dict: the episode's (``reward``; else the only
    key; else the mean, said so), then each key as a metric of weight 0."""
    if not rewards:
        raise RewardError(f"{VERIFIER_LOGS}/reward.json is an empty object: no reward")
    if "reward" in rewards:
        value, how = float(rewards["reward"]), ""
    elif len(rewards) == 1:
        [(key, only)] = rewards.items()
        value, how = float(only), f"(its one key, {key}) "
    else:
        value = sum(float(v) for v in rewards.values()) / len(rewards)
        how = f"(the mean of {', '.join(rewards)}) "
    main = Reward(name, value, reason=f"{how}{reason}".strip() or None,
                  info={"rewards": dict(rewards)})
    return [main, *(Reward(f"{name}/{key}", float(v), weight=0.0)
                    for key, v in rewards.items())]


def _tail(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    return " | ".join(ln.strip()[:200] for ln in lines[-REASON_LINES:])


__all__ = ["HarborVerifier", "HarborVerifierConfig", "RewardError", "as_rewards",
           "parse_reward_json", "parse_reward_text"]
