"""Agents in a Harbor task's container on the scripted model, scored by the task's tests:
Claude Code and codex (each with its own shell in the container), mini-swe-agent (its loop on
this machine, its commands through Sandbox.exec) and chat (its sandbox tools) each solving
three example tasks (a wrong fix scores 0), and the user-sim variant, where the instruction
the agent gets hides the port the tests check: Claude Code asks the user, she answers from
what the task says she knows, and its session is resumed in the same container to write it."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import interplay_harbor.plugin
from interplay import Episode, load_env
from interplay.testing import (
    ScriptedReply,
    ScriptedRequest,
    isolated_plugins,
    npm_program,
    run_scripted,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("docker_sandbox")]

#: The shell command the scripted model has the program run, by the instruction it was given.
SOLUTIONS = {
    "Create a file named `hello.txt`": "echo 'Hello, world!' > hello.txt",
    "`calc.py` in /app has a bug": "sed -i 's/a - b/a + b/' calc.py && python3 test_calc.py",
    "Edit /app/config.json": ("python3 -c \"import json; c = json.load(open('config.json')); "
                              "c.update(port=8080, debug=False); "
                              "json.dump(c, open('config.json', 'w'))\""),
}
WRONG = "sed -i 's/a - b/a * b/' calc.py"
#: mini-swe-agent's way of saying it is done: a command whose output starts with this line.
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
TASKS = {"hello-file": "Create a file named `hello.txt`", "fix-add": "`calc.py` in /app has a bug",
         "json-config": "Edit /app/config.json"}


def plugin(module: str, name: str, package: str) -> tuple[str, ModuleType, str] | None:
    try:
        return name, importlib.import_module(module), package
    except ModuleNotFoundError:
        return None


PROGRAMS = {"claude-code": plugin("interplay_claude_code.plugin", "claude-code",
                                  "interplay-claude-code"),
            "codex": plugin("interplay_codex.plugin", "codex", "interplay-codex"),
            "mini-swe-agent": plugin("interplay_mini_swe_agent.plugin", "mini-swe-agent",
                                     "interplay-mini-swe-agent")}
#: Every harness that takes the seat here; chat is a builtin, the rest plugins.
HARNESSES = [*PROGRAMS, "chat"]


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[None]:
    """The builtins, this plugin and the program harnesses' plugins that are installed."""
    named = [("harbor", interplay_harbor.plugin, "interplay-harbor"),
             *(p for p in PROGRAMS.values() if p is not None)]
    with isolated_plugins(*named):
        yield


def program(harness: str) -> None:
    """Skip, saying why, when the harness's plugin or its program is missing here."""
    if harness != "chat" and PROGRAMS[harness] is None:
        pytest.skip(f"the {harness} harness's plugin is not installed")
    if harness == "claude-code":
        from interplay_claude_code.command_line import CLAUDE_CODE_VERSION, NPM_PACKAGE
        npm_program("claude", NPM_PACKAGE, CLAUDE_CODE_VERSION)
    elif harness == "codex":
        from interplay_codex.command_line import CODEX_VERSION
        npm_program("codex", "@openai/codex", CODEX_VERSION)


def shell(harness: str, command: str) -> ScriptedReply:
    if harness == "claude-code":
        return ScriptedReply.tool_call("Bash", {"command": command, "description": "run it"})
    if harness == "codex":
        return ScriptedReply.tool_call("exec_command", {"cmd": command})
    return ScriptedReply.tool_call("bash", {"command": command})  # mini-swe-agent's, chat's


def done(harness: str) -> ScriptedReply:
    """The model's last word once its command ran: mini-swe-agent's loop ends only on a
    submitting command (a reply without one is a format error it asks again about)."""
    return shell(harness, SUBMIT) if harness == "mini-swe-agent" else ScriptedReply.text("done")


def said(request: ScriptedRequest, role: str) -> list[str]:
    return [json.dumps(m.get("content")) for m in request.messages if m.get("role") == role]


def is_program(request: ScriptedRequest) -> bool:
    """A request of the agent's program (it offers its shell tool), not the user sim's."""
    return "Bash" in json.dumps(request.body.get("tools")) or \
        "exec_command" in json.dumps(request.body.get("tools"))


async def solve(harness: str, task: str, wrong: bool = False,
                **env: Any) -> tuple[Episode, list[ScriptedRequest]]:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        if said(request, "tool"):
            return done(harness)
        text = " ".join(said(request, "user"))
        command = next(c for key, c in SOLUTIONS.items() if key in text)
        return shell(harness, WRONG if wrong else command)

    harbor = load_env("harbor", {"tasks": [task], **env})
    harbor.check()
    [the_task] = list(harbor.tasks())
    run = await run_scripted(harbor, the_task, handler, seats={"assistant": {"harness": harness}})
    return run.episode, run.requests


#: Each harness's own record of where it worked: a program's segment (its loop and its shell)
#: in the container; mini-swe-agent's loop on this machine and its commands in the container;
#: chat's loop in this process and its one bash call in the sandbox, exited 0.
WHERE = {"claude-code": ["sandbox"], "codex": ["sandbox"],
         "mini-swe-agent": [("host", "sandbox")], "chat": [("bash", 0)]}


def where_it_ran(harness: str, info: dict[str, Any]) -> list[Any]:
    if harness == "chat":
        return [(c["tool"], c["exit_code"]) for c in info["sandbox_tools"]]
    segments = info[harness.replace("-", "_")]["segments"]
    if harness == "mini-swe-agent":
        return [(s["where"], s["commands_in"]) for s in segments]
    return [s["where"] for s in segments]


@pytest.mark.parametrize("harness", HARNESSES)
@pytest.mark.parametrize("task", list(TASKS))
async def test_a_program_solves_an_example_task_with_its_own_shell(harness: str,
                                                                   task: str) -> None:
    program(harness)
    ep, _ = await solve(harness, task)
    assert ep.error is None, ep.error
    assert ep.reward == 1.0, ep.results["harbor"]["verifier"]
    trace = ep.trace("assistant")
    assert where_it_ran(harness, trace.info) == WHERE[harness]
    assert trace.tool_runs and all(r.error_type is None for r in trace.tool_runs)
    assert ep.sandbox.changes.files  # its work, seen in the workspace


@pytest.mark.parametrize("harness", HARNESSES)
async def test_a_wrong_fix_scores_0(harness: str) -> None:
    program(harness)
    ep, _ = await solve(harness, "fix-add", wrong=True)
    assert ep.error is None, ep.error
    assert ep.reward == 0.0
    assert "AssertionError" in ep.results["harbor"]["verifier"]["test_output"]


PORT_QUESTION = "Which port must the service listen on?"


def user_sim_handler(asks: bool) -> Any:
    """The scripted model as both sides: the agent asks for the port (when ``asks``) and
    then writes what it was told; the user answers from her scenario (the task's
    [interplay.user] knows) and is done once the file is written."""
    def handler(request: ScriptedRequest) -> ScriptedReply:
        if not is_program(request):  # the user
            system = " ".join(said(request, "system"))
            if "###DONE###" in system and any("wrote" in s for s in said(request, "user")):
                return ScriptedReply.text("###DONE###")
            if any("port" in s and "?" in s for s in said(request, "user")):
                port = re.search(r"port (\d+)", system)
                return ScriptedReply.text(f"It is {port.group(1)}." if port else "No idea.")
            return ScriptedReply.text("Please write the config file for our service.")
        users = " ".join(said(request, "user"))
        known = re.search(r"It is (\d+)", users)
        if said(request, "tool") and request.messages[-1].get("role") == "tool":
            return ScriptedReply.text("I wrote /app/service.conf.")
        if known is None and asks:
            return ScriptedReply.text(PORT_QUESTION)
        port = known.group(1) if known else "8080"
        return shell("claude-code", f"echo 'port = {port}' > /app/service.conf")
    return handler


@pytest.mark.parametrize(("asks", "reward"), [(True, 1.0), (False, 0.0)])
async def test_the_user_knows_what_the_instruction_hides_and_answers_when_asked(
        asks: bool, reward: float) -> None:
    program("claude-code")
    harbor = load_env("harbor", {"tasks": ["service-port"], "user_sim": "llm"})
    harbor.check()
    [task] = list(harbor.tasks())
    assert "8123" not in task.prompt and "8123" in task.info["scenario"]
    run = await run_scripted(harbor, task, user_sim_handler(asks),
                             seats={"assistant": {"harness": "claude-code"}})
    ep = run.episode
    assert ep.error is None, ep.error
    assert ep.reward == reward, ep.results["harbor"]["verifier"]
    agent = [r for r in run.requests if is_program(r)]
    # The agent never sees the instruction, only what she says; the port only once she says it.
    assert not any("listen on (ask me" in json.dumps(r.messages) for r in agent)
    assert "8123" not in json.dumps(agent[0].messages)
    if asks:
        segments = ep.trace("assistant").info["claude_code"]["segments"]
        assert [s["command"] for s in segments] == ["launch", "resume"]
        assert len({s["session_id"] for s in segments}) == 1  # resumed in the same container
        relay = ep.results["relay"]
        assert relay["ended_by"] == "user_done" and "It is 8123." in relay["user_lines"]


def as_user_task(root: Any) -> Any:
    """A task whose agent runs as ``nobody`` ([agent] user) in a folder given to it, and whose
    tests (as the image's root) check who wrote the answer and who they are themselves."""
    task = root / "as-nobody"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text('schema_version = "1.4"\n[agent]\ntimeout_sec = 120.0\n'
                                    'user = "nobody"\n[verifier]\ntimeout_sec = 60.0\n')
    (task / "instruction.md").write_text("Write your user name to `who.txt`.\n")
    (task / "environment" / "Dockerfile").write_text(
        "FROM interplay-base:bookworm\nWORKDIR /app\nRUN chown nobody /app\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\nwho=$(cat /app/who.txt); owner=$(stat -c %U /app/who.txt)\n'
        'echo "agent $who, file $owner, tests $(id -un)"\n'
        'if [ "$who" = nobody ] && [ "$owner" = nobody ] && [ "$(id -un)" = root ]; then\n'
        '  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n')
    return task


@pytest.mark.parametrize("harness", HARNESSES)
async def test_every_harness_works_as_the_tasks_agent_user(harness: str, tmp_path: Any) -> None:
    program(harness)

    def handler(request: ScriptedRequest) -> ScriptedReply:
        return done(harness) if said(request, "tool") else shell(harness, "id -un > who.txt")

    harbor = load_env("harbor", {"path": str(as_user_task(tmp_path))})
    harbor.check()
    [task] = list(harbor.tasks())
    run = await run_scripted(harbor, task, handler, seats={"assistant": {"harness": harness}})
    ep = run.episode
    assert ep.error is None, ep.error
    output = ep.results["harbor"]["verifier"]["test_output"]
    assert "agent nobody, file nobody, tests root" in output
    assert ep.reward == 1.0
