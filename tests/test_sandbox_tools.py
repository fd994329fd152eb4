"""The chat harness's sandbox tools (bash, python, text_editor) on the scripted model, in a real
docker sandbox and on the local backend: the chat harness fixes the workspace env's bug and the
tests verifier gives 1.0, a wrong fix (or a changed test) 0.0; output past the bound is cut and
says so; a command that never ends is stopped with what it started, and recorded as a timeout;
the text editor's commands and its mistakes; the tools offered only to a seat that works in a
sandbox, and as harness_config.sandbox_tools picks them."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from interplay import Episode, Task
from interplay.run import RunResources, run_episode
from interplay.run.loader import load_env
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

FIXED_MEDIAN = ("    if len(ordered) % 2:\n        return ordered[middle]\n"
                "    return (ordered[middle - 1] + ordered[middle]) / 2\n")


def turns(*replies: ScriptedReply | str) -> Callable[[ScriptedRequest], ScriptedReply | str]:
    """A script that answers the n-th model call of the segment with ``replies[n]`` (counted
    from the assistant messages the request carries), and "done" past them."""
    def answer(request: ScriptedRequest) -> ScriptedReply | str:
        n = sum(1 for m in request.messages if m.get("role") == "assistant")
        return replies[n] if n < len(replies) else "done"
    return answer


def call(name: str, **arguments: Any) -> ScriptedReply:
    return ScriptedReply.tool_call(name, arguments)


async def run(script: Callable[[ScriptedRequest], ScriptedReply | str], *, kind: str = "docker",
              task: int = 0, harness_config: Mapping[str, Any] | None = None,
              env: str = "workspace", task_value: Task | None = None,
              ) -> tuple[Episode, list[ScriptedRequest]]:
    loaded = load_env(env, {})
    chosen = task_value or list(loaded.tasks())[task]
    seats = {"assistant": {"harness": "chat",
                           "harness_config": {"max_turns": 12, **(harness_config or {})}}}
    async with ScriptedModel(script) as model:
        resources = RunResources(endpoint=model.endpoint, seats=seats,
                                 sandbox={"kind": kind} if kind else None)
        try:
            episode = await run_episode(loaded, chosen, resources=resources)
        finally:
            await resources.aclose()
        return episode, list(model.requests)


def tool_messages(episode: Episode) -> list[str]:
    return [m.text for m in episode.trace("assistant").messages if m.role == "tool"]


def offered(request: ScriptedRequest) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools") or ()]


# -- fixing the bug in a docker sandbox --------------------------------------------------------


async def test_the_chat_harness_fixes_the_bug_and_the_tests_give_1(docker_sandbox: None) -> None:
    ep, requests = await run(turns(
        call("text_editor", command="view", path="stats.py"),
        call("bash", command="python3 -m unittest 2>&1 | tail -3"),
        call("text_editor", command="str_replace", path="/workspace/stats.py",
             old_str="    return ordered[middle]\n", new_str=FIXED_MEDIAN),
        call("bash", command="python3 -m unittest"),
        "Fixed median for an even count."))
    assert ep.error is None, ep.error
    assert ep.reward == 1.0
    [reward] = ep.rewards
    assert reward.name == "tests" and reward.info["exit_code"] == 0
    assert reward.reason.startswith("tests exit code 0") and "OK" in reward.reason
    assert offered(requests[0]) == ["bash", "python", "text_editor"]
    view, before, edit, after = tool_messages(ep)
    assert "/workspace/stats.py (18 lines)" in view and "return ordered[middle]" in view
    assert "FAILED (failures=2)" in before and "[exit code 0]" not in before
    assert edit.startswith("Edited /workspace/stats.py.")
    assert "OK" in after
    trace = ep.trace("assistant")
    assert [r.name for r in trace.tool_runs] == ["text_editor", "bash", "text_editor", "bash"]
    assert all(r.error_type is None for r in trace.tool_runs)
    assert [c.path for c in ep.sandbox.changes.files] == ["stats.py"]


async def test_a_wrong_fix_scores_0(docker_sandbox: None) -> None:
    ep, _ = await run(turns(
        call("text_editor", command="str_replace", path="stats.py",
             old_str="    return ordered[middle]\n", new_str="    return ordered[middle - 1]\n"),
        "Fixed."))
    assert ep.error is None, ep.error
    assert ep.reward == 0.0
    [reward] = ep.rewards
    assert reward.info["exit_code"] == 1 and "FAILED" in reward.reason


async def test_a_changed_test_does_not_pass_it(docker_sandbox: None) -> None:
    # The agent rewrites the failing test to expect what the bug gives: the tests verifier
    # writes the task's tests back before it runs them.
    ep, _ = await run(turns(
        call("bash", command="sed -i 's/3, 2]), 2.5)/3, 2]), 3)/; s/, 15)/, 20)/' test_stats.py && "
                             "python3 -m unittest 2>&1 | tail -1"),
        "The tests pass now."))
    assert ep.error is None, ep.error
    assert tool_messages(ep) == ["OK\n"]
    assert ep.reward == 0.0


async def test_output_past_the_bound_is_cut_and_says_so(docker_sandbox: None) -> None:
    ep, _ = await run(turns(
        call("bash", command="head -c 200000 /dev/zero | tr '\\0' a; echo; echo THE-END"),
        call("python", code="print('b' * 5000)\nprint('tail')"),
        "ok"), harness_config={"tool_output_bytes": 4096})
    assert ep.error is None, ep.error
    bash, python = tool_messages(ep)
    assert "bytes left out" in bash and bash.rstrip().endswith("THE-END")
    assert len(bash.encode()) < 4096 + 200
    assert "bytes left out" in python and python.rstrip().endswith("tail")
    rows = ep.trace("assistant").info["sandbox_tools"]
    assert [r["tool"] for r in rows] == ["bash", "python"]
    assert rows[0]["cut"] > 190000 and rows[0]["exit_code"] == 0
    assert rows[1]["cut"] > 0


async def test_a_command_that_never_ends_is_stopped_and_recorded(docker_sandbox: None) -> None:
    ep, _ = await run(turns(
        call("bash", command="echo started; (sleep 1000 &); sleep 1000"),
        call("bash", command="for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; "
                             "done | grep -c '[s]leep 1000'"),
        "It hung, so I stopped."), harness_config={"command_timeout_s": 2})
    assert ep.error is None, ep.error
    stopped, left = tool_messages(ep)
    assert stopped.startswith("started\n")
    assert "[stopped: it ran past its 2 s limit, and everything it started was ended]" in stopped
    assert left.strip().splitlines()[0] == "0"  # not even the one it put in the background
    trace = ep.trace("assistant")
    assert [r.error_type for r in trace.tool_runs] == ["timeout", None]
    assert trace.tool_runs[0].duration_s < 20
    assert trace.info["sandbox_tools"][0]["timed_out"] is True
    assert ep.reward == 0.0  # the bug is still there; the episode is scored all the same


# -- the text editor (on the local backend: the same contract, no daemon needed) ----------------


async def test_the_text_editor_commands_and_their_mistakes() -> None:
    ep, _ = await run(turns(
        call("text_editor", command="create", path="notes/todo.txt", file_text="one\ntwo\n"),
        call("text_editor", command="create", path="notes/todo.txt", file_text="again"),
        call("text_editor", command="insert", path="notes/todo.txt", insert_line=1,
             new_str="one and a half"),
        call("text_editor", command="view", path="notes/todo.txt", view_range=[2, -1]),
        call("text_editor", command="str_replace", path="notes/todo.txt", old_str="o",
             new_str="0"),
        call("text_editor", command="str_replace", path="notes/todo.txt", old_str="absent",
             new_str="x"),
        call("text_editor", command="undo_edit", path="notes/todo.txt"),
        call("bash", command="cat notes/todo.txt"),
        call("text_editor", command="undo_edit", path="notes/todo.txt"),
        call("bash", command="ls notes | wc -l"),
        call("text_editor", command="view", path="."),
        call("text_editor", command="view", path="missing.py"),
        call("text_editor", command="str_replace", path="stats.py"),
        "done"), kind="local", harness_config={"max_turns": 20})
    assert ep.error is None, ep.error
    out = tool_messages(ep)
    workdir = ep.sandbox.workdir
    assert out[0] == f"Created {workdir}/notes/todo.txt (2 lines)."
    assert out[1].startswith("error: ") and "exists already" in out[1]
    assert out[2].startswith(f"Edited {workdir}/notes/todo.txt.")
    assert out[3] == (f"{workdir}/notes/todo.txt, lines 2-3 of 3:\n"
                      "     2\tone and a half\n     3\ttwo")
    assert "occurs 3 times" in out[4] and "nothing was replaced" in out[4]
    assert "does not occur" in out[5]
    assert out[6].startswith(f"Undid the last edit of {workdir}/notes/todo.txt.")
    assert out[7] == "one\ntwo\n"
    assert "it is removed" in out[8]
    assert out[9].strip() == "0"
    assert "stats.py" in out[10] and "test_stats.py" in out[10] and ".git" not in out[10]
    assert "does not exist" in out[11]
    assert "`str_replace` needs `old_str`" in out[12]
    errors = [r.error_type for r in ep.trace("assistant").tool_runs]
    assert errors == [None, "tool_error", None, None, "tool_error", "tool_error", None, None,
                      None, None, None, "tool_error", "tool_error"]


async def test_a_bad_call_is_answered_as_an_env_tool_call_is() -> None:
    ep, _ = await run(turns(
        ScriptedReply.tool_call("bash", '{"command": '),
        call("text_editor", command="paint", path="x"),
        call("bash", cmd="ls"),
        "done"), kind="local")
    assert ep.error is None, ep.error
    not_json, bad_command, wrong_field = tool_messages(ep)
    assert not_json.startswith("error: the arguments are not a JSON object")
    assert bad_command.startswith("error: argument 'command'")
    assert wrong_field.startswith("error: ") and "command" in wrong_field
    assert [r.error_type for r in ep.trace("assistant").tool_runs] == ["bad_arguments"] * 3


async def test_the_editor_keeps_a_file_s_mode() -> None:
    ep, _ = await run(turns(
        call("bash", command="printf '#!/bin/sh\\necho one\\n' > run.sh && chmod 755 run.sh"),
        call("text_editor", command="str_replace", path="run.sh", old_str="one",
             new_str="two"),
        call("bash", command="./run.sh && stat -c %a run.sh"),
        "done"), kind="local")
    assert tool_messages(ep)[2] == "two\n755\n"


# -- when they are offered -----------------------------------------------------------------------


async def test_offered_as_sandbox_tools_picks_them_and_never_without_a_sandbox() -> None:
    _, requests = await run(turns("done"), kind="local",
                            harness_config={"sandbox_tools": ["bash"]})
    assert offered(requests[0]) == ["bash"]
    _, requests = await run(turns("done"), kind="local", harness_config={"sandbox_tools": []})
    assert offered(requests[0]) == []
    # A seat that works in no sandbox (an env that needs none, a task without a workspace).
    _, requests = await run(turns("done"), kind="", env="echo",
                            task_value=Task(0, "Say hi."))
    assert offered(requests[0]) == []


def test_a_sandbox_tool_the_model_calls_is_described_for_it() -> None:
    from interplay.builtin_harnesses.sandbox_tools import Limits, SandboxTools

    class Box:
        workdir = "/workspace"

    tools = SandboxTools(Box(), ["bash", "python", "text_editor"],  # type: ignore[arg-type]
                         Limits(timeout_s=45, output_bytes=2048), {}).tools
    assert "45 s" in tools["bash"].description and "2048 bytes" in tools["bash"].description
    assert "/workspace" in tools["text_editor"].description
    spec = tools["text_editor"].spec()["function"]["parameters"]
    assert spec["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert",
                                                     "undo_edit"]
    assert spec["required"] == ["command", "path"]
    json.dumps([t.spec() for t in tools.values()])


@pytest.mark.parametrize("names", [["bash", "bash"], ["python", "bash"]])
async def test_names_are_offered_once_in_the_order_given(names: Sequence[str]) -> None:
    _, requests = await run(turns("done"), kind="local",
                            harness_config={"sandbox_tools": list(names)})
    assert offered(requests[0]) == list(dict.fromkeys(names))


async def test_insert_takes_anthropic_s_insert_text_too() -> None:
    ep, _ = await run(turns(
        call("text_editor", command="insert", path="stats.py", insert_line=0,
             insert_text="# first line"),
        call("bash", command="head -2 stats.py"),
        "done"), kind="local")
    assert tool_messages(ep)[1] == '# first line\n"""Summary statistics of a list of numbers."""\n'


async def test_an_env_tool_named_as_a_sandbox_tool_is_one_line() -> None:
    from interplay import Env, SeatSpec, Step, Workspace, tool
    from interplay.builtin_envs.steps import OneShot

    @tool
    def bash(command: str) -> str:
        """The env's own shell."""
        return command

    class Clashing(Env):
        name = "clashing"
        needs_sandbox = True
        seats = {"assistant": SeatSpec(harness="chat")}

        def tasks(self) -> list[Task]:
            return [Task(0, "work", workspace=Workspace(files={"a": "1"}))]

        def steps(self) -> list[Step]:
            return [OneShot()]

        def tools(self, seat: str, ctx: Any) -> list[Any]:
            return [bash]

    env = Clashing()
    async with ScriptedModel(["done"]) as model:
        resources = RunResources(endpoint=model.endpoint, sandbox={"kind": "local"})
        try:
            ep = await run_episode(env, env.tasks()[0], resources=resources)
        finally:
            await resources.aclose()
    assert ep.error is not None and "\n" not in ep.error
    assert "a tool named 'bash', the name of a sandbox tool" in ep.error
    assert "harness_config.sandbox_tools = ['python', 'text_editor']" in ep.error
