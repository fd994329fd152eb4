"""mini-swe-agent with the episode's docker sandbox: the real ``mini`` on this machine, its
model through the interception server, each of its bash commands run in the container
through Sandbox.exec, scored by a test run in the sandbox; what its commands can reach and
see (the trace's secret is with the loop, not with them), and the default resume: a second
turn relaunches it on the conversation so far, in the same container."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from interplay import Env, EpisodeContext, SeatSpec, Step
from interplay.run import RunResources, run_episode
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    calc_fix_env,
    run_sandboxed,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("docker_sandbox")]

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

Fix = calc_fix_env("mini-swe-agent")


def bash(command: str) -> ScriptedReply:
    return ScriptedReply.tool_call("bash", {"command": command})


def outputs(request: ScriptedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


def the_loop() -> dict[str, str]:
    """What the running mini-swe-agent process holds, read from /proc while it waits for
    the model: its key to the interception server and the address its config names."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        env = dict(e.decode().split("=", 1) for e in environ if b"=" in e)
        if env.get("MSWEA_CONFIGURED") == "true" and b"-c" in argv:
            config = yaml.safe_load(Path(argv[argv.index(b"-c") + 1].decode()).read_text())
            return {"secret": env["OPENAI_API_KEY"],
                    "base_url": config["model"]["model_kwargs"]["api_base"]}
    raise AssertionError("no mini-swe-agent process found")


async def episode(handler: Any, env: Env | None = None, **sandbox: Any) -> Any:
    return await run_sandboxed(env or Fix(), handler, **sandbox)


@pytest.mark.parametrize(("fix", "reward"), [("a + b", 1.0), ("a * b", 0.0)])
async def test_mini_swe_agent_fixes_the_bug_with_its_bash_in_the_sandbox_and_the_tests_score_it(
        fix: str, reward: float) -> None:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        if not outputs(request):
            return bash(f"sed -i 's/a - b/{fix}/' calc.py && cat calc.py")
        return bash(SUBMIT)

    ep = await episode(handler)
    assert ep.error is None, ep.error
    assert ep.reward == reward
    trace = ep.trace("assistant")
    assert trace.error_type is None
    [segment] = trace.info["mini_swe_agent"]["segments"]
    assert (segment["where"], segment["commands_in"]) == ("host", "sandbox")
    assert (segment["exit_code"], segment["exit_status"], segment["commands"]) == \
        (0, "Submitted", 2)
    # Its own record: the trajectory as mini-swe-agent wrote it.
    saved = segment["trajectory"]
    assert saved["trajectory_format"] == "mini-swe-agent-1.1"
    assert saved["info"]["mini_version"] == "2.4.6"
    assert saved["info"]["config"]["environment_type"].endswith("SandboxEnvironment")
    assert [r.name for r in trace.tool_runs] == ["bash", "bash"]
    assert all(r.error_type is None for r in trace.tool_runs)
    [result] = [m.text for m in trace.messages if m.role == "tool"]
    assert f"return {fix}" in result and '"returncode": 0' in result
    changed = {c.path: c.status for c in ep.sandbox.changes.files}
    assert changed == {"calc.py": "modified"}
    assert f"+    return {fix}" in ep.sandbox.changes.diff
    # Every call is the loop's own, from this machine.
    assert [c.caller for c in trace.model_calls] == ["program", "program"]


async def test_its_commands_stay_in_the_container_and_never_see_the_secret(
        tmp_path: Path) -> None:
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text("only on the host")
    outside = Path(f"/tmp/interplay-outside-{uuid.uuid4().hex}")
    held: dict[str, str] = {}

    def handler(request: ScriptedRequest) -> ScriptedReply:
        if not held:
            held.update(the_loop())
        if outputs(request):
            return bash(SUBMIT)
        # Write outside the workspace, read this machine's file, show the environment, and
        # call the interception server with the key, as the loop does.
        forge = ("python3 - {url} {key} <<'PY'\n"
                 "import sys, urllib.request\n"
                 "req = urllib.request.Request(sys.argv[1] + '/chat/completions', data=b'{{}}',"
                 " headers={{'Authorization': 'Bearer ' + sys.argv[2]}})\n"
                 "try:\n    urllib.request.urlopen(req, timeout=5); print('FORGED')\n"
                 "except OSError as e:\n    print('UNREACHABLE', type(e).__name__)\n"
                 "PY").format(url=held["base_url"], key=held["secret"])
        return bash(f"echo escaped > {outside}; cat {outside}; cat {host_file}; "
                    f"echo read=$?; ls {tmp_path}; echo ENV:; env; echo END; {forge}")

    ep = await episode(handler)
    assert ep.error is None, ep.error
    trace = ep.trace("assistant")
    out = next(m.text for m in trace.messages if m.role == "tool")
    assert "escaped" in out  # it wrote the file, inside the container
    assert not await asyncio.to_thread(outside.exists)
    assert "only on the host" not in out and "read=1" in out
    environment = out.partition("ENV:")[2].partition("END")[0]
    assert len(held["secret"]) > 20 and held["secret"] not in environment
    assert "OPENAI_API_KEY" not in environment and "MSWEA_" not in environment
    assert "PAGER=cat" in environment  # mini.yaml's variables for its commands
    # The sandbox's network is `none`: the boundary the loop calls is out of its commands'
    # reach, so none of them can pose as the agent.
    assert "UNREACHABLE" in out and "FORGED" not in out
    assert [c.caller for c in trace.model_calls] == ["program", "program"]
    assert ep.sandbox.info["network"] == "none"


async def test_a_second_turn_relaunches_it_on_the_conversation_in_the_same_container() -> None:
    class Chat(Step):
        name = "chat"

        async def run(self, ctx: EpisodeContext) -> None:
            async with ctx.agent("assistant").chat(ctx.task) as session:
                first = await session.turn()
                assert not first.stopped
                await session.turn("And now show me the file.")

    class TwoTurns(Fix):
        def steps(self) -> list[Step]:
            return [Chat()]

    def handler(request: ScriptedRequest) -> ScriptedReply:
        task = next(str(m.get("content")) for m in request.messages if m.get("role") == "user")
        done = outputs(request)
        if "show me" not in task:
            return bash("sed -i 's/a - b/a + b/' calc.py") if not done else bash(SUBMIT)
        return bash("cat calc.py") if not done else bash(SUBMIT)

    with ScriptedModel(handler) as model:
        env = TwoTurns()
        resources = RunResources(endpoint=model.endpoint, sandbox={"kind": "docker"})
        try:
            ep = await run_episode(env, env.tasks()[0], resources=resources)
        finally:
            await resources.aclose()
        requests = list(model.requests)
    assert ep.error is None, ep.error
    trace = ep.trace("assistant")
    segments = trace.info["mini_swe_agent"]["segments"]
    assert [s["command"] for s in segments] == ["launch", "relaunch"]
    assert [s["exit_status"] for s in segments] == ["Submitted", "Submitted"]
    # The relaunch's task is the conversation so far, as a labelled transcript: the first
    # turn's command and its result, then the new message.
    second = next(r for r in requests if "show me" in str(r.messages[1].get("content")))
    task = str(second.messages[1]["content"])
    assert "[user]\nMake test_calc.py pass." in task
    assert "(called bash" in task and "sed -i 's/a - b/a + b/' calc.py" in task
    assert task.index("sed -i") < task.index("[user]\nAnd now show me the file.")
    # Same container: the second run reads the first one's fix.
    shown = [m.text for m in trace.messages if m.role == "tool"][-1]
    assert "return a + b" in shown
    assert [m.text for m in trace.messages if m.role == "user"] == \
        ["Make test_calc.py pass.", "And now show me the file."]
    assert ep.reward == 1.0


async def test_timeout_s_kills_it_mid_command_and_its_command_in_the_container_too() -> None:
    seen: dict[str, Any] = {}

    class ThenLook(Step):
        """The agent's turn, then what still runs in its sandbox and what it left there."""

        name = "then_look"

        async def run(self, ctx: EpisodeContext) -> None:
            await ctx.agent("assistant").run(ctx.task)
            sandbox = await ctx.sandbox()
            assert sandbox is not None
            listed = await sandbox.exec(["sh", "-c", "for p in /proc/[0-9]*; do "
                                         "tr '\\0' ' ' < $p/cmdline; echo; done"])
            seen["left"] = [line for line in listed.stdout.splitlines()
                            if line.startswith("sleep 60")]
            seen["calc"] = (await sandbox.read_file("calc.py")).decode()

    class Limited(Fix):
        seats: ClassVar = {"assistant": SeatSpec(harness="mini-swe-agent",
                                                 harness_config={"timeout_s": 6})}

        def steps(self) -> list[Step]:
            return [ThenLook()]

    def handler(request: ScriptedRequest) -> ScriptedReply:
        return bash("sed -i 's/a - b/a + b/' calc.py; sleep 60")

    ep = await episode(handler, env=Limited())
    trace = ep.trace("assistant")
    assert (trace.stop_condition, trace.error_type) == ("timeout", "timeout")
    assert trace.error == "mini-swe-agent exceeded 6 s (harness_config.timeout_s)"
    assert trace.info["mini_swe_agent"]["segments"][-1]["timed_out"] is True
    # Its command was stopped with it; the sandbox lives on with what it did.
    assert seen == {"left": [], "calc": "def add(a, b):\n    return a + b\n"}
