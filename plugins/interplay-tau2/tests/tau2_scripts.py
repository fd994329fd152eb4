"""Scripted seats for the tau2 tests: one request function plays both seats (the user seat's
system prompt holds tau2's <scenario>, the agent's its <policy>)."""

from __future__ import annotations

import json
from typing import Any

from interplay.testing import ScriptedReply, ScriptedRequest

#: What a scripted agent does on each mock task: the tool call the task expects.
MOCK_CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "Important Meeting": ("create_task", {"user_id": "user_1", "title": "Important Meeting"}),
    "task_1": ("update_task_status", {"task_id": "task_1", "status": "completed"}),
}


def seat(request: ScriptedRequest) -> str:
    system = str((request.messages[0] if request.messages else {}).get("content") or "")
    return "user" if "<scenario>" in system else "assistant"


def mock_pair(request: ScriptedRequest) -> ScriptedReply | str:
    """A user who asks for what her scenario says and stops once it is done; an agent that
    makes the call it asks for, then says it is done."""
    messages = request.messages
    if seat(request) == "user":
        scenario = str(messages[0]["content"])
        said = [m for m in messages if m["role"] == "assistant"]
        if not said:
            want = next((k for k in MOCK_CALLS if k in scenario), "nothing")
            return f"Hello, please help me with {want}."
        return "Thank you, that is all. ###STOP###"
    last = messages[-1]
    if last["role"] == "tool":
        return "It is done: " + str(last["content"])[:60]
    asked = str(last.get("content") or "")
    for key, (name, args) in MOCK_CALLS.items():
        if key in asked:
            return ScriptedReply.tool_call(name, args)
    return "I cannot help with that."


def tool_results(request: ScriptedRequest) -> list[Any]:
    return [json.loads(m["content"]) if m["content"].startswith(("{", "[")) else m["content"]
            for m in request.messages if m["role"] == "tool"]
