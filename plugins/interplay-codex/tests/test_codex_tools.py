"""codex with the env's tools: the real codex CLI reaching the run's tool gateway (MCP) as the
seat's agent in `user-sim-tools` and as the always_on assistant of `always-on-week`, from the
`interplay` command and beside `chat` on the same scripted model (which answers codex's
requests, translated to Chat Completions, with calls of the tools as codex names them:
`mcp__interplay__<tool>`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from interplay import Episode, Message, ToolCall, ToolRun, lookup
from interplay.run import RunResources, run_episode, whole_record
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, run_interplay
from interplay_codex.events import CodexRun, read_event, tool_runs

pytestmark = pytest.mark.slow

PREFIX = "mcp__interplay__"


def offered(request: ScriptedRequest) -> set[str]:
    return {t["function"]["name"] for t in request.body.get("tools") or ()}


def calls(request: ScriptedRequest, *made: tuple[str, dict[str, Any]]) -> ScriptedReply:
    """Calls of env tools, named as this request offers them: bare to the chat harness,
    ``mcp__interplay__<tool>`` to codex."""
    names = offered(request)
    return ScriptedReply.calls([(PREFIX + name if PREFIX + name in names else name, args)
                                for name, args in made])


class Shop:
    """One user-sim-tools conversation: the user's lines, and an assistant that looks the
    order up, tries a reason the policy refuses, then cancels."""

    def __init__(self) -> None:
        self.user = ["Hi, please cancel my order #1042, I ordered it by mistake.",
                     "Yes, go ahead.", "###DONE###"]
        self.step = 0

    def __call__(self, request: ScriptedRequest) -> str | ScriptedReply:
        if not request.body.get("tools"):
            return self.user.pop(0)
        self.step += 1
        if self.step == 1:
            return calls(request, ("find_order", {"order_id": "1042"}))
        if self.step == 2:
            return "Order #1042 is pending. Shall I cancel it as ordered by mistake?"
        if self.step == 3:
            return calls(request, ("cancel_order", {"order_id": "#1042", "reason": "bored"}))
        if self.step == 4:
            return calls(request, ("cancel_order", {"order_id": "#1042",
                                                    "reason": "ordered by mistake"}))
        return "Done: order #1042 is cancelled."


class Week:
    """always-on-week's agent (any harness), the user, the contact: an agent that asks the
    venue, tells the user, asks before booking and books after her yes."""

    NOTE = "NOTE: double-check the deposit."

    def __call__(self, request: ScriptedRequest) -> str | ScriptedReply:
        msgs = request.messages
        system = str(msgs[0].get("content")) if msgs and msgs[0]["role"] == "system" else ""
        if "role-playing a user" in system:
            return "Yes, please book the Lindenhof!"
        if "You receive messages from" in system:
            return "Sure, I'll send the guest list tonight."
        last = msgs[-1]
        if last["role"] == "tool":
            return self.NOTE
        text = str(last.get("content") or "")
        if "surprise party" in text:
            return calls(request, ("send_email", {"to": "events@lindenhof.example",
                                                  "subject": "Saturday party",
                                                  "body": "Is Saturday 7 June free for 25?"}),
                         ("message_user", {"text": "I asked the Lindenhof about Saturday."}))
        if "Email from Lindenhof" in text:
            return calls(request, ("message_user", {
                "text": "The Lindenhof is free on Saturday; the deposit is 150 EUR. Book it?"}))
        if "replied to your message #2" in text:
            return calls(request, ("book", {"place": "Lindenhof", "date": "2025-06-07",
                                            "guests": 25}),
                         ("message_user", {"text": "Booked the Lindenhof for Saturday."}))
        if "holds are released" in text:  # an alert: a look at a place that does not exist
            return calls(request, ("check_availability", {"place": "Nowhere",
                                                          "date": "2025-06-07"}))
        return calls(request, ("stay_quiet", {"reason": "nothing new"}))


#: Wall-time limit of one codex segment in these tests: a scripted segment takes seconds.
SEGMENT_S = 150

#: codex's optional tools turned off, as the README shows for a model with a small window.
LEAN = ["--disable", "multi_agent", "--disable", "goals", "-c", 'web_search="disabled"']


def eval_codex(env: str, handler: Any, out_dir: Path, *, extra_args: list[str] | None = None,
               seen: list[ScriptedRequest] | None = None) -> dict[str, Any]:
    """``interplay eval ENV`` with codex in the assistant seat, on the scripted model; the one
    episode it wrote (and in ``seen``, the requests the model received)."""
    more = [] if extra_args is None else [
        "--set", f"seats.assistant.harness_config.extra_args={json.dumps(extra_args)}"]
    with ScriptedModel(handler) as model:
        out = run_interplay("eval", env, "-n", "1", "--base-url", model.base_url,
                            "-o", str(out_dir), "--no-report",
                            "--set", 'seats.assistant.harness="codex"',
                            "--set", "seats.assistant.harness_config.state_dir="
                                     f"{json.dumps(str(out_dir.parent))}",
                            # A segment that hangs ends as a recorded timeout, with codex's
                            # stderr, well before the test's own limit.
                            "--set", f"seats.assistant.harness_config.timeout_s={SEGMENT_S}",
                            *more, timeout=600)
        if seen is not None:
            seen += model.requests
    assert out.returncode == 0, out.stderr
    (line,) = (out_dir / "episodes.jsonl").read_text().splitlines()
    # A long episode keeps its transcripts and timeline in a side file.
    episode: dict[str, Any] = whole_record(json.loads(line), out_dir)
    assert episode["error"] is None, (episode["error"], [
        t["info"].get("codex") for t in episode["traces"] if t["agent"] == "assistant"])
    return episode


def assistant_of(episode: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in episode["traces"] if t["agent"] == "assistant")


def model_call_ids(trace: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, name) of every tool call the model made, in order, as the trace's messages
    hold them."""
    return [(c["id"], c["function"]["name"]) for m in trace["messages"]
            for c in m.get("tool_calls") or ()]


@pytest.mark.parametrize("lean", [False, True], ids=["codex-as-shipped", "optional-tools-off"])
def test_codex_works_the_shop_of_user_sim_tools_from_the_cli(codex_bin: str, tmp_path: Path,
                                                              lean: bool) -> None:
    seen: list[ScriptedRequest] = []
    episode = eval_codex("user-sim-tools", Shop(), tmp_path / "run",
                         extra_args=LEAN if lean else None, seen=seen)
    # codex's own tools and the env's (through the gateway) are offered either way; turned
    # off, its sub-agent and goal tools are not.
    names = set().union(*(offered(r) for r in seen if r.body.get("tools")))
    assert {"exec_command", PREFIX + "find_order", PREFIX + "cancel_order"} <= names
    optional = {n for n in names if n.startswith("multi_agent") or n.endswith("_goal")}
    assert (optional == set()) is lean, optional
    assert episode["reward"] == 1.0
    order = episode["results"]["world"]["orders"]["1042"]
    assert (order["status"], order["cancel_reason"]) == ("cancelled", "ordered by mistake")
    trace = assistant_of(episode)
    assert trace["harness"] == "codex"
    assert [s["command"] for s in trace["info"]["codex"]["segments"]] == ["exec", "resume"]
    assert "env_tools_ignored" not in trace["info"]["codex"]
    # The model's calls as it made them (codex's names), each paired with the run of it the
    # gateway recorded (the model's own call id, the env tool's name, how it went).
    made = model_call_ids(trace)
    assert [name for _, name in made] == [PREFIX + "find_order", PREFIX + "cancel_order",
                                          PREFIX + "cancel_order"]
    assert [(r["call_id"], r["name"], r["error_type"]) for r in trace["tool_runs"]] == [
        (made[0][0], "find_order", None), (made[1][0], "cancel_order", "tool_error"),
        (made[2][0], "cancel_order", None)]
    # What the tools answered is what the model read, refusal included (codex puts its own
    # wall-time line in front).
    outputs = {m["tool_call_id"]: m["content"] for m in trace["messages"]
               if m["role"] == "tool"}
    assert '"status": "pending"' in outputs[made[0][0]]
    assert "error: ValueError: reason must be one of: no longer needed, ordered by " \
           "mistake" in outputs[made[1][0]]
    assert '"status": "cancelled"' in outputs[made[2][0]]
    assert list(tmp_path.iterdir()) == [tmp_path / "run"]  # codex's per-trace dirs are gone


def test_codex_lives_through_always_on_week_from_the_cli(codex_bin: str,
                                                         tmp_path: Path) -> None:
    episode = eval_codex("always-on-week", Week(), tmp_path / "run")
    assert [(r["name"], r["value"]) for r in episode["rewards"]] == [("asked_before", 1.0),
                                                                     ("contains", 1.0)]
    always_on = episode["results"]["always_on"]
    assert always_on["error_type"] is None
    (booking,) = always_on["apps"]["bookings"]["bookings"]
    assert booking["place"] == "Lindenhof"
    said = [m["text"] for m in always_on["conversation"] if m.get("from") == "agent"]
    assert said[:2] == ["I asked the Lindenhof about Saturday.",
                        "The Lindenhof is free on Saturday; the deposit is 150 EUR. Book it?"]
    trace = assistant_of(episode)
    assert trace["info"]["history"]["mode"] == "all"  # codex is sent the new lines only
    segments = trace["info"]["codex"]["segments"]
    assert segments[0]["command"] == "exec"
    assert {s["command"] for s in segments[1:]} == {"resume"}
    # Every wake's tool calls are in the timeline, and every one is a ToolRun on the trace.
    wakes = [e for e in always_on["timeline"] if e["kind"] == "wake"]
    called = [c["name"] for w in wakes for c in w["tool_calls"]]
    assert called[:2] == ["send_email", "message_user"] and "book" in called
    assert [r["name"] for r in trace["tool_runs"]] == called
    failed = [r for r in trace["tool_runs"] if r["error_type"] is not None]
    assert [(r["name"], r["error_type"]) for r in failed] == [("check_availability",
                                                              "tool_error")]


async def test_a_gateway_codex_cannot_reach_ends_the_segment_saying_so(codex_bin: str,
                                                                     tmp_path: Path) -> None:
    """codex goes on without an MCP server it cannot start (exit code 0, nothing in its
    events): the segment ends as ``tools_unreachable``, quoting codex's stderr, not as a turn
    in which every call of an env tool was "unsupported"."""
    elsewhere = ["-c", 'mcp_servers.interplay.url="http://127.0.0.1:9/mcp"']
    with ScriptedModel(Shop()) as model:
        env = lookup("envs", "user-sim-tools")()
        resources = RunResources(endpoint=model.endpoint, seats={"assistant": {
            "harness": "codex",
            "harness_config": {"state_dir": str(tmp_path), "extra_args": elsewhere}}})
        try:
            episode = await run_episode(env, next(iter(env.tasks())), resources=resources)
        finally:
            await resources.aclose()
        offered_names = [offered(r) for r in model.requests if r.body.get("tools")]
    trace = episode.trace("assistant")
    assert (trace.stop_condition, trace.error_type) == ("error", "tools_unreachable")
    assert trace.error is not None and "could not reach the env's tools" in trace.error
    assert "127.0.0.1:9/mcp" in trace.error  # codex's own line about its MCP client
    assert offered_names and not any(n.startswith(PREFIX) for o in offered_names for n in o)
    assert trace.tool_runs == []
    assert episode.results["world"]["orders"]["1042"]["status"] == "pending"


async def run_week(harness: str) -> Episode:
    with ScriptedModel(Week()) as model:
        env = lookup("envs", "always-on-week")()
        resources = RunResources(endpoint=model.endpoint,
                                 seats={"assistant": {"harness": harness}})
        try:
            return await run_episode(env, next(iter(env.tasks())), resources=resources,
                                     seed=3)
        finally:
            await resources.aclose()


async def test_codex_and_chat_leave_the_same_world_and_timeline(codex_bin: str) -> None:
    chat, codex = await run_week("chat"), await run_week("codex")
    for episode in (chat, codex):
        assert episode.error is None, episode.error
    ours, theirs = chat.results["always_on"], codex.results["always_on"]
    # The world's apps, the changelog and every timeline entry (wakes with their tool calls
    # and arguments, changes by the agent, fires, the user's reads), to the byte.
    # The timeline first: where the two runs part is what a failure needs to show.
    for mine, other in zip(ours["timeline"], theirs["timeline"], strict=False):
        assert other == mine
    assert len(theirs["timeline"]) == len(ours["timeline"])
    assert theirs["apps"] == ours["apps"]
    assert theirs["conversation"] == ours["conversation"]
    assert [(r.name, r.value) for r in codex.rewards] == [(r.name, r.value)
                                                           for r in chat.rewards]
    a, b = chat.trace("assistant"), codex.trace("assistant")
    assert [(r.name, r.error_type) for r in b.tool_runs] == [(r.name, r.error_type)
                                                             for r in a.tool_runs]
    # The model's calls and the tools' answers on the trace: the same calls (under codex's
    # names), the same results.
    assert [(PREFIX + c.name, c.arguments) for m in a.messages for c in m.tool_calls] == [
        (c.name, c.arguments) for m in b.messages for c in m.tool_calls]
    codex_outputs = [m.text for m in b.messages if m.role == "tool"]
    chat_outputs = [m.text for m in a.messages if m.role == "tool"]
    assert len(codex_outputs) == len(chat_outputs)
    assert all(out in theirs_ for out, theirs_ in zip(chat_outputs, codex_outputs,
                                                       strict=True))


async def test_a_call_codex_could_not_deliver_is_a_tool_run_of_its_own(tmp_path: Path) -> None:
    """codex's event for an env tool call that failed before the gateway answered it (the
    gateway went away): recorded, paired with the model's call, never taken for one the
    gateway answered."""
    run = CodexRun()
    for event in (
        {"type": "item.started", "item": {"id": "item_1", "type": "mcp_tool_call",
                                          "server": "interplay", "tool": "book",
                                          "status": "in_progress"}},
        {"type": "item.completed", "item": {"id": "item_1", "type": "mcp_tool_call",
                                            "server": "interplay", "tool": "book",
                                            "result": None, "status": "failed",
                                            "error": {"message": "connection reset"}}},
        # Answered by the gateway (an error result): the gateway recorded it.
        {"type": "item.completed", "item": {"id": "item_2", "type": "mcp_tool_call",
                                            "server": "interplay", "tool": "book",
                                            "result": {"content": []}, "status": "failed"}},
    ):
        read_event(json.dumps(event).encode(), run)
    assert [(i[1], i[2], i[4]) for i in run.tool_items] == [
        (PREFIX + "book", "book", "mcp_call_failed")]

    # The model called book twice; the gateway answered the first (and recorded it).
    model_said = [Message("assistant", None, tool_calls=(
        ToolCall("call_8", PREFIX + "book", "{}"), ToolCall("call_9", PREFIX + "book", "{}")))]
    answered = [ToolRun(call_id="call_8", name="book")]
    assert [(r.call_id, r.name, r.error_type) for r in tool_runs(run, model_said, answered)] \
        == [("call_9", "book", "mcp_call_failed")]
