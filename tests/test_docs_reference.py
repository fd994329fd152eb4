"""What the docs say of the public API is held to the code: each table of names and each
field the docs name is checked against the signatures, classes and files it speaks of."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import attrs

from interplay.run import RolloutGroup, Rollouts

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _table_after(page: Path, marker: str) -> list[list[str]]:
    """The rows of the markdown table following ``<!-- marker -->`` in ``page``."""
    text = page.read_text().split(f"<!-- {marker} -->", 1)[1].lstrip("\n")
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            break
        if re.fullmatch(r"\|[-| ]+\|", line.strip()):  # the header's rule
            continue
        rows.append([c.strip() for c in line.strip()[1:-1].split(" | ")])
    return rows[1:]


def test_the_rollouts_table_names_every_parameter_and_field() -> None:
    rows = _table_after(DOCS / "training.md", "rollouts-reference")
    named: dict[str, list[str]] = {}
    where = ""
    for cells in rows:
        where = cells[0] or where
        named.setdefault(where, []).append(cells[1].strip("`"))
    params = [p for p in inspect.signature(Rollouts.__init__).parameters if p != "self"]
    assert named["`Rollouts(...)`"] == params
    groups = [p for p in inspect.signature(Rollouts.groups).parameters if p != "self"]
    assert named["`runner.groups(...)`"] == groups
    fields = [f.name for f in attrs.fields(RolloutGroup)]
    assert named["`RolloutGroup`"] == [*fields, "rewards"]


def test_rollouts_take_env_settings_and_seats_as_the_docs_write_them() -> None:
    runner = Rollouts("user-sim", env_settings={"relay": {"max_turns": 2}},
                      seats={"assistant": {"sampling": {"temperature": 1.0}}})
    assert runner.env.config.relay.max_turns == 2
    assert RolloutGroup(task=next(iter(runner.env.tasks())), episodes=[]).rewards == []


def test_the_docs_name_the_mcp_clients_error_field() -> None:
    from mcp.types import CallToolResult

    text = (DOCS / "plugins.md").read_text()
    assert "CallToolResult.is_error" in text and "is_error" in CallToolResult.model_fields
    # The wire's name is said to be the wire's, never the client's attribute.
    assert not re.search(r"result\.isError|\.isError\b", text)


def test_the_report_anchor_the_docs_name_is_the_one_the_page_reads() -> None:
    readme = (ROOT / "docs" / "results.md").read_text()
    script = (ROOT / "core" / "report" / "templates" / "report.js").read_text()
    assert "report.html#episode=<id>" in readme
    assert "#episode=" in script


async def test_the_two_seat_scripted_model_example_runs_as_written() -> None:
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", (DOCS / "plugins.md").read_text(),
                                      re.S) if "def two_seats" in b]
    scope: dict[str, object] = {}
    exec(compile(block, "docs/plugins.md", "exec", dont_inherit=True), scope)
    rewards = await scope["two_at_once"]()  # type: ignore[operator]
    assert len(rewards) == 4 and all(r == 1.0 for r in rewards), rewards


def test_a_scripted_reply_makes_several_tool_calls() -> None:
    from interplay.testing import ScriptedReply

    reply = ScriptedReply.calls([("find_order", {"order_id": "7"}), ("list_orders", {})],
                                text="Looking.", latency_s=0.5)
    assert [c.name for c in reply.tool_calls] == ["find_order", "list_orders"]
    assert reply.latency_s == 0.5 and reply.content == "Looking."


def _docs_block(marker: str) -> str:
    text = (DOCS / "plugins.md").read_text().split(f"<!-- {marker} -->", 1)[1]
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)  # type: ignore[union-attr]


async def test_the_docs_env_tools_and_tool_calling_harness_run_as_written(
        register_plugin: Any) -> None:
    """The env whose tool keeps per-episode state in ctx.results, run by the harness whose
    tool calls come back as CallOutcomes, two episodes at once on one scripted model."""
    import asyncio
    import types

    from interplay import hookimpl
    from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted

    scope: dict[str, Any] = {}
    for marker in ("env-tools-example", "harness-tool-call-example"):
        exec(compile(_docs_block(marker), "docs/plugins.md", "exec", dont_inherit=True), scope)
    register_plugin(types.SimpleNamespace(register_harnesses=hookimpl(
        lambda register: register(scope["OneRound"]))), "one_round_docs")

    def answer(request: ScriptedRequest) -> ScriptedReply | str:
        results = [m["content"] for m in request.messages if m["role"] == "tool"]
        if results:  # the first call's output, then the second's error text
            assert "error" in results[1]
            return f"The counter is at {results[0]}."
        return ScriptedReply.calls([("bump", {"by": 2}), ("bmp", {"by": 1})])

    env = scope["Counter"]()
    task = next(iter(env.tasks()))
    seats = {"assistant": {"harness": "one_round"}}
    runs = await asyncio.gather(*(run_scripted(env, task, answer, seats=seats, rollout=r)
                                  for r in range(2)))
    for run in runs:
        episode = run.episode
        assert episode.error is None and episode.results["counter"] == {"n": 2}
        (trace,) = episode.traces
        assert [(r.name, r.error_type) for r in trace.tool_runs] == [
            ("bump", None), ("bmp", "unknown_tool")]
        assert trace.messages[-1].text == "The counter is at 2."


async def test_a_reads_turn_is_as_the_docs_say_in_the_relay(register_plugin: Any) -> None:
    """0 for her opening, then n for the assistant's n-th reply."""
    import types

    from interplay import Answer, UserSim, hookimpl, lookup
    from interplay.contracts import Read
    from interplay.testing import run_scripted

    turns: list[int] = []

    class Counting(UserSim):
        """Says three lines, then is done."""

        name = "counting"

        def seats(self) -> set[str]:
            return set()

        async def answer(self, read: Read) -> Answer:
            turns.append(read.turn)
            return Answer(f"line {read.turn}", done=read.turn >= 2)

    register_plugin(types.SimpleNamespace(register_user_sims=hookimpl(
        lambda register: register(Counting))), "counting_docs")
    env = lookup("envs", "user-sim")({"relay": {"user_sim": "counting"}})
    await run_scripted(env, next(iter(env.tasks())), ["first", "second", "third"])
    assert turns == [0, 1, 2]
    docs = (DOCS / "plugins.md").read_text()
    assert "0 for her opening (nobody has spoken yet), n for its n-th reply" in docs


def test_a_rubric_with_fixed_criteria_refuses_others() -> None:
    from interplay import Criterion, InterplayError

    text = (DOCS / "plugins.md").read_text().split("<!-- fixed-criteria-example -->", 1)[1]
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)  # type: ignore[union-attr]
    scope: dict[str, Any] = {}
    exec(compile(block, "docs/plugins.md", "exec", dont_inherit=True), scope)
    judge = scope["CitedRubric"]({"retries": 2})
    assert judge.config.criteria == [Criterion("cited", "Every claim names its source.")]
    try:
        scope["CitedRubric"]({"criteria": [{"name": "x", "description": "y"}]})
    except InterplayError as exc:
        assert "unknown key criteria" in exc.message and "criteria" not in \
            exc.message.split("allowed:", 1)[1]
    else:
        raise AssertionError("a fixed rubric took criteria from its config")


def test_a_rubrics_fixed_criteria_are_described_with_their_value(register_plugin: Any) -> None:
    import types

    from interplay import hookimpl
    from interplay.commands.describe import describe, text

    block = (DOCS / "plugins.md").read_text().split("<!-- fixed-criteria-example -->", 1)[1]
    scope: dict[str, Any] = {}
    exec(compile(re.search(r"```python\n(.*?)```", block, re.S).group(1),  # type: ignore[union-attr]
                 "docs/plugins.md", "exec", dont_inherit=True), scope)
    register_plugin(types.SimpleNamespace(register_verifiers=hookimpl(
        lambda register: register(scope["CitedRubric"]))), "cited_docs")
    info = describe("verifiers", "cited")
    (criteria,) = [s for s in info["settings"] if s["name"] == "criteria"]
    assert criteria["fixed"] and criteria["default"][0]["name"] == "cited"
    assert "a config cannot set it" in text(info)
