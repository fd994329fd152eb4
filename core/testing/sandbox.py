"""Whether a sandbox backend can run here, for the tests that need it (:func:`docker_problem`:
the docker backend's own check when a run starts: its SDK, a daemon that answers, the image),
and the pytest fixture ``docker_sandbox`` (``interplay.testing.pytest_plugin``) that skips a
test with the reason; and one small task a harness proves itself on in a sandbox
(:func:`calc_fix_env`, :func:`run_sandboxed`): ``calc.py`` with a bug and the test that
finds it, scored by that test run in the episode's sandbox.

This module owns that question; it must not start a daemon or build an image (``.ci/setup
--test`` does, as docs/sandboxes.md says).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar

from interplay.contracts.contexts import EpisodeContext, SeatSpec
from interplay.contracts.env import Env
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.values.records import Episode, Reward, Task, Workspace

#: The task's ``calc.py``, with its bug (``-`` for ``+``), and the test that finds it.
CALC_BUG = "def add(a, b):\n    return a - b\n"
CALC_TEST = "import calc\nassert calc.add(2, 3) == 5, calc.add(2, 3)\nprint('ok')\n"


@functools.cache
def docker_problem(image: str | None = None) -> str | None:
    """Why the docker sandbox cannot run here (its SDK missing, no daemon answering, ``image``
    — by default the one it starts from — not on the daemon), in one line; None when it can.
    Asked once per process and image."""
    from interplay.contracts.sandbox import SandboxNeeds
    from interplay.plugins import host as plugins
    from interplay.values.records import Workspace

    try:
        backend = plugins.get("sandboxes", "docker")()
    except Exception as exc:
        return str(exc)
    problems = backend.check() or backend.problems(Workspace(image=image), SandboxNeeds())
    return problems[0] if problems else None


class _OneShot(Step):
    name = "one_shot"

    async def run(self, ctx: EpisodeContext) -> None:
        await ctx.agent("assistant").run(ctx.task)


class _CalcTestPasses(Verifier):
    name = "test_passes"

    async def score(self, episode: Any, ctx: EpisodeContext) -> Reward:
        sandbox = await ctx.sandbox()
        assert sandbox is not None
        result = await sandbox.exec(["python3", "test_calc.py"])
        return Reward(self.name, 1.0 if result.ok else 0.0, reason=result.output()[-300:])


class _CalcFix(Env):
    name = "fix"
    needs_sandbox = True

    def tasks(self) -> list[Task]:
        return [Task(0, "Make test_calc.py pass.", workspace=Workspace(
            files={"calc.py": CALC_BUG, "test_calc.py": CALC_TEST}))]

    def steps(self) -> list[Step]:
        return [_OneShot()]

    def verifiers(self) -> list[Verifier]:
        return [_CalcTestPasses()]


def calc_fix_env(harness: str) -> type[Env]:
    """An env of one task, "Make test_calc.py pass.", in a sandbox: its workspace
    :data:`CALC_BUG` and :data:`CALC_TEST`, its agent seat played by ``harness`` once (a
    subclass may give other steps), its reward ``test_passes``: 1.0 when the test passes in
    the sandbox after the agent, else 0.0, the test's output the reason."""

    class CalcFix(_CalcFix):
        seats: ClassVar = {"assistant": SeatSpec(harness=harness)}

    return CalcFix


async def run_sandboxed(env: Env, handler: Callable[..., Any], **sandbox: Any) -> Episode:
    """The episode of ``env``'s first task with a scripted model answering by ``handler``
    (as :class:`interplay.testing.ScriptedModel` takes it), in a ``docker`` sandbox of the
    settings ``sandbox``."""
    from interplay.run.episode import RunResources, run_episode
    from interplay.testing.scripted import ScriptedModel

    with ScriptedModel(handler) as model:
        resources = RunResources(endpoint=model.endpoint, sandbox={"kind": "docker", **sandbox})
        try:
            return await run_episode(env, env.tasks()[0], resources=resources)
        finally:
            await resources.aclose()
