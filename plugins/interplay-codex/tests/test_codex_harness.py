"""The codex harness against the real codex CLI, the real interception server and the scripted
model (which sees the Chat Completions requests the server translates codex's Responses
requests into)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from interplay import (
    Env,
    EpisodeContext,
    InterplayError,
    SeatSpec,
    Step,
    Task,
    Tool,
    Trace,
    Verifier,
    lookup,
    tool,
)
from interplay.config import structure_config
from interplay.run import Agent, RunResources, run_episode
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    descendants,
    eval_with_harness,
    mentioning,
    survivors,
)
from interplay_codex import command_line
from interplay_codex.command_line import CodexConfig, find_codex
from interplay_codex.harness import CodexHarness

# Each test runs the codex CLI (a Node program) against the scripted model.
pytestmark = pytest.mark.slow

ECHO = "hello-from-codex"


def shell_then_answer(request: ScriptedRequest) -> ScriptedReply:
    """Run ``echo`` first; once its output is back, answer quoting it."""
    last = request.messages[-1]
    if last.get("role") == "tool":
        return ScriptedReply.text(f"The command printed: {last.get('content')}")
    return ScriptedReply.tool_call("exec_command", {"cmd": f"echo {ECHO}"})


def codex_env(harness_config: dict[str, Any]) -> Env:
    class CodexTaskEnv(Env):
        name = "codex-test"
        seats: ClassVar = {"assistant": SeatSpec(harness="codex", harness_config=harness_config)}

        def tasks(self) -> Iterable[Task]:
            return [Task(idx=0, prompt="Print the greeting with the shell.", answer=ECHO,
                         system_prompt="You are terse.")]

        def steps(self) -> list[Step]:
            return [lookup("steps", "one_shot")()]

        def verifiers(self) -> list[Verifier]:
            contains = lookup("verifiers", "contains")
            return [contains(contains.Config())]

        def tools(self, seat: str, ctx: EpisodeContext) -> list[Tool]:
            def lookup(word: str) -> str:
                """An env tool, offered to codex through the tool gateway."""
                return word

            return [tool(lookup)]

    return CodexTaskEnv()


def leftovers(path: Path) -> list[Path]:
    return sorted(path.iterdir())


async def test_one_shot_runs_a_shell_command_and_answers(codex_bin: str, tmp_path: Path) -> None:
    with ScriptedModel(shell_then_answer) as model:
        env = codex_env({"state_dir": str(tmp_path)})
        resources = RunResources(endpoint=model.endpoint)
        try:
            episode = await run_episode(env, next(iter(env.tasks())), resources=resources)
        finally:
            await resources.aclose()

    assert episode.error is None, episode.error
    assert episode.reward == 1.0
    trace = episode.trace("assistant")
    assert trace.harness == "codex"
    assert trace.stop_condition == "agent_completed"
    roles = [m.role for m in trace.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    # The task's system prompt reached the model (as codex's developer instructions).
    assert any(m["role"] == "system" and "You are terse." in m["content"]
               for m in model.requests[0].messages)
    call = trace.messages[2].tool_calls[0]
    assert call.name == "exec_command"
    assert call.parsed_arguments() == {"cmd": f"echo {ECHO}"}
    tool = trace.messages[3]
    assert tool.tool_call_id == call.id
    assert ECHO in tool.text
    assert trace.messages[4].text.startswith("The command printed:")
    assert ECHO in trace.messages[4].text

    # Every request codex made is a recorded turn, in the Responses shape codex spoke.
    assert len(trace.model_calls) == 2 == len(model.requests)
    assert all(c.api == "responses" and c.error_type is None for c in trace.model_calls)
    assert trace.usage.total_tokens > 0
    # The scripted model saw codex's request translated to Chat Completions, tool output included.
    second = model.requests[1]
    assert second.api == "chat.completions"
    assert any(m.get("role") == "tool" and ECHO in str(m.get("content"))
               for m in second.messages)

    assert [(r.call_id, r.name, r.error_type) for r in trace.tool_runs] == [
        (call.id, "exec_command", None)]
    info = trace.info["codex"]
    assert [s["command"] for s in info["segments"]] == ["exec"]
    assert info["segments"][0]["exit_code"] == 0
    uuid.UUID(info["thread_id"])
    # The env's tool was offered, as the gateway's (MCP) tool: codex's namespace, flattened
    # for the Chat Completions model.
    offered = {t["function"]["name"] for t in model.requests[0].body["tools"]}
    assert "mcp__interplay__lookup" in offered and "exec_command" in offered
    # The per-trace CODEX_HOME and workdir are gone once the trace closed.
    assert leftovers(tmp_path) == []


async def test_chat_resumes_the_same_codex_session(codex_bin: str, tmp_path: Path) -> None:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        users = [m for m in request.messages if m.get("role") == "user"]
        if request.messages[-1].get("role") == "tool":
            return ScriptedReply.text("first answer: " + ECHO)
        if users[-1].get("content") == "What does the shell say?":
            return ScriptedReply.tool_call("exec_command", {"cmd": f"echo {ECHO}"})
        return ScriptedReply.text(f"second answer after {len(request.messages)} messages")

    workdir = tmp_path / "work"
    state = tmp_path / "state"
    with ScriptedModel(handler) as model:
        resources = RunResources(endpoint=model.endpoint)
        harness = CodexHarness(CodexConfig(state_dir=str(state), workdir=str(workdir)))
        agent = Agent(name="assistant", harness=harness, client=resources.client())
        try:
            # No prompt: the chat is opened by the user's message, which launches fresh.
            async with agent.chat(Task(idx=0, prompt=None)) as session:
                first = await session.turn("What does the shell say?")
                homes = leftovers(state)
                second = await session.turn("--version, and now?")
            trace: Trace = session.trace
        finally:
            await agent.aclose()
            await resources.aclose()

    assert not first.stopped and not second.stopped
    assert first.text == "first answer: " + ECHO
    assert second.text.startswith("second answer")
    info = trace.info["codex"]
    assert [s["command"] for s in info["segments"]] == ["exec", "resume"]
    assert info["segments"][0]["thread_id"] == info["segments"][1]["thread_id"]
    assert all(s["exit_code"] == 0 for s in info["segments"])
    assert len(homes) == 1

    # The second turn's request carries the whole first turn: codex resumed its own session.
    assert len(model.requests) == 3
    last = model.requests[-1].messages
    texts = [str(m.get("content")) for m in last]
    assert "What does the shell say?" in texts
    assert any(m.get("role") == "tool" and ECHO in str(m.get("content")) for m in last)
    assert "first answer: " + ECHO in texts
    assert texts[-1] == "--version, and now?"

    assert [m.role for m in trace.messages] == ["user", "assistant", "tool", "assistant",
                                                "user", "assistant"]
    assert trace.messages[4].text == "--version, and now?"
    assert trace.messages[5].text == second.text
    assert len(trace.model_calls) == 3
    assert trace.stop_condition == "user_closed"
    # The per-trace home is gone; a configured workdir is the user's and stays.
    assert leftovers(state) == []
    assert workdir.is_dir()


@pytest.mark.parametrize("where", ["tool", "model"])
async def test_timeout_kills_codex_and_removes_its_home(codex_bin: str, tmp_path: Path,
                                                        where: str) -> None:
    marker = f"interplay-codex-test-{uuid.uuid4().hex}"

    def handler(request: ScriptedRequest) -> ScriptedReply:
        if where == "model":
            return ScriptedReply.hang()
        # A command that outlives the timeout, waited on by codex.
        return ScriptedReply.tool_call("exec_command", {
            "cmd": f"sleep 600 # {marker}", "yield_time_ms": 600000})

    state = tmp_path / "state"
    with ScriptedModel(handler) as model:
        resources = RunResources(endpoint=model.endpoint)
        harness = CodexHarness(CodexConfig(state_dir=str(state), timeout_s=8.0))
        # The model hang is cut by the seat's own timeout (the session cancels the segment);
        # the tool hang by the harness's timeout.
        spec = SeatSpec(harness="codex", timeout_s=6.0 if where == "model" else 600.0)
        agent = Agent(name="assistant", harness=harness, client=resources.client(), spec=spec)
        try:
            trace = await agent.run(Task(idx=0, prompt=f"wait {marker}"))
            assert leftovers(state) == []
            assert mentioning(marker) == []
            assert mentioning(str(state)) == []
        finally:
            await agent.aclose()
            await resources.aclose()

    assert trace.stop_condition == "timeout"
    assert trace.error_type == "timeout"
    if where == "model":
        assert trace.error == "segment exceeded 6 s"  # the session cancelled the segment
        assert len(model.requests) == 1
        segment = trace.info["codex"]["segments"][0]
        assert segment["cancelled"] is True
    else:
        assert trace.error == "codex exceeded 8 s (harness_config.timeout_s)"
        # The model's call and the command codex was still running when it was killed.
        call = trace.messages[-1].tool_calls[0]
        assert call.name == "exec_command" and marker in call.arguments
        assert [(r.call_id, r.name, r.error_type) for r in trace.tool_runs] == [
            (call.id, "exec_command", "timeout")]
        assert trace.info["codex"]["segments"][0]["timed_out"] is True


@pytest.mark.parametrize("sandbox", ["danger-full-access", "workspace-write"])
async def test_no_command_outlives_its_segment(codex_bin: str, tmp_path: Path,
                                               sandbox: str) -> None:
    marker = f"interplay-codex-test-{uuid.uuid4().hex}"
    # Background commands that outlive the command codex ran: one in a session of its own (which
    # codex leaves running without a sandbox), and a double fork.
    # The command waits until the first is in its session (it touches a file from there):
    # otherwise, on a busy machine, codex may end while it is still in codex's process group.
    ready = tmp_path / "in-own-session"
    cmd = (f"MARK={marker} setsid sh -c 'touch {ready}; exec sleep 600' >/dev/null 2>&1 & "
           f"(MARK={marker} nohup sleep 600 >/dev/null 2>&1 &); "
           f"while [ ! -e {ready} ]; do sleep 0.01; done; echo started")

    def handler(request: ScriptedRequest) -> ScriptedReply:
        if request.messages[-1].get("role") == "tool":
            return ScriptedReply.text("left them running")
        # No login shell: its profile (pyenv's rehash, say) is the machine's, not the test's.
        return ScriptedReply.tool_call("exec_command", {"cmd": cmd, "login": False})

    with ScriptedModel(handler) as model:
        resources = RunResources(endpoint=model.endpoint)
        harness = CodexHarness(CodexConfig(state_dir=str(tmp_path), sandbox=sandbox))
        agent = Agent(name="assistant", harness=harness, client=resources.client())
        try:
            async with agent.chat(Task(idx=0, prompt="start it")) as session:
                reply = await session.turn()
                # Gone when the segment ends, not only when the trace closes.
                survivors = mentioning(marker)
            trace = session.trace
        finally:
            await agent.aclose()
            await resources.aclose()

    assert reply.text == "left them running"
    assert any(m.role == "tool" and "started" in m.text for m in trace.messages)
    assert survivors == []
    assert mentioning(marker) == []
    segment = trace.info["codex"]["segments"][0]
    assert segment["exit_code"] == 0
    if sandbox == "danger-full-access":
        # Unsandboxed, codex leaves the new session's sleep running; the harness killed it.
        assert segment["strays_killed"] >= 1


def test_a_killed_run_leaves_no_command_behind(codex_bin: str, tmp_path: Path) -> None:
    """`interplay eval` on codex, killed (SIGKILL) while a command the model ran is running,
    with more left in the background: codex and all of them are gone within seconds."""
    marker = f"interplay-codex-test-{uuid.uuid4().hex}"
    # Waited on by codex, one in a session of its own, and a double fork (a child of init).
    cmd = (f"MARK={marker} setsid sleep 600 >/dev/null 2>&1 & "
           f"(MARK={marker} nohup sleep 600 >/dev/null 2>&1 &); MARK={marker} sleep 600")

    def handler(request: ScriptedRequest) -> ScriptedReply:
        return ScriptedReply.tool_call("exec_command", {"cmd": cmd, "login": False,
                                                        "yield_time_ms": 600000})

    with ScriptedModel(handler) as model:
        proc = subprocess.Popen(
            [sys.executable, "-m", "interplay.cli", "eval", "echo", "-n", "1",
             "--base-url", model.base_url, "-o", str(tmp_path / "run"), "--no-report", "-q",
             "--set", "seats.assistant.harness=codex",
             "--set", 'seats.assistant.harness_config.sandbox="danger-full-access"',
             "--set", f"seats.assistant.harness_config.state_dir={json.dumps(str(tmp_path))}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "INTERPLAY_LOAD_PLUGINS": "codex"})
        try:
            deadline = time.monotonic() + 120  # a failure bound, not a speed check
            while len(commands := set(mentioning(marker))) < 3:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "codex ran no command"
                time.sleep(0.05)
            tree = descendants(proc.pid) | commands
            proc.kill()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert len(tree) > len(commands)  # codex and the reaper too
    assert survivors(tree) == set()


async def test_failed_model_call_ends_the_segment_and_cleans_up(codex_bin: str,
                                                                tmp_path: Path) -> None:
    with ScriptedModel([ScriptedReply.fault(400)]) as model:
        resources = RunResources(endpoint=model.endpoint)
        harness = CodexHarness(CodexConfig(state_dir=str(tmp_path)))
        agent = Agent(name="assistant", harness=harness, client=resources.client())
        try:
            trace = await agent.run(Task(idx=0, prompt="anything"))
        finally:
            await agent.aclose()
            await resources.aclose()
    assert trace.stop_condition == "error"
    assert trace.error_type is not None and trace.error_type != "codex_failed"
    assert trace.model_calls and trace.model_calls[-1].error_type == trace.error_type
    assert trace.info["codex"]["segments"][0]["exit_code"] not in (0, None)
    assert leftovers(tmp_path) == []


async def test_missing_binary_says_how_to_install(tmp_path: Path) -> None:
    harness = CodexHarness(CodexConfig(binary=str(tmp_path / "no-codex")))
    with ScriptedModel() as model:
        resources = RunResources(endpoint=model.endpoint)
        agent = Agent(name="assistant", harness=harness, client=resources.client())
        try:
            with pytest.raises(InterplayError, match="npm install --prefix .venv/npm "
                                                     r"@openai/codex@0\.169\.0"):
                await agent.run(Task(idx=0, prompt="hi"))
        finally:
            await agent.aclose()
            await resources.aclose()
    assert model.requests == []


def test_a_missing_binary_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    out, requests = eval_with_harness("codex", tmp_path / "run",
                                      binary=str(tmp_path / "no-codex"))
    assert (out.returncode, requests) == (2, 0)
    [line] = out.stderr.splitlines()
    assert line.startswith("interplay: error: seats.assistant: harness 'codex': ")
    assert "npm install --prefix .venv/npm @openai/codex@0.169.0" in line
    assert not (tmp_path / "run").exists()


def test_another_version_is_said_when_the_run_starts(codex_bin: str, tmp_path: Path) -> None:
    fake = tmp_path / "codex"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "codex-cli 9.9.9"; '
                    f'exit 0; fi\nexec {codex_bin} "$@"\n')
    fake.chmod(0o755)
    out, _ = eval_with_harness("codex", tmp_path / "run", binary=str(fake),
                               state_dir=str(tmp_path / "state"))
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if "codex.version_differs" in line]
    assert len(said) == 1 and "9.9.9" in lines[said[0]]
    assert "@openai/codex@0.169.0" in lines[said[0]]
    # Before the run's first line: when it starts, not when its first episode does.
    assert said[0] < next(i for i, line in enumerate(lines) if "episodes to run" in line)


async def test_a_codex_that_cannot_run_is_a_config_error(tmp_path: Path) -> None:
    """An executable that is not a program (exec refuses it): one line naming the setting,
    no model call, no retries, nothing left behind."""
    fake = tmp_path / "codex"
    fake.write_bytes(b"\x7fELF not really a program\n")
    fake.chmod(0o755)
    harness = CodexHarness(CodexConfig(binary=str(fake), state_dir=str(tmp_path / "state")))
    with ScriptedModel() as model:
        resources = RunResources(endpoint=model.endpoint_with(max_retries=5))
        agent = Agent(name="assistant", harness=harness, client=resources.client())
        try:
            with pytest.raises(InterplayError, match=r"cannot run .*codex.* \(Exec format "
                                                     r"error\); .*harness_config\.binary") as err:
                await agent.run(Task(idx=0, prompt="hi"))
        finally:
            await agent.aclose()
            await resources.aclose()
    assert "\n" not in str(err.value)
    assert model.requests == []
    assert leftovers(tmp_path / "state") == []


#: One codex episode in a process of its own whose descriptors run out just as codex is to
#: start: every descriptor the limit allows is taken, and given back after ``release_s``
#: (never, if negative). As the command harness's test of the same, with codex.
CODEX_UNDER_PRESSURE = """
import asyncio, json, os, resource, sys
from typing import ClassVar
from interplay import Env, SeatSpec, Step, Task
from interplay.run import RunResources, run_episode
from interplay.testing import ScriptedModel, isolated_plugins
from interplay_codex import plugin

release_s, loop_name, retries, state_dir = (float(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                            sys.argv[4])

class Pressed(Env):
    name = "pressed"
    seats: ClassVar = {"assistant": SeatSpec(harness="codex")}

    def tasks(self):
        return []

    def steps(self):
        class Program(Step):
            name = "program"

            async def run(self, ctx):
                await ctx.resources.interception()
                async with ctx.agent("assistant").chat(ctx.task) as session:
                    held = []
                    try:
                        while True:
                            held.append(os.open(os.devnull, os.O_RDONLY))
                    except OSError:
                        pass
                    def give_back():
                        while held:
                            os.close(held.pop())
                    if release_s >= 0:
                        asyncio.get_running_loop().call_later(release_s, give_back)
                    try:
                        await session.turn()
                    finally:
                        give_back()  # before the trace closes, which removes its CODEX_HOME
        return [Program()]

async def main():
    with isolated_plugins(("codex", plugin, "interplay-codex")), ScriptedModel(["apple"]) as model:
        resources = RunResources(endpoint=model.endpoint_with(max_retries=retries), seats={
            "assistant": {"harness_config": {"state_dir": state_dir}}})
        try:
            ep = await run_episode(Pressed(), Task(0, prompt="Say apple."), resources=resources)
        finally:
            await resources.aclose()
    trace = ep.trace("assistant")
    print(json.dumps({"error_type": ep.error_type, "error": ep.error,
                      "stop": trace.stop_condition, "requests": len(model.requests),
                      "segments": trace.info.get("codex", {}).get("segments"),
                      "text": trace.messages[-1].text if trace.messages else None}))

resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
if loop_name == "uvloop":
    import uvloop
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
else:
    asyncio.run(main())
"""


def codex_under_pressure(tmp_path: Path, release_s: float, loop_name: str,
                         retries: int) -> dict[str, Any]:
    script = tmp_path / "pressed.py"
    script.write_text(CODEX_UNDER_PRESSURE)
    state = tmp_path / "state"
    done = subprocess.run([sys.executable, str(script), str(release_s), loop_name, str(retries),
                           str(state)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert leftovers(state) == []
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_codex_started_while_descriptors_run_out_is_started_again(
        codex_bin: str, tmp_path: Path, loop_name: str) -> None:
    out = codex_under_pressure(tmp_path, 0.3, loop_name, retries=8)
    assert (out["error_type"], out["stop"], out["text"]) == (None, "user_closed", "apple"), out
    assert out["requests"] == 1
    assert [s["exit_code"] for s in out["segments"]] == [0]


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_descriptors_that_stay_exhausted_end_codex_as_a_spawn_error(
        codex_bin: str, tmp_path: Path, loop_name: str) -> None:
    out = codex_under_pressure(tmp_path, -1, loop_name, retries=1)
    assert (out["error_type"], out["stop"]) == ("spawn_error", "error"), out
    # The episode's error names the seat whose program could not start.
    assert out["error"].startswith("seat 'assistant': the system could not start codex (")
    assert "harness_config" not in out["error"]
    assert "Too many open files" in out["error"] or "descriptors" in out["error"], out
    assert out["requests"] == 0
    [segment] = out["segments"]
    assert segment["exit_code"] is None
    assert segment["start_error"] == out["error"].removeprefix("seat 'assistant': ")


@pytest.mark.parametrize("setting", ["workdir", "state_dir"])
async def test_unusable_directory_names_the_setting_and_leaves_nothing(tmp_path: Path,
                                                                      setting: str) -> None:
    state = tmp_path / "state"
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    settings = {"state_dir": str(state), "workdir": str(blocker)}
    if setting == "state_dir":
        settings = {"state_dir": str(blocker / "sub")}
    harness = CodexHarness(CodexConfig(**settings))
    with ScriptedModel() as model:
        resources = RunResources(endpoint=model.endpoint)
        agent = Agent(name="assistant", harness=harness, client=resources.client())
        try:
            with pytest.raises(InterplayError, match=f"cannot use {setting} .*"
                                                     f"set harness_config.{setting}") as err:
                await agent.run(Task(idx=0, prompt="hi"))
        finally:
            await agent.aclose()
            await resources.aclose()
    assert "\n" not in str(err.value)
    assert model.requests == []
    # The per-trace root made before the failure is gone.
    if setting == "workdir":
        assert leftovers(state) == []
    else:
        assert leftovers(tmp_path) == [blocker]
    assert blocker.read_text() == "not a directory"


def test_no_codex_anywhere_says_how_to_install(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InterplayError, match=r"not installed; .*bash \.ci/setup --test"):
        find_codex()


def test_config_is_checked_when_the_seat_loads() -> None:

    cfg = structure_config({"sandbox": "read-only", "extra_args": ["-c", "x=1"]}, CodexConfig)
    assert cfg.sandbox == "read-only"
    with pytest.raises(InterplayError, match="sandbox"):
        structure_config({"sandbox": "none"}, CodexConfig)
    with pytest.raises(InterplayError, match="timeout_s"):
        structure_config({"timeout_s": 0}, CodexConfig)


def test_argv_keeps_the_sandbox_before_resume(tmp_path: Path) -> None:
    cfg = CodexConfig(sandbox="danger-full-access",
                      extra_args=["-c", "model_reasoning_effort=\"low\""])
    argv = command_line.argv("codex", cfg, base_url="http://127.0.0.1:1/v1", model="m",
                             instructions='Be "brief".\nAlways.', subcommand=["resume", "abc"])
    assert argv[-3:] == ["resume", "abc", "-"]
    assert argv.index("-s") < argv.index("resume")
    assert argv[argv.index("-s") + 1] == "danger-full-access"
    assert argv[argv.index("-m") + 1] == "m"
    dev = next(a for a in argv if a.startswith("developer_instructions="))
    assert json.loads(dev.split("=", 1)[1]) == 'Be "brief".\nAlways.'
    assert "model_reasoning_effort=\"low\"" in argv
    assert not [a for a in argv if a.startswith("mcp_servers.")]

    # With tools, the gateway is codex's MCP server `interplay`, set per run with -c.
    argv = command_line.argv("codex", cfg, base_url="http://127.0.0.1:1/v1", model="m",
                             instructions='Be "brief".\nAlways.', subcommand=["resume", "abc"],
                             tools_url="http://127.0.0.1:2/mcp", tool_timeout_s=12.5)
    assert argv[-3:] == ["resume", "abc", "-"]
    # Each one a -c override.
    assert [a for a, b in itertools.pairwise(argv) if b.startswith("mcp_servers.")] == \
        ["-c"] * 5
    settings = dict(b.split("=", 1) for b in argv if b.startswith("mcp_servers.interplay."))
    assert settings == {"mcp_servers.interplay.url": '"http://127.0.0.1:2/mcp"',
                        "mcp_servers.interplay.bearer_token_env_var": "INTERPLAY_MCP_TOKEN",
                        "mcp_servers.interplay.default_tools_approval_mode": '"approve"',
                        "mcp_servers.interplay.startup_timeout_sec": "30",
                        "mcp_servers.interplay.tool_timeout_sec": "28"}
    assert max(i for i, a in enumerate(argv) if a.startswith("mcp_servers.")) < \
        argv.index("resume")


async def test_a_segment_never_runs_the_machines_login_shell(codex_bin: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    # codex snapshots the login shell at start and waits for it before it exits: a profile
    # that stalls (pyenv's rehash waiting on a lock a killed shell left) stalled every segment.
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "profile-ran"
    for profile in (".bash_profile", ".bash_login", ".profile", ".bashrc"):
        (home / profile).write_text(f"touch {marker}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SHELL", "/bin/bash")

    def answer(request: ScriptedRequest) -> ScriptedReply:
        return ScriptedReply.text("nothing to run")

    with ScriptedModel(answer) as model:
        env = codex_env({"state_dir": str(tmp_path / "state")})
        (tmp_path / "state").mkdir()
        resources = RunResources(endpoint=model.endpoint)
        try:
            episode = await run_episode(env, next(iter(env.tasks())), resources=resources)
        finally:
            await resources.aclose()

    assert episode.error is None, episode.error
    assert episode.trace("assistant").info["codex"]["segments"][0]["exit_code"] == 0
    assert not marker.exists()
