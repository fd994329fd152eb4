"""The builtin ``workspace`` env: five repository tasks, each failing its tests as given and
scored 1.0 once done right (the chat harness's python tool applies the reference fix on the
scripted model, in a real docker sandbox); a program harness in the seat works it as well (the
``command`` harness, run inside the sandbox); the run says in one line, when it starts, what to
install or set when it can have no sandbox, and never falls back to ``local``; and one episode
runs on the embedded model end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from interplay import Episode
from interplay.builtin_envs.workspace import builtin_tasks
from interplay.run import RunResources, run_episode
from interplay.run.loader import load_env
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    needs_local_model,
    run_interplay,
)

#: Each task's reference fix: (file, old text, new text), applied by a Python program.
FIXES: dict[str, list[tuple[str, str, str]]] = {
    "fix-median": [("stats.py", "    return ordered[middle]\n",
                    "    if len(ordered) % 2:\n        return ordered[middle]\n"
                    "    return (ordered[middle - 1] + ordered[middle]) / 2\n")],
    "add-slugify": [("text.py", "    return \" \".join(w.capitalize() for w in words(text))\n",
                     "    return \" \".join(w.capitalize() for w in words(text))\n\n\n"
                     "def slugify(title):\n"
                     "    return \"-\".join(w.lower() for w in words(title))\n")],
    "finish-todo-cli": [("todo.py", "    print(\"todo: 'done' is not implemented yet\", "
                                    "file=sys.stderr)\n    return 2\n",
                         "    items = load(path)\n    if not 1 <= number <= len(items):\n"
                         "        print(f\"todo: no item {number}\", file=sys.stderr)\n"
                         "        return 1\n    items[number - 1][\"done\"] = True\n"
                         "    save(path, items)\n    return 0\n")],
    "fix-settings-parser": [("settings.py", "        if not line or line.startswith(\"#\"):\n",
                             "        line = line.strip()\n"
                             "        if not line or line.startswith((\"#\", \";\")):\n"),
                            ("settings.py", "line.split(\"=\")", "line.split(\"=\", 1)")],
    "roman-subtractive": [("roman.py", "VALUES = [(1000, \"M\"), (500, \"D\"), (100, \"C\"), "
                                       "(50, \"L\"), (10, \"X\"), (5, \"V\"), (1, \"I\")]",
                           "VALUES = [(1000, \"M\"), (900, \"CM\"), (500, \"D\"), (400, \"CD\"),"
                           " (100, \"C\"), (90, \"XC\"), (50, \"L\"), (40, \"XL\"), (10, \"X\"),"
                           " (9, \"IX\"), (5, \"V\"), (4, \"IV\"), (1, \"I\")]"),
                          ("roman.py", "    out = []\n",
                           "    if not 1 <= number <= 3999:\n        raise ValueError(number)\n"
                           "    out = []\n")],
}


def fix_program(name: str) -> str:
    """A Python program that applies task ``name``'s reference fix in the workspace."""
    lines = ["import pathlib"]
    for file, old, new in FIXES[name]:
        lines += [f"p = pathlib.Path({file!r})", "s = p.read_text()",
                  f"assert s.count({old!r}) == 1, {file!r}",
                  f"p.write_text(s.replace({old!r}, {new!r}))"]
    lines.append("print('applied')")
    return "\n".join(lines)


async def episode(task_idx: int, script: Any, **seat: Any) -> Episode:
    env = load_env("workspace", {})
    task = builtin_tasks()[task_idx]
    async with ScriptedModel(script) as model:
        resources = RunResources(endpoint=model.endpoint, seats={"assistant": seat})
        try:
            return await run_episode(env, task, resources=resources)
        finally:
            await resources.aclose()


def test_the_tasks() -> None:
    tasks = builtin_tasks()
    assert [t.info["name"] for t in tasks] == list(FIXES)
    assert [t.idx for t in tasks] == [0, 1, 2, 3, 4]
    for task in tasks:
        assert task.workspace is not None and task.system_prompt
        tests = task.info["tests"]
        assert tests["command"] == "python3 -m unittest -v"
        assert tests["files"] and set(tests["files"]) <= set(task.workspace.files)
    env = load_env("workspace", {})
    env.check()
    assert env.needs_sandbox and [v.name for v in env.verifiers()] == ["tests"]


@pytest.mark.slow
@pytest.mark.parametrize("idx", range(5), ids=list(FIXES))
async def test_each_task_fails_as_given_and_passes_once_fixed(idx: int,
                                                              docker_sandbox: None) -> None:
    untouched = await episode(idx, ["I will leave it."])
    assert untouched.error is None, untouched.error
    assert untouched.reward == 0.0
    assert "FAILED" in untouched.rewards[0].reason
    name = builtin_tasks()[idx].info["name"]

    def fixer(request: ScriptedRequest) -> ScriptedReply | str:
        if any(m.get("role") == "tool" for m in request.messages):
            return "Done."
        return ScriptedReply.tool_call("python", {"code": fix_program(name)})

    fixed = await episode(idx, fixer)
    assert fixed.error is None, fixed.error
    assert [m.text for m in fixed.trace("assistant").messages if m.role == "tool"] == \
        ["applied\n"]
    assert fixed.reward == 1.0, fixed.rewards[0].reason
    changed = [c.path for c in fixed.sandbox.changes.files]
    assert changed == [FIXES[name][0][0]]


AGENT = r'''
import pathlib, sys
program = pathlib.Path(sys.argv[1]).read_text()
exec(compile(program, "fix", "exec"))
'''


async def test_a_program_harness_in_the_seat_works_the_task(tmp_path: Path,
                                                            docker_sandbox: None) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "fix.py").write_text(fix_program("fix-median"))
    ep = await episode(0, ["unused"], harness="command", harness_config={
        "argv": ["{python}", "{bring}/agent.py", "{bring}/fix.py"],
        "bring": [str(tmp_path / "agent.py"), str(tmp_path / "fix.py")]})
    assert ep.error is None, ep.error
    assert ep.trace("assistant").info["command_runs"][0]["where"] == "sandbox"
    assert ep.reward == 1.0


# -- no sandbox: one line when the run starts -----------------------------------------------------


def test_no_daemon_is_one_line_at_start_and_never_local(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_interplay("eval", "workspace", "-n", "1", "--base-url", "http://127.0.0.1:9/v1",
                         "-o", str(out), "-q",
                         env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"})
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert "cannot reach the Docker daemon" in lines[0]
    assert "install docker.io" in lines[0] and "sandbox.kind = \"local\"" in lines[0]
    assert not (out / "episodes.jsonl").exists()


def test_no_sandbox_is_one_line_at_start(tmp_path: Path) -> None:
    done = run_interplay("eval", "workspace", "-n", "1", "--sandbox", "none", "--base-url",
                         "http://127.0.0.1:9/v1", "-o", str(tmp_path / "run"), "-q")
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert "env 'workspace' needs a sandbox" in lines[0] and "--sandbox docker" in lines[0]


# -- the embedded model ----------------------------------------------------------------------------


@pytest.mark.slow
@needs_local_model[0]
@needs_local_model[1]
def test_an_episode_on_the_embedded_model(tmp_path: Path, docker_sandbox: None) -> None:
    out = tmp_path / "run"
    done = run_interplay("eval", "workspace", "-n", "1", "-o", str(out), "-q", "--no-report",
                         "--set", "seats.assistant.harness_config.max_turns=4",
                         "--set", "seats.assistant.sampling.max_tokens=256", timeout=900)
    assert done.returncode == 0, done.stderr
    [line] = (out / "episodes.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["error_type"] is None, record["error"]
    assert record["reward"] in (0.0, 1.0)
    assert record["rewards"][0]["name"] == "tests"

