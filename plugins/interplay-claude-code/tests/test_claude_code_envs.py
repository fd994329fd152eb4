"""Claude Code in the envs that take a harness, from the `interplay` command: the shop of
`user-sim-tools` (its tools through the tool gateway change the orders), the always_on
assistant of `always-on-week` (its `message_user` calls reach the user's graded chat), and a
token-capturing run exported as RL rows. The scripted model answers Claude Code's requests,
translated to Chat Completions, with calls of the tools as Claude Code names them
(`mcp__interplay__<tool>`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from interplay.run import whole_record
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, run_interplay

pytestmark = pytest.mark.slow

PREFIX = "mcp__interplay__"


def calls(request: ScriptedRequest, *made: tuple[str, dict[str, Any]]) -> ScriptedReply:
    """Calls of env tools, named as this request offers them."""
    names = {t["function"]["name"] for t in request.body.get("tools") or ()}
    return ScriptedReply.calls([(PREFIX + name if PREFIX + name in names else name, args)
                                for name, args in made])


def eval_claude(env: str, handler: Any, out_dir: Path, *more: str) -> dict[str, Any]:
    """``interplay eval ENV`` with Claude Code in the assistant seat, on the scripted model;
    the one episode it wrote."""
    with ScriptedModel(handler) as model:
        out = run_interplay("eval", env, "-n", "1", "--base-url", model.base_url,
                            "-o", str(out_dir), "--no-report",
                            "--set", 'seats.assistant.harness="claude-code"',
                            "--set", "seats.assistant.harness_config.state_dir="
                                     f"{json.dumps(str(out_dir.parent))}",
                            "--set", "seats.assistant.harness_config.timeout_s=150",
                            *more, timeout=600)
    assert out.returncode == 0, out.stderr
    (line,) = (out_dir / "episodes.jsonl").read_text().splitlines()
    episode: dict[str, Any] = whole_record(json.loads(line), out_dir)
    assert episode["error"] is None, (episode["error"], [
        t["info"].get("claude_code") for t in episode["traces"] if t["agent"] == "assistant"])
    return episode


def assistant_of(episode: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in episode["traces"] if t["agent"] == "assistant")


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


def test_claude_code_works_the_shop_of_user_sim_tools(claude_bin: str, tmp_path: Path) -> None:
    episode = eval_claude("user-sim-tools", Shop(), tmp_path / "run")
    assert {r["name"]: r["value"] for r in episode["rewards"]} == {"state_match": 1.0}
    order = episode["results"]["world"]["orders"]["1042"]
    assert (order["status"], order["cancel_reason"]) == ("cancelled", "ordered by mistake")
    trace = assistant_of(episode)
    assert [s["command"] for s in trace["info"]["claude_code"]["segments"]] == ["launch",
                                                                                 "resume"]
    made = [(c["id"], c["function"]["name"]) for m in trace["messages"]
            for c in m.get("tool_calls") or ()]
    assert [name for _, name in made] == [PREFIX + "find_order", PREFIX + "cancel_order",
                                          PREFIX + "cancel_order"]
    # Each call the model made is the gateway's run of it, under the model's own call id.
    assert [(r["call_id"], r["name"], r["error_type"]) for r in trace["tool_runs"]] == [
        (made[0][0], "find_order", None), (made[1][0], "cancel_order", "tool_error"),
        (made[2][0], "cancel_order", None)]
    outputs = {m["tool_call_id"]: m["content"] for m in trace["messages"]
               if m["role"] == "tool"}
    assert "error: ValueError: reason must be one of" in outputs[made[1][0]]
    assert '"status": "cancelled"' in outputs[made[2][0]]
    assert list(tmp_path.iterdir()) == [tmp_path / "run"]  # the per-trace dirs are gone


class Week:
    """always-on-week's agent, the user, the contact: an agent that asks the venue, tells the
    user, asks before booking and books after her yes."""

    def __call__(self, request: ScriptedRequest) -> str | ScriptedReply:
        msgs = request.messages
        system = " ".join(str(m.get("content")) for m in msgs if m["role"] == "system")
        if "role-playing a user" in system:
            return "Yes, please book the Lindenhof!"
        if "You receive messages from" in system:
            return "Sure, I'll send the guest list tonight."
        if msgs[-1]["role"] == "tool":
            return "NOTE: double-check the deposit."
        text = str(msgs[-1].get("content") or "")
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
        return calls(request, ("stay_quiet", {"reason": "nothing new"}))


def test_claude_code_lives_through_always_on_week(claude_bin: str, tmp_path: Path) -> None:
    episode = eval_claude("always-on-week", Week(), tmp_path / "run")
    assert [(r["name"], r["value"]) for r in episode["rewards"]] == [("asked_before", 1.0),
                                                                     ("contains", 1.0)]
    always_on = episode["results"]["always_on"]
    assert always_on["error_type"] is None
    (booking,) = always_on["apps"]["bookings"]["bookings"]
    assert booking["place"] == "Lindenhof"
    # Its message_user calls are the user's chat, the graded one.
    said = [m["text"] for m in always_on["conversation"] if m.get("from") == "agent"]
    assert said == ["I asked the Lindenhof about Saturday.",
                    "The Lindenhof is free on Saturday; the deposit is 150 EUR. Book it?",
                    "Booked the Lindenhof for Saturday."]
    trace = assistant_of(episode)
    assert trace["info"]["history"]["mode"] == "all"  # it is sent each wake's new lines only
    segments = trace["info"]["claude_code"]["segments"]
    assert segments[0]["command"] == "launch"
    assert {s["command"] for s in segments[1:]} == {"resume"}
    assert {s["session_id"] for s in segments} == {trace["info"]["claude_code"]["session_id"]}
    wakes = [e for e in always_on["timeline"] if e["kind"] == "wake"]
    called = [c["name"] for w in wakes for c in w["tool_calls"]]
    assert [r["name"] for r in trace["tool_runs"]] == called
    assert called[:2] == ["send_email", "message_user"] and "book" in called


def test_a_capturing_run_exports_claude_codes_calls_as_rl_rows(claude_bin: str,
                                                               tmp_path: Path) -> None:
    run = tmp_path / "run"
    episode = eval_claude("user-sim", lambda r: "Saturday from 10:00.", run,
                          "--set", "env.relay.max_turns=2", "--set", "model.capture_tokens=true")
    captured = [c["tokens"] for c in assistant_of(episode)["model_calls"]]
    assert len(captured) == 2
    assert all(t["missing"] == [] and t["completion_ids"] and t["logprobs"] for t in captured)
    # The second call's prompt begins with the first call's prompt and completion: Claude
    # Code resent its session as it was, and the trace is one token sequence.
    assert captured[1]["diverged_at"] is None

    def export(unit: str) -> list[dict[str, Any]]:
        rows_file = tmp_path / f"rl-{unit}.jsonl"
        out = run_interplay("export", str(run), "--format", "rl", "--unit", unit,
                            "-o", str(rows_file), timeout=300)
        assert out.returncode == 0, out.stderr
        return [json.loads(line) for line in rows_file.read_text().splitlines()]

    per_call = export("call")
    assert [(r["seat"], r["call"]) for r in per_call] == [("assistant", 0), ("assistant", 1)]
    for row, tokens in zip(per_call, captured, strict=True):
        assert (row["prompt_ids"], row["completion_ids"], row["logprobs"]) == (
            tokens["prompt_ids"], tokens["completion_ids"], tokens["logprobs"])
    (whole,) = export("trace")
    assert whole["calls"] == 2 and whole["prompt_ids"] == captured[0]["prompt_ids"]
    added = captured[1]["prompt_ids"][len(captured[0]["prompt_ids"])
                                      + len(captured[0]["completion_ids"]):]
    assert whole["completion_ids"] == (captured[0]["completion_ids"] + added
                                       + captured[1]["completion_ids"])
    assert sum(whole["loss_mask"]) == sum(len(t["completion_ids"]) for t in captured)
