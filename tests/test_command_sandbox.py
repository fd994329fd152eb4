"""The command harness inside the episode's docker sandbox: the program brought in with
harness_config.bring (read-only), {python} the image's python3, the model reached over the
sandbox's `model` network and every call recorded, the task's workspace its working folder;
and the same program on the `local` backend."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from interplay import Env, EpisodeContext, Reward, SeatSpec, Step, Task, Verifier, Workspace
from interplay.run import RunResources, run_episode
from interplay.testing import ScriptedModel

pytestmark = pytest.mark.slow

#: An agent that asks its model for the fixed line, writes it, and says what it did; then
#: starts a shell that calls the model with its key, as a command could.
AGENT = r'''
import json, os, subprocess, sys, urllib.request

def ask(content):
    body = json.dumps({"model": os.environ["OPENAI_MODEL"],
                       "messages": [{"role": "user", "content": content}]}).encode()
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                 data=body, headers={"Content-Type": "application/json",
                                 "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    return json.load(urllib.request.urlopen(req))["choices"][0]["message"]["content"]

task = sys.stdin.read()
line = ask(task)
with open("calc.py", "w") as f:
    f.write("def add(a, b):\n    return " + line.strip() + "\n")
lib = os.path.join(os.path.dirname(__file__), "agent_lib.py")
subprocess.run(["sh", "-c", f"{sys.executable} {lib}"], check=True)
open("/tmp/outside-the-workspace", "w").write("x")
print("wrote", line.strip(), "in", os.getcwd(), "with", sys.executable)
'''
#: What the shell it starts runs: a call with the agent's key, posing as it.
LIB = r'''
import json, os, urllib.request
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "forged"}]}).encode()
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
urllib.request.urlopen(req).read()
'''


class OneShot(Step):
    name = "one_shot"

    async def run(self, ctx: EpisodeContext) -> None:
        await ctx.agent("assistant").run(ctx.task)


class Passing(Verifier):
    name = "passing"

    async def score(self, episode: Any, ctx: EpisodeContext) -> Reward:
        sandbox = await ctx.sandbox()
        assert sandbox is not None
        result = await sandbox.exec(["python3", "-c", "import calc; assert calc.add(2, 3) == 5"])
        return Reward(self.name, 1.0 if result.ok else 0.0)


class Fix(Env):
    name = "fix"
    needs_sandbox = True
    seats: ClassVar = {"assistant": SeatSpec(harness="command")}

    def tasks(self) -> list[Task]:
        return [Task(0, "Fix add.", workspace=Workspace(
            files={"calc.py": "def add(a, b):\n    return a - b\n"}))]

    def steps(self) -> list[Step]:
        return [OneShot()]

    def verifiers(self) -> list[Verifier]:
        return [Passing()]


def agent_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "agent.py").write_text(AGENT)
    (folder / "agent_lib.py").write_text(LIB)
    return folder


async def run_fix(tmp_path: Path, kind: str) -> Any:
    folder = await asyncio.to_thread(agent_folder, tmp_path)
    seats = {"assistant": {"harness_config": {"argv": ["{python}", "{bring}/agent/agent.py"],
                                              "bring": [str(folder)]}}}
    env = Fix()
    with ScriptedModel(lambda r: "a + b" if "Fix add" in str(r.messages) else "sure") as model:
        resources = RunResources(endpoint=model.endpoint, seats=seats, sandbox={"kind": kind})
        try:
            return await run_episode(env, env.tasks()[0], resources=resources)
        finally:
            await resources.aclose()


async def test_a_program_brought_into_a_docker_sandbox_fixes_the_task(
        tmp_path: Path, docker_sandbox: None) -> None:
    outside = Path("/tmp/outside-the-workspace")
    await asyncio.to_thread(outside.unlink, missing_ok=True)
    ep = await run_fix(tmp_path, "docker")
    assert ep.error is None, ep.error
    assert ep.reward == 1.0
    trace = ep.trace("assistant")
    assert trace.messages[-1].text == "wrote a + b in /workspace with /usr/bin/python3"
    [run] = trace.info["command_runs"]
    assert run["where"] == "sandbox" and run["exit_code"] == 0
    # Its own call, and the one the shell it started made with its key.
    assert [c.caller for c in trace.model_calls] == ["program", "other"]
    assert not await asyncio.to_thread(outside.exists)
    assert [c.path for c in ep.sandbox.changes.files] == ["calc.py"]


async def test_the_same_program_on_the_local_backend(tmp_path: Path) -> None:
    ep = await run_fix(tmp_path, "local")
    assert ep.error is None, ep.error
    assert ep.reward == 1.0
    trace = ep.trace("assistant")
    assert trace.info["command_runs"][0]["where"] == "sandbox"
    assert trace.messages[-1].text == f"wrote a + b in {ep.sandbox.workdir} with {sys.executable}"
    assert [c.caller for c in trace.model_calls] == ["program", "other"]
    await asyncio.to_thread(Path("/tmp/outside-the-workspace").unlink, missing_ok=True)


class Who(Verifier):
    """The reward is 1 when the agent's commands ran as the task's user and the verifier's own
    as the image's (root); its reason says who ran what."""

    name = "who"

    async def score(self, episode: Any, ctx: EpisodeContext) -> Reward:
        sandbox = await ctx.sandbox()
        assert sandbox is not None
        mine = (await sandbox.exec(["id", "-un"])).stdout.strip()
        owner = (await sandbox.exec(["stat", "-c", "%U", "calc.py"])).stdout.strip()
        wrote = (await sandbox.read_file("calc.py")).decode()
        return Reward(self.name, float(mine == "root" and owner == "nobody" and "a + b" in wrote),
                      reason=f"verifier {mine}, calc.py {owner}")


class AsNobody(Fix):
    name = "as_nobody"

    def tasks(self) -> list[Task]:
        return [Task(0, "Fix add.", workspace=Workspace(
            user="nobody", files={"calc.py": "def add(a, b):\n    return a - b\n"}))]

    def verifiers(self) -> list[Verifier]:
        return [Who()]


async def test_the_agents_commands_run_as_the_tasks_workspace_user(
        tmp_path: Path, docker_sandbox: None) -> None:
    script = ("id -un; sed -i 's/a - b/a + b/' calc.py && echo fixed; "
              "touch /root/x 2>/dev/null || echo 'no /root'")
    seats = {"assistant": {"harness_config": {"argv": ["sh", "-c", script]}}}
    env = AsNobody()
    with ScriptedModel(["unused"]) as model:
        resources = RunResources(endpoint=model.endpoint, seats=seats,
                                 sandbox={"kind": "docker"})
        try:
            ep = await run_episode(env, env.tasks()[0], resources=resources)
        finally:
            await resources.aclose()
    assert ep.error is None, ep.error
    assert ep.trace("assistant").messages[-1].text.split("\n") == ["nobody", "fixed", "no /root"]
    assert ep.rewards[0].reason == "verifier root, calc.py nobody"
    assert ep.reward == 1.0

