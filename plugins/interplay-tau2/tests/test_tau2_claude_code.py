"""Claude Code in the agent's seat on tau2's retail domain: the real Claude Code CLI, on the
scripted model playing a task's expected actions, calls tau2's tools through the run's tool
gateway (MCP); tau2's evaluator scores the trajectory 1.0, and 0 when one call is wrong."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from interplay.run import whole_record
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, run_interplay
from interplay_tau2 import scripted

pytestmark = pytest.mark.slow

PREFIX = "mcp__interplay__"
#: Retail task 4: thirteen tool calls in a row, two of them writes.
TASK = "4"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """tau2's tasks are read here too (the expected actions): offline, as its runner is."""
    for key, value in scripted.OFFLINE_ENVIRON.items():
        monkeypatch.setenv(key, value)


def claude_bin() -> str:
    found = shutil.which("claude", path=str(Path(sys.executable).parent)) or \
        shutil.which("claude")
    if found is None:
        pytest.skip("the Claude Code CLI is not installed (bash .ci/setup --test installs it)")
    return found


def told_as_tau2_tells_it(request: ScriptedRequest) -> ScriptedRequest:
    """``request`` with its first user message as tau2's runner sends it. The agent's first
    segment opens on tau2's greeting and the user's first message; a program that takes one
    prompt (Claude Code, codex) gets them as one labelled transcript, whose last part is the
    user's message the script book reads its tag from."""
    messages = [dict(m) for m in request.messages]
    for m in messages:
        text = m.get("content")
        if m["role"] == "user" and isinstance(text, str) and text.startswith("[assistant]\n"):
            m["content"] = text.rsplit("[user]\n", 1)[1]
    return attrs.evolve(request, body={**request.body, "messages": messages})


def as_claude_code_names(book: scripted.ScriptBook, *, wrong: bool = False) -> Any:
    """The script book's replies with each tool named as Claude Code offers it
    (``mcp__interplay__<tool>``); ``wrong`` spoils the task's last call (its first argument
    a value the database does not hold)."""
    last = max(len(t) for s in book.scripts.values() for t in s.agent) - 2

    def handle(request: ScriptedRequest) -> ScriptedReply:
        reply = book(told_as_tau2_tells_it(request))
        if not reply.tool_calls:
            return reply
        step = sum(1 for m in request.messages if m["role"] == "assistant")
        called = []
        for call in reply.tool_calls:
            arguments = dict(call.arguments) if isinstance(call.arguments, dict) else {}
            if wrong and step >= last:
                key = next(iter(arguments))
                arguments[key] = f"{arguments[key]}-not-in-the-database"
            called.append(attrs.evolve(call, name=PREFIX + call.name, arguments=arguments))
        return attrs.evolve(reply, tool_calls=tuple(called))

    return handle


def run_task(tmp_path: Path, *, wrong: bool) -> dict[str, Any]:
    book, _ = scripted.script_book("retail", {TASK: "complete"})
    out_dir = tmp_path / "run"
    with ScriptedModel(as_claude_code_names(book, wrong=wrong)) as model:
        out = run_interplay("eval", "tau2-retail", "--set", f'env.task_ids=["{TASK}"]',
                            "--base-url", model.base_url, "-o", str(out_dir), "--no-report",
                            "--set", 'seats.assistant.harness="claude-code"',
                            "--set", "seats.assistant.harness_config.state_dir="
                                     f"{json.dumps(str(tmp_path))}", timeout=600)
    assert out.returncode == 0, out.stderr
    assert book.misses == 0
    (line,) = (out_dir / "episodes.jsonl").read_text().splitlines()
    episode: dict[str, Any] = whole_record(json.loads(line), out_dir)
    assert episode["error"] is None, episode["error"]
    return episode


def test_claude_code_plays_a_retail_task_and_tau2_scores_it(tmp_path: Path) -> None:
    claude_bin()
    episode = run_task(tmp_path, wrong=False)
    record = episode["results"]["tau2"]
    assert record["termination_reason"] == "user_stop"
    calls = [c for m in record["messages"] for c in m.get("tool_calls") or ()]
    # tau2's record names each tool as tau2 does (the MCP prefix taken off); all thirteen ran
    # in one segment of Claude Code's, no cap between them.
    task = scripted.load_tasks("retail", [TASK])[0]
    expected = [(a.name, dict(a.arguments)) for a in task.evaluation_criteria.actions]
    assert [(c["name"], c["arguments"]) for c in calls] == expected
    assert episode["reward"] == 1.0
    assert {r["name"]: r["value"] for r in episode["rewards"]}["tau2_db"] == 1.0
    trace = next(t for t in episode["traces"] if t["seat"] == "assistant")
    assert trace["harness"] == "claude-code"
    assert [r["name"] for r in trace["tool_runs"]] == [name for name, _ in expected]
    assert all(r["error_type"] is None for r in trace["tool_runs"])


def test_the_same_task_with_one_wrong_call_scores_0(tmp_path: Path) -> None:
    claude_bin()
    episode = run_task(tmp_path, wrong=True)
    assert episode["reward"] == 0.0
    assert {r["name"]: r["value"] for r in episode["rewards"]}["tau2_db"] == 0.0
    # tau2's environment refused the spoiled call (the last), as its record says.
    messages = episode["results"]["tau2"]["messages"]
    calls = [c for m in messages for c in m.get("tool_calls") or ()]
    answers = [m for m in messages if m["role"] == "tool"]
    assert len(calls) == len(answers) == 13
    assert "-not-in-the-database" in json.dumps(calls[-1]["arguments"])
    assert answers[-1]["error"] is True and answers[-1]["content"] == "Error: Order not found"
