"""The ``command`` harness: a real CLI program, run as a subprocess, talking to the model through
the real interception server (the scripted model behind it)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.errors import InterplayError
from interplay.run.episode import LiveEpisodeContext
from interplay.testing import (
    ScriptedReply,
    ScriptedRequest,
    ScriptedRun,
    run_scripted,
    survivors,
)
from interplay.values.records import Task

AGENT = textwrap.dedent("""
    import json, os, sys, time
    mode = sys.argv[1]
    if mode == "sleep":
        open(sys.argv[2], "w").write(str(os.getpid()))
        time.sleep(60)
    if mode == "background":
        import subprocess
        kid = subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        open(sys.argv[2], "w").write(str(kid.pid))
        print("left one running")
        sys.exit(0)
    if mode == "fail":
        print("partial answer")
        print("something broke", file=sys.stderr)
        sys.exit(3)
    from openai import OpenAI  # after the quick modes: importing it takes a while under load
    data = sys.stdin.read()
    messages = json.loads(data) if mode == "messages" else [{"role": "user", "content": data}]
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the harness
    reply = client.chat.completions.create(model=os.environ["OPENAI_MODEL"], messages=messages)
    print(reply.choices[0].message.content)
""")


def count_users(request: ScriptedRequest) -> ScriptedReply:
    n = sum(1 for m in request.messages if m.get("role") == "user")
    return ScriptedReply.text(f"program heard {n}: {request.last_user_text()}")


class CommandEnv(Env):
    name = "command-test"
    seats: ClassVar[dict[str, SeatSpec]] = {"assistant": SeatSpec(harness="command")}

    def __init__(self, program: Any) -> None:
        super().__init__()
        self.program = program

    def tasks(self) -> Iterable[Task]:
        return []

    def steps(self) -> list[Step]:
        env = self

        class Program(Step):
            name = "program"

            async def run(self, ctx: LiveEpisodeContext) -> None:
                await env.program(ctx)

        return [Program()]


@pytest.fixture
def agent_script(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return path


async def one_call(ctx: LiveEpisodeContext) -> None:
    await ctx.agent("assistant").run(ctx.task)


async def run_program(program: Any, task: Task, argv: list[str], **cfg: Any) -> ScriptedRun:
    """``program`` (an episode's steps) with the assistant seat filled by the command harness
    running ``argv``, against the scripted model."""
    return await run_scripted(CommandEnv(program), task, count_users, seed=None, seats={
        "assistant": {"harness": "command", "harness_config": {"argv": argv, **cfg}}})


@pytest.mark.slow
async def test_a_program_answers_and_its_model_calls_are_recorded(
        agent_script: Path) -> None:
    ep = (await run_program(one_call, Task(0, prompt="hello program"),
                            [sys.executable, str(agent_script), "text"])).episode
    trace = ep.trace("assistant")
    assert ep.error is None, ep.error
    assert trace.messages[-1].text == "program heard 1: hello program"
    assert trace.stop_condition == "agent_completed"
    # The program's request went through the interception server and is on the trace.
    assert len(trace.model_calls) == 1
    call = trace.model_calls[0]
    assert call.request["messages"] == [{"role": "user", "content": "hello program"}]
    assert call.usage is not None and call.usage.total_tokens > 0
    assert trace.info["command_runs"][0]["exit_code"] == 0


@pytest.mark.slow
async def test_python_in_argv_is_the_python_that_runs_interplay(agent_script: Path,
                                                                tmp_path: Path) -> None:
    # A PATH whose `python` cannot import the agent's openai client: {python} is not it.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text("#!/bin/sh\nexit 97\n")
    (fake / "python").chmod(0o755)
    ep = (await run_program(one_call, Task(0, prompt="hello program"),
                            ["{python}", str(agent_script), "text"],
                            env={"PATH": f"{fake}:/usr/bin:/bin"})).episode
    assert ep.error is None, ep.error
    assert ep.trace("assistant").messages[-1].text == "program heard 1: hello program"


@pytest.mark.slow
async def test_a_program_reading_messages_takes_part_in_a_chat(
        agent_script: Path) -> None:
    replies: list[str] = []

    async def program(ctx: LiveEpisodeContext) -> None:
        agent = ctx.agent("assistant")
        assert agent.harness.can_resume()
        async with agent.chat(ctx.task) as chat:
            replies.append((await chat.turn()).text)
            replies.append((await chat.turn("second")).text)

    run = await run_program(program, Task(0, prompt="first", system_prompt="sys"),
                            [sys.executable, str(agent_script), "messages"],
                            prompt_format="messages")
    ep = run.episode
    assert replies == ["program heard 1: first", "program heard 2: second"]
    last = run.requests[-1].messages
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user"]
    assert len(ep.trace("assistant").model_calls) == 2


@pytest.mark.slow
async def test_a_text_only_program_cannot_continue_a_chat(
        agent_script: Path) -> None:
    async def program(ctx: LiveEpisodeContext) -> None:
        agent = ctx.agent("assistant")
        assert not agent.harness.can_resume()
        async with agent.chat(ctx.task) as chat:
            await chat.turn()
            with pytest.raises(InterplayError, match="cannot continue a chat") as refused:
                await chat.turn("second")
            # it says what to change
            assert 'set harness_config.prompt_format = "messages"' in str(refused.value)
            assert "\n" not in str(refused.value)

    ep = (await run_program(program, Task(0, prompt="first"),
                            [sys.executable, str(agent_script), "text"])).episode
    assert ep.error is None


@pytest.mark.slow
async def test_a_program_past_its_timeout_is_killed(
        agent_script: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    ep = (await run_program(one_call, Task(0, prompt="x"),
                            [sys.executable, str(agent_script), "sleep", str(pid_file)],
                            timeout_s=3.0)).episode
    trace = ep.trace("assistant")
    assert trace.stop_condition == "timeout"
    assert trace.error_type == "timeout"
    pid = int(pid_file.read_text())
    # The harness killed the process group and reaped the program before returning.
    assert survivors({pid}, within_s=0) == set()


async def test_what_a_program_leaves_running_ends_with_its_segment(
        agent_script: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    ep = (await run_program(one_call, Task(0, prompt="x"),
                            [sys.executable, str(agent_script), "background",
                             str(pid_file)])).episode
    assert ep.error is None, ep.error
    assert ep.trace("assistant").messages[-1].text == "left one running"
    assert survivors({int(pid_file.read_text())}) == set()


async def test_a_failing_program_records_exit_and_stderr(
        agent_script: Path) -> None:
    ep = (await run_program(one_call, Task(0, prompt="x"),
                            [sys.executable, str(agent_script), "fail"])).episode
    trace = ep.trace("assistant")
    assert trace.error_type == "command_failed"
    run = trace.info["command_runs"][0]
    assert run["exit_code"] == 3
    assert "something broke" in run["stderr"]
    assert trace.messages[-1].text == "partial answer"


async def test_a_missing_program_is_a_clear_error() -> None:
    ep = (await run_program(one_call, Task(0, prompt="x"), ["/nonexistent/agent-binary"])).episode
    assert ep.error_type == "config_error"
    assert "not found; fix harness_config.argv" in (ep.error or "")


async def test_a_missing_cwd_is_named_not_taken_for_a_missing_program(
        tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-dir")
    ep = (await run_program(one_call, Task(0, prompt="x"), [sys.executable, "-c", "pass"],
                            cwd=missing)).episode
    assert ep.error_type == "config_error"
    assert f"cwd {missing!r} is not a directory" in (ep.error or "")


async def test_a_non_executable_program_is_a_clear_error(
        tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    ep = (await run_program(one_call, Task(0, prompt="x"), [str(script)])).episode
    assert ep.error_type == "config_error"
    assert f"cannot run program {str(script)!r}" in (ep.error or "")
    assert "fix harness_config.argv" in (ep.error or "")



@pytest.mark.slow
@pytest.mark.parametrize("background", ["sleep 300 &", "setsid sleep 300 &"],
                         ids=["child", "setsid-grandchild"])
async def test_the_segment_ends_when_the_program_exits(tmp_path: Path, background: str) -> None:
    """A program that answers and exits while something it started still holds its stdout (a
    background child, or one in a session of its own) is done: its answer is recorded, not a
    timeout, nothing waits for the pipe's end, and what it left running ends with the segment
    (the one in a session of its own too: the segment's tag finds it). The program exits once
    its child is what it will stay (in its own session, for setsid), so the segment's end
    cannot catch it still in the program's group."""
    pid_file = tmp_path / "pid"
    settled = ('until [ "$(cut -d" " -f6 /proc/$!/stat)" = "$!" ]; do sleep 0.01; done'
               if background.startswith("setsid") else "")
    script = f"read x; echo apple; {background} echo $! > {pid_file}; {settled}"
    try:
        ep = (await run_program(one_call, Task(0, prompt="x"), ["bash", "-c", script],
                                timeout_s=5.0)).episode
        trace = ep.trace("assistant")
        assert ep.error is None, ep.error
        assert trace.stop_condition == "agent_completed"
        assert trace.messages[-1].text == "apple"
        assert trace.info["command_runs"][0]["exit_code"] == 0
        assert trace.info["command_runs"][0]["stdout"] == "apple\n"
        assert survivors({int(pid_file.read_text())}) == set()
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError, OSError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.mark.slow
async def test_a_timed_out_program_keeps_what_it_wrote(tmp_path: Path) -> None:
    ep = (await run_program(one_call, Task(0, prompt="x"),
                            ["bash", "-c", "echo partial; echo trying >&2; sleep 30"],
                            timeout_s=2.0)).episode
    trace = ep.trace("assistant")
    assert trace.error_type == "timeout"
    run = trace.info["command_runs"][0]
    assert (run["stdout"], run["stderr"]) == ("partial\n", "trying\n")


async def test_a_program_that_ignores_its_stdin_is_not_waited_for() -> None:
    """A prompt larger than a pipe holds, to a program that never reads it and exits."""
    ep = (await run_program(one_call, Task(0, prompt="x" * (1 << 20)),
                            ["bash", "-c", "echo apple"], timeout_s=10.0)).episode
    assert ep.error is None, ep.error
    assert ep.trace("assistant").messages[-1].text == "apple"


#: One episode of the command harness in a process of its own whose descriptors run out
#: just as its program is to start: every descriptor the limit allows is taken, and given
#: back after ``release_s`` (never, if negative).
SPAWN_UNDER_PRESSURE = textwrap.dedent("""
    import asyncio, json, os, resource, sys
    from typing import ClassVar
    from interplay import Env, SeatSpec, Step, Task
    from interplay.testing import run_scripted

    release_s, loop_name, retries = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])

    class Pressed(Env):
        name = "pressed"
        seats: ClassVar = {"assistant": SeatSpec(harness="command")}

        def tasks(self):
            return []

        def steps(self):
            class Program(Step):
                name = "program"

                async def run(self, ctx):
                    await ctx.resources.interception()
                    agent = ctx.agent("assistant")
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
                        await agent.run(ctx.task)
                    finally:
                        give_back()
            return [Program()]

    async def main():
        run = await run_scripted(Pressed(), Task(0, prompt="x"), ["unused"], seats={
            "assistant": {"harness": "command", "model": {"max_retries": retries},
                          "harness_config": {"argv": [sys.executable, "-c", "print('apple')"]}}})
        ep = run.episode
        trace = ep.trace("assistant")
        print(json.dumps({"error_type": ep.error_type, "error": ep.error,
                          "stop": trace.stop_condition,
                          "text": trace.messages[-1].text if trace.messages else None}))

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    if loop_name == "uvloop":
        from interplay._plumbing import aio as _aio
        _aio.run(main())
    else:
        asyncio.run(main())
""")


def run_under_pressure(tmp_path: Path, release_s: float, loop_name: str,
                       retries: int) -> dict[str, Any]:
    script = tmp_path / "pressed.py"
    script.write_text(SPAWN_UNDER_PRESSURE)
    done = subprocess.run([sys.executable, str(script), str(release_s), loop_name, str(retries)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_program_started_while_descriptors_run_out_is_started_again(
        tmp_path: Path, loop_name: str) -> None:
    out = run_under_pressure(tmp_path, 0.3, loop_name, retries=8)
    assert (out["error_type"], out["stop"], out["text"]) == (None, "agent_completed", "apple"), out


@pytest.mark.slow
@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_descriptors_that_stay_exhausted_are_a_transient_error_not_the_users(
        tmp_path: Path, loop_name: str) -> None:
    out = run_under_pressure(tmp_path, -1, loop_name, retries=1)
    assert out["error_type"] == "spawn_error", out
    assert out["stop"] == "error"
    assert "harness_config" not in out["error"]
    assert "Too many open files" in out["error"] or "descriptors" in out["error"], out


#: A command program for `interplay eval`: it leaves its base URL in argv[1]/url for the test,
#: waits until argv[1]/held exists (a hostile client is holding connections by then), asks the
#: model through the interception server on a connection of its own (trying three times, as
#: the OpenAI SDK does), and prints the answer; with argv[2] == "limit" it prints its
#: descriptor limit instead.
UNDER_ATTACK = textwrap.dedent("""
    import json, os, resource, sys, time, urllib.request
    folder = sys.argv[1]
    if sys.argv[2:] == ["limit"]:
        print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        sys.exit(0)
    base = os.environ["OPENAI_BASE_URL"]
    tmp = os.path.join(folder, f"url.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(base)
    os.replace(tmp, os.path.join(folder, "url"))
    while not os.path.exists(os.path.join(folder, "held")):
        time.sleep(0.05)
    body = json.dumps({"model": os.environ["OPENAI_MODEL"],
                       "messages": [{"role": "user", "content": sys.stdin.read()}]}).encode()
    for attempt in range(3):
        try:
            request = urllib.request.Request(base + "/chat/completions", data=body, headers={
                "authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                "content-type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as answer:
                print(json.load(answer)["choices"][0]["message"]["content"])
                break
        except OSError:
            if attempt == 2:
                raise
            time.sleep(0.5 * 2 ** attempt)
""")


def _eval_under_limit(tmp_path: Path, model_url: str, ulimit: str,
                      mode: str = "ask") -> subprocess.Popen[str]:
    program = tmp_path / "program.py"
    program.write_text(UNDER_ATTACK)
    argv = json.dumps([sys.executable, str(program), str(tmp_path), mode])
    command = " ".join([sys.executable, "-m", "interplay.cli", "eval", "echo", "-n", "8", "-r",
                        "4", "-c", "4", "--base-url", model_url, "-o", str(tmp_path / "run"),
                        "--no-report", "-q", "--set", "seats.assistant.harness=command",
                        "--set", f"'seats.assistant.harness_config.argv={argv}'"])
    return subprocess.Popen(["bash", "-c", f"ulimit {ulimit} && exec {command}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})


@pytest.mark.slow
def test_a_run_under_a_descriptor_limit_completes_while_a_client_hoards_connections(
        tmp_path: Path, scripted_model: Any) -> None:
    """`ulimit -n 1024`, and a local client holding 1,100 half-sent connections to the run's
    interception server from its first episode on: every episode completes."""
    from test_listeners import HOSTILE

    model = scripted_model()
    run = _eval_under_limit(tmp_path, model.base_url, "-n 1024")
    hostile = None
    try:
        url = tmp_path / "url"
        deadline = time.monotonic() + 120  # a failure bound, not a speed check
        while not url.exists():
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        port = url.read_text().split(":")[2].split("/")[0]
        hostile = subprocess.Popen([sys.executable, "-c", HOSTILE, port, "1100"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert hostile.stdout is not None
        assert hostile.stdout.readline() == "held\n"
        (tmp_path / "held").touch()
        out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
        if hostile is not None:
            hostile.communicate(timeout=60)
    assert run.returncode == 0, out + err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["completed"], summary["errors"]) == (32, {}), summary


@pytest.mark.slow
def test_the_command_raises_its_soft_descriptor_limit(tmp_path: Path,
                                                      scripted_model: Any) -> None:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip("no hard descriptor limit above 256 to raise to")
    run = _eval_under_limit(tmp_path, scripted_model().base_url, "-Sn 256", mode="limit")
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, out + err
    lines = (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()
    answers = {json.loads(line)["traces"][0]["messages"][-1]["content"] for line in lines}
    assert answers == {str(hard)}
