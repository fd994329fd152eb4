"""The Claude Code harness against the real Claude Code CLI, the real interception server (its
Messages route) and tool gateway, and the scripted model, which sees the Chat Completions
requests Claude Code's Messages requests became."""

from __future__ import annotations

import json
import stat
import uuid
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
    Verifier,
    lookup,
    tool,
)
from interplay.run import Agent, RunResources, run_episode
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    captured_log,
    eval_with_harness,
    mentioning,
)
from interplay.testing import run_interplay as interplay_cli
from interplay_claude_code.command_line import CLAUDE_CODE_VERSION, ClaudeCodeConfig
from interplay_claude_code.harness import ClaudeCodeHarness

# Each test runs the Claude Code CLI (a program of its own) against the scripted model.
pytestmark = pytest.mark.slow

PREFIX = "mcp__interplay__"


def leftovers(path: Path) -> list[Path]:
    return sorted(path.iterdir())


class Desk:
    """The help desk's side of a `user-sim` chat (the request whose system prompt is the
    desk's), and the user's."""

    def __init__(self) -> None:
        self.answers = 0

    def __call__(self, request: ScriptedRequest) -> str:
        system = " ".join(str(m.get("content")) for m in request.messages
                          if m.get("role") == "system")
        if "help desk" in system:
            self.answers += 1
            return f"Answer {self.answers}: Saturday from 10:00."
        return f"Thanks. Question {len(request.messages)}?"


def test_a_three_turn_chat_resumes_one_claude_code_session(claude_bin: str,
                                                           tmp_path: Path) -> None:
    desk = Desk()
    out_dir = tmp_path / "run"
    with ScriptedModel(desk) as model:
        out = interplay_cli("eval", "user-sim", "-n", "1", "--base-url", model.base_url,
                            "-o", str(out_dir), "--no-report", "--set", "env.relay.max_turns=3",
                            "--set", 'seats.assistant.harness="claude-code"',
                            "--set", "seats.assistant.sampling.max_tokens=50",
                            "--set", "seats.assistant.harness_config.state_dir="
                                     f"{json.dumps(str(tmp_path))}", timeout=600)
        requests = list(model.requests)
    assert out.returncode == 0, out.stderr
    episode = json.loads((out_dir / "episodes.jsonl").read_text())
    assert episode["error"] is None
    trace = next(t for t in episode["traces"] if t["agent"] == "assistant")
    assert trace["harness"] == "claude-code"
    info = trace["info"]["claude_code"]
    uuid.UUID(info["session_id"])
    assert [s["command"] for s in info["segments"]] == ["launch", "resume", "resume"]
    assert {s["session_id"] for s in info["segments"]} == {info["session_id"]}
    assert [(s["exit_code"], s["result"]["subtype"], s["text"]) for s in info["segments"]] == [
        (0, "success", f"Answer {n}: Saturday from 10:00.") for n in (1, 2, 3)]
    # Turn 2's and turn 3's requests carry the earlier turns: Claude Code resumed its own
    # session (not a relaunch on the accreted conversation, which would be a new session).
    desks = [r for r in requests if "help desk" in str(r.messages[0].get("content"))]
    assert len(desks) == 3
    assert {r.body["max_tokens"] for r in desks} == {50}  # the seat's, told to Claude Code
    said = [[(m["role"], m["content"]) for m in r.messages if m["role"] != "system"]
            for r in desks]
    assert [len(s) for s in said] == [1, 3, 5]
    assert said[2][:4] == said[1] + [("assistant", "Answer 2: Saturday from 10:00.")]
    assert said[1][:2] == said[0] + [("assistant", "Answer 1: Saturday from 10:00.")]
    # The env's system prompt reached the model after Claude Code's own line; its billing
    # header did not.
    system = str(desks[0].messages[0]["content"])
    assert system.startswith("You are a Claude agent") and "help desk" in system
    assert "billing" not in system
    # Claude Code's own tools are off, and the seat has no tools of the env's.
    assert all("tools" not in r.body for r in desks)
    # The trace: the user's lines and the desk's answers, as the model saw them.
    assert [m["role"] for m in trace["messages"]] == ["system", "user", "assistant", "user",
                                                      "assistant", "user", "assistant"]
    assert [c["api"] for c in trace["model_calls"]] == ["messages"] * 3
    assert all(c["usage"]["total_tokens"] > 0 for c in trace["model_calls"])
    assert sorted(tmp_path.iterdir()) == [out_dir]  # the per-trace home is gone


class OneShot(Env):
    """One Claude Code run on one task, with one env tool."""

    name = "claude-code-test"
    seats: ClassVar = {"assistant": SeatSpec(harness="claude-code")}

    def tasks(self) -> list[Task]:
        return [Task(idx=0, prompt="Look up 'zebra'.", system_prompt="You are terse.",
                     answer="striped")]

    def steps(self) -> list[Step]:
        return [lookup("steps", "one_shot")()]

    def verifiers(self) -> list[Verifier]:
        contains = lookup("verifiers", "contains")
        return [contains(contains.Config())]

    def tools(self, seat: str, ctx: EpisodeContext) -> list[Tool]:
        def look_up(word: str) -> str:
            """Look a word up."""
            return f"{word}: a striped horse"

        return [tool(look_up)]


def look_then_answer(request: ScriptedRequest) -> ScriptedReply:
    results = [m for m in request.messages if m["role"] == "tool"]
    if results:
        return ScriptedReply.text(f"It says: {results[-1]['content']}")
    return ScriptedReply.tool_call(PREFIX + "look_up", {"word": "zebra"})


async def test_the_envs_tools_through_the_gateway_and_nothing_of_the_users_setup(
        claude_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A user's own Claude Code settings in this process's environment: none reaches the seat.
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-the-users-own")
    monkeypatch.setenv("CLAUDE_CODE_USE_BEDROCK", "1")
    with ScriptedModel(look_then_answer) as model:
        resources = RunResources(endpoint=model.endpoint, seats={"assistant": {
            "harness_config": {"state_dir": str(tmp_path)}}})
        env = OneShot()
        try:
            episode = await run_episode(env, env.tasks()[0], resources=resources)
        finally:
            await resources.aclose()
    assert episode.error is None, episode.error
    assert episode.reward == 1.0
    trace = episode.trace("assistant")
    # The model was offered the env's tool alone, as Claude Code names an MCP server's.
    assert [[t["function"]["name"] for t in r.body["tools"]] for r in model.requests] == [
        [PREFIX + "look_up"]] * 2
    # Claude Code asked for the harness's output limit, not its 32,000 for a model it does
    # not know.
    assert {r.body["max_tokens"] for r in model.requests} == {8192}
    call = trace.messages[2].tool_calls[0]
    assert (call.name, call.parsed_arguments()) == (PREFIX + "look_up", {"word": "zebra"})
    assert trace.messages[3].tool_call_id == call.id
    assert "a striped horse" in trace.messages[3].text
    # The gateway ran it in-process and recorded it under the model's own call id.
    assert [(r.call_id, r.name, r.error_type) for r in trace.tool_runs] == [
        (call.id, "look_up", None)]
    segment = trace.info["claude_code"]["segments"][0]
    assert segment["mcp_servers"] == {"interplay": "connected"}
    assert segment["result"]["num_turns"] == 2
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("where", ["harness", "seat"])
async def test_a_timeout_kills_claude_code_and_removes_its_home(claude_bin: str, tmp_path: Path,
                                                                where: str) -> None:
    marker = f"interplay-claude-test-{uuid.uuid4().hex}"
    with ScriptedModel(lambda _: ScriptedReply.hang()) as model:
        resources = RunResources(endpoint=model.endpoint)
        harness = ClaudeCodeHarness(ClaudeCodeConfig(
            state_dir=str(tmp_path), timeout_s=6.0 if where == "harness" else 600.0))
        spec = SeatSpec(harness="claude-code", timeout_s=6.0 if where == "seat" else 600.0)
        agent = Agent(name="assistant", harness=harness, client=resources.client(), spec=spec)
        try:
            trace = await agent.run(Task(idx=0, prompt=f"wait {marker}"))
            assert leftovers(tmp_path) == []
            assert mentioning(marker) == [] and mentioning(str(tmp_path)) == []
        finally:
            await agent.aclose()
            await resources.aclose()
    assert (trace.stop_condition, trace.error_type) == ("timeout", "timeout")
    segment = trace.info["claude_code"]["segments"][0]
    if where == "seat":
        assert trace.error == "segment exceeded 6 s" and segment["cancelled"] is True
    else:
        assert trace.error == "Claude Code exceeded 6 s (harness_config.timeout_s)" \
            and segment["timed_out"] is True
    assert model.abandoned == 1  # its request was given up, not left waiting


async def test_its_own_tools_when_asked_for_and_no_command_outlives_the_segment(
        claude_bin: str, tmp_path: Path) -> None:
    marker = f"interplay-claude-test-{uuid.uuid4().hex}"
    ready = tmp_path / "in-own-session"
    # A command that leaves one process in a session of its own and a double fork behind.
    cmd = (f"MARK={marker} setsid sh -c 'touch {ready}; exec sleep 600' >/dev/null 2>&1 & "
           f"(MARK={marker} nohup sleep 600 >/dev/null 2>&1 &); "
           f"while [ ! -e {ready} ]; do sleep 0.01; done; echo started")

    def handler(request: ScriptedRequest) -> ScriptedReply:
        if any(m["role"] == "tool" for m in request.messages):
            return ScriptedReply.text("left them running")
        return ScriptedReply.tool_call("Bash", {"command": cmd, "description": "start"})

    state = tmp_path / "state"
    with ScriptedModel(handler) as model:
        resources = RunResources(endpoint=model.endpoint)
        harness = ClaudeCodeHarness(ClaudeCodeConfig(state_dir=str(state),
                                                     builtin_tools=["Bash"]))
        agent = Agent(name="assistant", harness=harness, client=resources.client())
        try:
            async with agent.chat(Task(idx=0, prompt="start it")) as session:
                reply = await session.turn()
                survivors = mentioning(marker)  # gone when the segment ends
            trace = session.trace
        finally:
            await agent.aclose()
            await resources.aclose()
    assert [t["function"]["name"] for t in model.requests[0].body["tools"]] == ["Bash"]
    assert reply.text == "left them running"
    assert any(m.role == "tool" and "started" in m.text for m in trace.messages)
    assert survivors == [] and mentioning(marker) == []
    call = trace.messages[1].tool_calls[0]
    assert [(r.call_id, r.name, r.error_type) for r in trace.tool_runs] == [
        (call.id, "Bash", None)]
    assert trace.info["claude_code"]["segments"][0]["strays_killed"] >= 1


# -- bad input -------------------------------------------------------------------------------


async def test_a_missing_cli_says_how_to_install_it(tmp_path: Path) -> None:
    harness = ClaudeCodeHarness(ClaudeCodeConfig(binary=str(tmp_path / "claude")))
    with pytest.raises(InterplayError) as raised:
        harness.binary()
    message = str(raised.value)
    assert "\n" not in message and "not found" in message
    assert f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}" in message


def test_a_missing_cli_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    out, requests = eval_with_harness("claude-code", tmp_path / "run",
                                      binary=str(tmp_path / "claude"))
    assert (out.returncode, requests) == (2, 0)
    [line] = out.stderr.splitlines()
    assert line.startswith("interplay: error: seats.assistant: harness 'claude-code': ")
    assert f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}" in line
    assert not (tmp_path / "run").exists()


def test_another_version_is_said_when_the_run_starts(claude_bin: str, tmp_path: Path) -> None:
    fake = tmp_path / "claude"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "9.9.9 (Claude Code)"; '
                    f'exit 0; fi\nexec {claude_bin} "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out, _ = eval_with_harness("claude-code", tmp_path / "run", binary=str(fake))
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if "claude_code.version_differs" in line]
    assert len(said) == 1 and "9.9.9" in lines[said[0]] and CLAUDE_CODE_VERSION in lines[said[0]]
    # Before the run's first line: when it starts, not when its first episode does.
    assert said[0] < next(i for i, line in enumerate(lines) if "episodes to run" in line)


async def test_it_waits_as_long_as_the_seat_and_stays_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What Claude Code is started with, as it sees it: its waits for a model answer (request,
    first byte, idle) no shorter than the seat's turn, which is longer here than the
    harness's own limit; telemetry, updates and error reports off; the trace's route, key
    and home, never the user's."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-the-users-own")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "the-users-own"))
    seen = tmp_path / "environment"
    fake = tmp_path / "claude"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{CLAUDE_CODE_VERSION} '
                    f'(Claude Code)"; exit 0; fi\nenv > {seen}\nexit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with ScriptedModel(["never asked"]) as model:
        resources = RunResources(endpoint=model.endpoint)
        harness = ClaudeCodeHarness(ClaudeCodeConfig(binary=str(fake), timeout_s=300.0,
                                                     state_dir=str(tmp_path / "state")))
        agent = Agent(name="assistant", harness=harness, client=resources.client(),
                      spec=SeatSpec(harness="claude-code", timeout_s=900.0))
        try:
            await agent.run(Task(idx=0, prompt="hello"))
        finally:
            await agent.aclose()
            await resources.aclose()
    env = dict(line.partition("=")[::2] for line in seen.read_text().splitlines()
               if "=" in line)
    assert {k: env.get(k) for k in ("API_TIMEOUT_MS", "CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS",
                                    "API_FORCE_IDLE_TIMEOUT")} == {
        "API_TIMEOUT_MS": "900000", "CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS": "900000",
        "API_FORCE_IDLE_TIMEOUT": "0"}
    assert {k: env.get(k) for k in ("DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER",
                                    "DISABLE_ERROR_REPORTING",
                                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")} == dict.fromkeys(
        ("DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER", "DISABLE_ERROR_REPORTING",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), "1")
    # Neither the user's key nor the trace's secret: Claude Code reads the secret with its
    # key helper (the commands it runs inherit this environment).
    assert "ANTHROPIC_API_KEY" not in env and "INTERPLAY_MCP_TOKEN" not in env
    assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert env["CLAUDE_CONFIG_DIR"].startswith(str(tmp_path / "state"))
    assert env["HOME"].startswith(str(tmp_path / "state"))


async def test_a_crash_ends_the_exchange_with_its_last_words(tmp_path: Path) -> None:
    crash = tmp_path / "claude"
    crash.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{CLAUDE_CODE_VERSION} '
                     f'(Claude Code)"; exit 0; fi\necho "starting" >&2\n'
                     f'echo "Error: out of cheese" >&2\nexit 3\n')
    crash.chmod(crash.stat().st_mode | stat.S_IEXEC)
    with ScriptedModel(["never asked"]) as model:
        resources = RunResources(endpoint=model.endpoint)
        harness = ClaudeCodeHarness(ClaudeCodeConfig(binary=str(crash),
                                                     state_dir=str(tmp_path / "state")))
        agent = Agent(name="assistant", harness=harness, client=resources.client())
        try:
            trace = await agent.run(Task(idx=0, prompt="hello"))
        finally:
            await agent.aclose()
            await resources.aclose()
    assert (trace.stop_condition, trace.error_type) == ("error", "claude_code_failed")
    assert trace.error == "Claude Code exited with code 3: Error: out of cheese"
    segment = trace.info["claude_code"]["segments"][0]
    assert segment["exit_code"] == 3 and "out of cheese" in segment["stderr"]
    assert model.requests == [] and leftovers(tmp_path / "state") == []


async def test_tools_it_cannot_reach_end_the_segment_saying_so(claude_bin: str,
                                                               tmp_path: Path) -> None:
    # A config of the user's that points the gateway's name at a port nothing listens on.
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"mcpServers": {"interplay": {
        "type": "http", "url": "http://127.0.0.1:9/mcp"}}}))
    with ScriptedModel(look_then_answer) as model:
        resources = RunResources(endpoint=model.endpoint, seats={"assistant": {
            "harness_config": {"state_dir": str(tmp_path / "state"),
                               "extra_args": ["--mcp-config", str(elsewhere)]}}})
        env = OneShot()
        with captured_log("info"):
            try:
                episode = await run_episode(env, env.tasks()[0], resources=resources)
            finally:
                await resources.aclose()
    trace = episode.trace("assistant")
    assert (trace.stop_condition, trace.error_type) == ("error", "tools_unreachable")
    assert trace.error is not None and "could not reach the env's tools" in trace.error
    assert trace.info["claude_code"]["segments"][0]["mcp_servers"]["interplay"] != "connected"


def describe(config: dict[str, Any]) -> ClaudeCodeConfig:
    from interplay.config import structure_config

    return structure_config(config, ClaudeCodeConfig, path="harness_config")


def test_settings_are_checked_where_they_are_given() -> None:
    with pytest.raises(InterplayError) as raised:
        describe({"timeout_s": 0})
    assert "timeout_s" in str(raised.value)
    with pytest.raises(InterplayError):
        describe({"builtin_tools": "Bash"})
    assert describe({"builtin_tools": ["Bash", "Read"], "max_turns": 4}).max_turns == 4
