"""Claude Code inside the episode's docker sandbox: the real CLI brought in read-only, its own
Bash tool on the task's workspace, its model through the interception server over the
sandbox's `model` network, scored by a test run in the sandbox; what it can reach, what its
commands see of the trace's secret, and a call one of them forges with it."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from interplay import EpisodeContext, Step
from interplay.run import RunResources, run_episode
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    calc_fix_env,
    run_sandboxed,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("docker_sandbox", "claude_bin")]

Fix = calc_fix_env("claude-code")


def bash(command: str) -> ScriptedReply:
    return ScriptedReply.tool_call("Bash", {"command": command, "description": "run it"})


def outputs(request: ScriptedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


async def episode(handler: Any, **sandbox: Any) -> Any:
    return await run_sandboxed(Fix(), handler, **sandbox)


@pytest.mark.parametrize(("fix", "reward"), [("a + b", 1.0), ("a * b", 0.0)])
async def test_claude_code_fixes_the_bug_with_its_own_bash_and_the_tests_score_it(
        fix: str, reward: float) -> None:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        if outputs(request):
            return ScriptedReply.text("fixed")
        return bash(f"sed -i 's/a - b/{fix}/' calc.py && cat calc.py")

    ep = await episode(handler)
    assert ep.error is None, ep.error
    assert ep.reward == reward
    trace = ep.trace("assistant")
    [segment] = trace.info["claude_code"]["segments"]
    assert segment["where"] == "sandbox" and segment["exit_code"] == 0
    assert [(r.name, r.error_type) for r in trace.tool_runs] == [("Bash", None)]
    assert any(fix in m.text for m in trace.messages if m.role == "tool")
    changed = {c.path: c.status for c in ep.sandbox.changes.files}
    assert changed["calc.py"] == "modified"
    assert f"+    return {fix}" in ep.sandbox.changes.diff
    assert {c.caller for c in trace.model_calls} == {"program"}


async def test_what_it_writes_outside_stays_inside_and_this_machines_files_stay_out(
        tmp_path: Path) -> None:
    secret_file = tmp_path / "host-secret.txt"
    secret_file.write_text("only on the host")
    outside = Path(f"/tmp/interplay-outside-{uuid.uuid4().hex}")
    command = (f"echo escaped > {outside}; cat {secret_file} 2>&1; echo read=$?; "
               f"ls {tmp_path} 2>&1; env; echo KEY:; cat /var/lib/interplay/*/key")

    def handler(request: ScriptedRequest) -> ScriptedReply:
        return ScriptedReply.text("done") if outputs(request) else bash(command)

    ep = await episode(handler)
    assert ep.error is None, ep.error
    out = next(m.text for m in ep.trace("assistant").messages if m.role == "tool")
    assert not await asyncio.to_thread(outside.exists)  # written inside the container
    assert "only on the host" not in out and "read=1" in out
    # Its commands' environment holds neither the trace's secret (the key file Claude Code
    # reads it from does) nor the gateway's token.
    environment, _, key = out.partition("KEY:")
    assert len(key.strip()) > 20 and key.strip() not in environment
    assert "ANTHROPIC_API_KEY" not in environment and "INTERPLAY_MCP_TOKEN" not in environment


async def test_a_call_its_command_forges_with_the_secret_is_recorded_as_anothers() -> None:
    # The command finds the key where Claude Code keeps it and calls the interception server
    # with it, posing as the agent.
    forge = ("python3 - <<'PY'\n"
             "import glob, json, os, urllib.request\n"
             "key = open(glob.glob('/var/lib/interplay/*/key')[0]).read().strip()\n"
             "url = os.environ['ANTHROPIC_BASE_URL'] + '/v1/chat/completions'\n"
             "body = json.dumps({'model': 'm', 'messages': [{'role': 'user',\n"
             "                   'content': 'forged'}]}).encode()\n"
             "req = urllib.request.Request(url, data=body, headers={\n"
             "    'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'})\n"
             "print('forged', urllib.request.urlopen(req).status)\n"
             "PY")

    def handler(request: ScriptedRequest) -> ScriptedReply:
        if any("forged" == str(m.get("content")) for m in request.messages):
            return ScriptedReply.text("a forged answer")
        return ScriptedReply.text("mine") if outputs(request) else bash(forge)

    ep = await episode(handler)
    assert ep.error is None, ep.error
    trace = ep.trace("assistant")
    assert [c.caller for c in trace.model_calls] == ["program", "other", "program"]
    assert "forged 200" in next(m.text for m in trace.messages if m.role == "tool")
    # The segment's conversation is the program's own, not the forged call's.
    assert trace.messages[-1].text == "mine"


async def test_a_second_turn_resumes_its_session_in_the_same_container() -> None:
    class Chat(Step):
        name = "chat"

        async def run(self, ctx: EpisodeContext) -> None:
            async with ctx.agent("assistant").chat(ctx.task) as session:
                await session.turn()
                await session.turn("And now show me the file.")

    class TwoTurns(Fix):
        def steps(self) -> list[Step]:
            return [Chat()]

    def handler(request: ScriptedRequest) -> ScriptedReply:
        said = [str(m.get("content")) for m in request.messages if m.get("role") == "user"]
        if len(outputs(request)) == 0 and not any("show me" in s for s in said):
            return bash("sed -i 's/a - b/a + b/' calc.py")
        if any("show me" in s for s in said) and len(outputs(request)) < 2:
            return bash("cat calc.py")
        return ScriptedReply.text("here it is")

    env = TwoTurns()
    with ScriptedModel(handler) as model:
        resources = RunResources(endpoint=model.endpoint, sandbox={"kind": "docker"})
        try:
            ep = await run_episode(env, env.tasks()[0], resources=resources)
        finally:
            await resources.aclose()
        second = next(r for r in model.requests
                      if any("show me" in str(m.get("content")) for m in r.messages))
    assert ep.error is None, ep.error
    segments = ep.trace("assistant").info["claude_code"]["segments"]
    assert [s["command"] for s in segments] == ["launch", "resume"]
    assert len({s["session_id"] for s in segments}) == 1
    # The resumed session holds the first turn (Claude Code's own history, in the sandbox).
    assert "sed -i 's/a - b/a + b/' calc.py" in json.dumps(second.messages)
    assert ep.reward == 1.0
