"""codex in the agent's seat on tau2's retail domain: the real codex CLI, on the scripted
model, calls tau2's tools through the run's tool gateway (MCP); the database changes as its
calls ask, and tau2's evaluator scores the trajectory."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from tau2_scripts import seat

from interplay.run import whole_record
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, run_interplay
from interplay_tau2 import domains

pytestmark = pytest.mark.slow

PREFIX = "mcp__interplay__"
#: Retail task 70: exchange one delivered item; the agent must say the price difference.
EXCHANGE = {"order_id": "#W3947049", "item_ids": ["3358616356"],
            "new_item_ids": ["9013366374"], "payment_method_id": "credit_card_7901829"}


def codex_bin() -> str:
    found = shutil.which("codex", path=str(Path(sys.executable).parent)) or shutil.which("codex")
    if found is None:
        pytest.skip("the codex CLI is not installed (bash .ci/setup --test installs it)")
    return found


def retail_pair(request: ScriptedRequest) -> ScriptedReply | str:
    """The user asks for the exchange and stops once told the price difference; codex (the
    request that offers tau2's tools as codex names them) makes the exchange, then says it."""
    if seat(request) == "user":
        said = [m for m in request.messages if m["role"] == "assistant"]
        if not said:
            return "I want to exchange an item of my order #W3947049."
        return "Great, thank you. ###STOP###"
    offered = {t["function"]["name"] for t in request.body.get("tools") or ()}
    if PREFIX + "exchange_delivered_order_items" not in offered:
        return "OK."  # a request of codex's own that is not the agent's turn
    if any(m["role"] == "tool" for m in request.messages):
        return "The exchange is requested; the price difference of 22.55 is refunded."
    return ScriptedReply.tool_call(PREFIX + "exchange_delivered_order_items", EXCHANGE)


def test_codex_changes_tau2s_retail_database_and_tau2_scores_it(tmp_path: Path) -> None:
    codex_bin()
    out_dir = tmp_path / "run"
    with ScriptedModel(retail_pair) as model:
        out = run_interplay("eval", "tau2-retail", "--set", 'env.task_ids=["70"]',
                            "--base-url", model.base_url, "-o", str(out_dir), "--no-report",
                            "--set", 'seats.assistant.harness="codex"',
                            "--set", "seats.assistant.harness_config.state_dir="
                                     f"{json.dumps(str(tmp_path))}", timeout=600)
    assert out.returncode == 0, out.stderr
    (line,) = (out_dir / "episodes.jsonl").read_text().splitlines()
    episode: dict[str, Any] = whole_record(json.loads(line), out_dir)
    assert episode["error"] is None, episode["error"]
    record = episode["results"]["tau2"]
    assert record["termination_reason"] == "user_stop"
    calls = [c for m in record["messages"] for c in m.get("tool_calls") or ()]
    # tau2's record names the tool as tau2 does (codex's MCP prefix taken off), with the
    # model's arguments and call id; tau2's environment answered it and changed the order.
    assert [(c["name"], c["arguments"], c["requestor"]) for c in calls] == [
        ("exchange_delivered_order_items", EXCHANGE, "assistant")]
    (answer,) = [m for m in record["messages"] if m["role"] == "tool"]
    assert answer["id"] == calls[0]["id"] and not answer["error"]
    assert '"status": "exchange requested"' in answer["content"]
    tau = domains.tau2()
    fresh = tau.registry.get_env_constructor("retail")()
    assert record["db_hash"] != fresh.get_db_hash()
    assert episode["reward"] == 1.0
    assert {r["name"]: r["value"] for r in episode["rewards"]} == {
        "tau2": 1.0, "tau2_db": 1.0, "tau2_communicate": 1.0}
    trace = next(t for t in episode["traces"] if t["seat"] == "assistant")
    assert trace["harness"] == "codex"
    assert [r["name"] for r in trace["tool_runs"]] == ["exchange_delivered_order_items"]
