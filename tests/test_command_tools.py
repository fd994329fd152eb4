"""An agent program of one's own with the env's tools: the thirty-line agent of docs/plugins.md
(the `mcp` client and the `openai` SDK) run by the `command` harness on `user-sim-tools`, from
the `interplay` command and side by side with `chat` on the same scripted model; a program that
never connects; and a run killed outright with such a program in it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest

from interplay.plugins import host as plugins
from interplay.run.episode import RunResources, run_episode
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    descendants,
    interplay_command,
    run_interplay,
    run_scripted,
    survivors,
)
from interplay.values.records import Episode

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"

USER = ["Hi, please cancel my order #1042, I ordered it by mistake.", "Yes, go ahead.",
        "###DONE###"]
ASSISTANT = [
    ScriptedReply.tool_call("find_order", {"order_id": "1042"}),
    "I found order #1042, still pending. Shall I cancel it as ordered by mistake?",
    ScriptedReply.calls([("cancel_order", {"order_id": "#1042", "reason": "just because"}),
                         ("cancel_order", {"order_id": "#1042",
                                           "reason": "ordered by mistake"})]),
    "Done: order #1042 is cancelled.",
]


class Shop:
    """The scripted model of one user-sim-tools conversation: the user's lines and the
    assistant's (whose requests offer tools), each in order."""

    def __init__(self) -> None:
        self.queues: dict[str, list[str | ScriptedReply]] = {"user": list(USER),
                                                             "assistant": list(ASSISTANT)}

    def __call__(self, request: ScriptedRequest) -> str | ScriptedReply:
        side = "assistant" if request.body.get("tools") else "user"
        assert self.queues[side], f"the {side} script ran out"
        return self.queues[side].pop(0)


@pytest.fixture(scope="module")
def docs_agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example agent of docs/plugins.md, as a file."""
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
                if "INTERPLAY_MCP_TOKEN" in b]
    path = tmp_path_factory.mktemp("agent") / "my_agent.py"
    path.write_text(block)
    return path


def command_seat(argv: list[str]) -> dict[str, Any]:
    return {"harness": "command",
            "harness_config": {"argv": argv, "prompt_format": "messages"}}


def check_cancelled(episode: Episode) -> None:
    assert episode.error is None, episode.error
    assert episode.reward == 1.0
    orders = episode.results["world"]["orders"]
    assert orders["1042"]["status"] == "cancelled"
    assert orders["1042"]["cancel_reason"] == "ordered by mistake"


def test_the_docs_agent_works_the_shop_from_the_interplay_command(docs_agent: Path,
                                                                  tmp_path: Path) -> None:
    shop = Shop()
    seat = json.dumps(["{python}", str(docs_agent)])  # as the docs write it
    with ScriptedModel(shop) as model:
        out = run_interplay(
            "--log-level", "info",
            "eval", "user-sim-tools", "-n", "1", "--base-url", model.base_url,
            "-o", str(tmp_path / "run"), "--no-report",
            "--set", 'seats.assistant.harness="command"',
            "--set", f'seats.assistant.harness_config={{argv = {seat}, '
                     f'prompt_format = "messages"}}')
    assert out.returncode == 0, out.stderr
    # As the docs say: at --log-level info each server's start names its port on 127.0.0.1.
    for server in ("interception", "gateway"):
        assert re.search(rf"{server}\.started\b.*\bport=\d+", out.stderr), out.stderr
    assert shop.queues == {"user": [], "assistant": []}
    (line,) = (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()
    episode = json.loads(line)
    assert episode["error"] is None and episode["reward"] == 1.0
    assistant = next(t for t in episode["traces"] if t["agent"] == "assistant")
    runs = [(r["name"], r["error_type"]) for r in assistant["tool_runs"]]
    assert runs == [("find_order", None), ("cancel_order", "tool_error"),
                    ("cancel_order", None)]
    # The program sent the model's call ids along (_meta.callId): each run is paired with
    # the call the model made.
    made = [c["id"] for call in assistant["model_calls"]
            for c in call["response"]["choices"][0]["message"].get("tool_calls") or ()]
    assert [r["call_id"] for r in assistant["tool_runs"]] == made
    assert [r["exit_code"] for r in assistant["info"]["command_runs"]] == [0, 0]


async def test_a_command_agent_and_chat_leave_the_same_records(docs_agent: Path) -> None:
    env = plugins.get("envs", "user-sim-tools")()
    task = next(iter(env.tasks()))
    chat = await run_scripted(env, task, Shop(), seed=1)
    program = await run_scripted(env, task, Shop(), seed=1, seats={
        "assistant": command_seat([sys.executable, str(docs_agent)])})
    check_cancelled(chat.episode)
    check_cancelled(program.episode)
    assert program.episode.results["world"] == chat.episode.results["world"]
    assert program.episode.results["relay"] == chat.episode.results["relay"]
    ours, theirs = chat.episode.trace("assistant"), program.episode.trace("assistant")
    assert [(r.call_id, r.name, r.error_type) for r in theirs.tool_runs] == [
        (r.call_id, r.name, r.error_type) for r in ours.tool_runs]
    # The tool results the model read, word for word: on the chat trace as tool messages, in
    # the program's last request of each turn as the tool messages it sent.
    read_in_chat = [m.text for m in ours.messages if m.role == "tool"]
    sent = [m["content"] for c in theirs.model_calls for m in c.request["messages"]
            if m["role"] == "tool"]
    assert read_in_chat and all(text in sent for text in read_in_chat)
    assert "error: ValueError: reason must be one of" in read_in_chat[1]


IGNORES_TOOLS = """
import json, os, sys
json.load(sys.stdin)
print(json.dumps({k: os.environ.get(k) is not None
                  for k in ("INTERPLAY_MCP_URL", "INTERPLAY_MCP_TOKEN")}))
"""


async def test_a_program_that_never_connects_is_not_an_error(tmp_path: Path) -> None:
    script = tmp_path / "silent.py"
    script.write_text(IGNORES_TOOLS)
    env = plugins.get("envs", "user-sim-tools")()
    task = next(iter(env.tasks()))
    run = await run_scripted(env, task, ["Cancel order #1042, please.", "###DONE###"], seed=1,
                             seats={"assistant": command_seat([sys.executable, str(script)])})
    episode = run.episode
    assert episode.error is None, episode.error
    assert episode.reward == 0.0  # nothing was cancelled: scored, not failed
    trace = episode.trace("assistant")
    assert json.loads(trace.messages[-1].text) == {"INTERPLAY_MCP_URL": True,
                                                   "INTERPLAY_MCP_TOKEN": True}
    assert trace.tool_runs == []


async def test_a_seat_without_tools_gets_no_gateway_variables(tmp_path: Path,
                                                              monkeypatch: Any) -> None:
    script = tmp_path / "silent.py"
    script.write_text(IGNORES_TOOLS)
    # Another run's, inherited: never passed on to a program that has no tools.
    monkeypatch.setenv("INTERPLAY_MCP_URL", "http://127.0.0.1:9/mcp")
    monkeypatch.setenv("INTERPLAY_MCP_TOKEN", "stale")
    env = plugins.get("envs", "echo")()
    run = await run_scripted(env, next(iter(env.tasks())), [], seed=1, seats={
        "assistant": command_seat([sys.executable, str(script)])})
    reply = run.episode.trace("assistant").messages[-1].text
    assert json.loads(reply) == {"INTERPLAY_MCP_URL": False, "INTERPLAY_MCP_TOKEN": False}


KEEPS_ITS_TOKEN = """
import json, os, sys
json.load(sys.stdin)
with open(sys.argv[1], "w") as f:
    json.dump([os.environ["INTERPLAY_MCP_URL"], os.environ["INTERPLAY_MCP_TOKEN"]], f)
print("noted")
"""


async def test_a_token_is_refused_once_its_episode_ended(tmp_path: Path) -> None:
    """The run's gateway still serves (another episode could be running), but the token of
    an episode that ended reaches nothing and is recorded nowhere."""
    script, kept = tmp_path / "keeps.py", tmp_path / "token.json"
    script.write_text(KEEPS_ITS_TOKEN)
    env = plugins.get("envs", "user-sim-tools")()
    task = next(iter(env.tasks()))
    async with ScriptedModel(["Cancel order #1042, please.", "###DONE###"]) as model:
        resources = RunResources(endpoint=model.endpoint, seats={
            "assistant": command_seat([sys.executable, str(script), str(kept)])})
        try:
            episode = await run_episode(env, task, resources=resources, seed=1)
            assert episode.error is None, episode.error
            url, token = json.loads(kept.read_text())
            async with httpx2.AsyncClient() as http:
                answer = await http.post(url, json={
                    "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "cancel_order",
                               "arguments": {"order_id": "1042", "reason": "no longer needed"}}},
                    headers={"Authorization": f"Bearer {token}",
                             "Accept": "application/json, text/event-stream"})
            assert answer.status_code == 401
        finally:
            await resources.aclose()
    assert episode.results["world"]["orders"]["1042"]["status"] == "pending"
    assert episode.trace("assistant").tool_runs == []


CONNECTS_AND_WAITS = """
import asyncio, json, os, sys, time
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    auth = {"Authorization": "Bearer " + os.environ["INTERPLAY_MCP_TOKEN"]}
    async with (httpx2.AsyncClient(headers=auth) as http,
                streamable_http_client(os.environ["INTERPLAY_MCP_URL"], http_client=http)
                as (read, write, *_), ClientSession(read, write) as tools):
        await tools.initialize()
        await tools.call_tool("find_order", {"order_id": "1042"})
        with open(sys.argv[1], "w") as f:
            f.write(os.environ["INTERPLAY_MCP_URL"])
        await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_killed_run_leaves_neither_the_program_nor_the_gateway(tmp_path: Path) -> None:
    """`interplay eval` killed (SIGKILL) while its agent program holds an MCP session: the
    program is gone within seconds and the gateway's port takes no more connections."""
    script = tmp_path / "waits.py"
    script.write_text(CONNECTS_AND_WAITS)
    marker = tmp_path / "connected"
    seat = json.dumps([sys.executable, str(script), str(marker)])
    with ScriptedModel(["Cancel order #1042, please."]) as model:
        proc = subprocess.Popen(
            [*interplay_command(), "eval", "user-sim-tools", "-n", "1",
             "--base-url", model.base_url, "-o", str(tmp_path / "run"), "--no-report", "-q",
             "--set", 'seats.assistant.harness="command"',
             "--set", f'seats.assistant.harness_config={{argv = {seat}, '
                      f'prompt_format = "messages"}}'],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("INTERPLAY_")})
        try:
            deadline = time.monotonic() + 120  # a failure bound, not a speed check
            while not marker.exists() or not marker.read_text():
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "the program never reached its tools"
                time.sleep(0.05)
            tree = descendants(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert tree  # the program and the reaper
    assert survivors(tree) == set()
    where = urlsplit(marker.read_text())
    with pytest.raises(OSError):
        socket.create_connection((where.hostname, where.port), timeout=5).close()
