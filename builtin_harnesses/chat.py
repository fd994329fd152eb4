"""The ``chat`` harness: an in-process tool loop over the model client, and ``null``, the
same loop without tools.

One segment: call the model; run any tool calls it made against the task's tools (in
parallel, each under its own timeout); feed the results back; repeat until the model answers
without calling a tool or the turn cap is reached. A malformed or failing tool call gets an
error message back to the model, never a crash: the same text, for the same mistake, that a
program calling the tools through the tool gateway gets (both go through
``SegmentContext.call_tool``). A ``tool_choice`` the caller asked for the turn
(``ChatSession.turn(..., tool_choice=...)``) goes with the first model call only.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import attrs

from interplay.contexts import SegmentContext
from interplay.harness import Harness, Segment
from interplay.model.wire import assistant_message
from interplay.records import Message, Task, ToolCall
from interplay.tools import Tool


@attrs.define
class ChatConfig:
    #: Model calls in one segment before it stops with ``max_turns``.
    max_turns: int = attrs.field(default=10, validator=attrs.validators.ge(1))
    #: Seconds each tool call may take (a tool's own ``timeout_s`` can be shorter).
    tool_timeout_s: float = 30.0
    #: Stream model responses (records time to first token).
    stream: bool = False


class ChatHarness(Harness):
    """In-process tool loop over the model client (tools come from the env)."""

    name = "chat"
    Config: ClassVar[type] = ChatConfig
    use_tools: ClassVar[bool] = True

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        conv: list[Message] = task.messages()
        tools = ctx.tools if self.use_tools else []
        specs = [t.spec() for t in tools] or None
        by_name = {t.name: t for t in tools}
        added: list[Message] = []
        cfg: ChatConfig = self.config
        sampling = ctx.sampling
        if specs and ctx.tool_choice is not None:
            # The caller's choice for this segment's first call; later calls answer tool
            # results and are left to the model (a forced tool on each would never end).
            sampling = {**sampling, "tool_choice": ctx.tool_choice}
        for _ in range(cfg.max_turns):
            call = await ctx.client.chat(conv, tools=specs, stream=cfg.stream, **sampling)
            sampling = ctx.sampling
            if call.error_type is not None:
                return Segment(added, stop_condition="error", error=call.error,
                               error_type=call.error_type)
            msg = assistant_message(call)
            if msg is None:
                return Segment(added, stop_condition="error", error="no message in response",
                               error_type="bad_response")
            added.append(msg)
            if not msg.tool_calls:
                return Segment(added)
            conv.append(msg)
            results = await asyncio.gather(
                *(self._run_tool(c, by_name, ctx) for c in msg.tool_calls))
            for result in results:
                added.append(result)
                conv.append(result)
        return Segment(added, stop_condition="max_turns")

    async def _run_tool(self, call: ToolCall, tools: dict[str, Tool],
                        ctx: SegmentContext) -> Message:
        # The one path every tool call takes (the tool gateway's too): run, record, answer.
        outcome = await ctx.call_tool(call.name, call.arguments, call_id=call.id, tools=tools,
                                      timeout_s=self.config.tool_timeout_s)
        return Message("tool", outcome.output, tool_call_id=call.id)


class NullHarness(ChatHarness):
    """Tool-less chat: one model call per segment."""

    name = "null"
    use_tools = False


__all__ = ["ChatConfig", "ChatHarness", "NullHarness"]
