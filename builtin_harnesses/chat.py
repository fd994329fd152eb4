"""The ``chat`` harness: an in-process tool loop over the model client, and ``null``, the
same loop without tools.

One segment: call the model; run any tool calls it made against the task's tools (in
parallel, each under its own timeout); feed the results back; repeat until the model answers
without calling a tool or the turn cap is reached. A malformed or failing tool call gets an
error message back to the model, never a crash: the same text, for the same mistake, that a
program calling the tools through the tool gateway gets (both go through
``SegmentContext.call_tool``). A ``tool_choice`` the caller asked for the turn
(``ChatSession.turn(..., tool_choice=...)``) goes with the first model call only.

When the seat works in the episode's sandbox (the env puts it there: ``Env.sandbox_seats``),
``chat`` also offers the sandbox tools ``bash``, ``python`` and ``text_editor``
(:mod:`interplay.builtin_harnesses.sandbox_tools`), as ``harness_config.sandbox_tools``
picks them: each call runs in the sandbox, bounded in time and output, and is recorded as a
tool run as the env's tools are.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar, Literal

import attrs

from interplay.builtin_harnesses.sandbox_tools import NAMES, Limits, SandboxTools
from interplay.contracts.contexts import SegmentContext
from interplay.contracts.harness import Harness, Segment
from interplay.errors import ErrorType, InterplayError
from interplay.model.wire import assistant_message
from interplay.values.records import Message, Task, ToolCall
from interplay.values.tools import Tool

#: The per-trace state key of the text editor's undo history.
_HISTORY = "chat.text_editor"


@attrs.define
class NullConfig:
    """The ``null`` harness's settings (and the first of ``chat``'s)."""

    #: Model calls in one segment before it stops with ``max_turns``.
    max_turns: int = attrs.field(default=10, validator=attrs.validators.ge(1))
    #: Seconds each tool call may take (a tool's own ``timeout_s`` can be shorter).
    tool_timeout_s: float = 30.0
    #: Stream model responses (records time to first token).
    stream: bool = False


@attrs.define
class ChatConfig(NullConfig):
    """The ``chat`` harness's settings: the null harness's, and its sandbox tools'."""

    #: The tools offered when the seat works in the episode's sandbox, run inside it (any of
    #: bash, python, text_editor; docs/sandboxes.md); [] offers none, the env's tools alone.
    #: A seat that works in no sandbox gets none of them.
    sandbox_tools: list[Literal["bash", "python", "text_editor"]] = attrs.Factory(
        lambda: list(NAMES))
    #: Seconds one bash or python call may run in the sandbox; past them the command and
    #: everything it started are stopped, and the model reads what it had written and that
    #: it was stopped.
    command_timeout_s: float = attrs.field(default=120.0, validator=attrs.validators.gt(0))
    #: Bytes of a sandbox tool's output the model reads back; past them the middle is left
    #: out, and the text says how many bytes.
    tool_output_bytes: int = attrs.field(default=16 * 1024,
                                         validator=attrs.validators.ge(256))


class ChatHarness(Harness):
    """In-process tool loop over the model client (tools come from the env)."""

    name = "chat"
    Config: ClassVar[type] = ChatConfig
    use_tools: ClassVar[bool] = True

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        conv: list[Message] = task.messages()
        tools = ctx.tools if self.use_tools else []
        by_name = {t.name: t for t in tools}
        box = await self._sandbox_tools(ctx, by_name) if self.use_tools else None
        specs = [t.spec() for t in tools] + \
            ([t.spec() for t in box.tools.values()] if box is not None else [])
        added: list[Message] = []
        cfg: NullConfig = self.config
        sampling = ctx.sampling
        if specs and ctx.tool_choice is not None:
            # The caller's choice for this segment's first call; later calls answer tool
            # results and are left to the model (a forced tool on each would never end).
            sampling = {**sampling, "tool_choice": ctx.tool_choice}
        for _ in range(cfg.max_turns):
            call = await ctx.client.chat(conv, tools=specs or None, stream=cfg.stream,
                                         **sampling)
            sampling = ctx.sampling
            if call.error_type is not None:
                return Segment(added, stop_condition="error", error=call.error,
                               error_type=call.error_type)
            msg = assistant_message(call)
            if msg is None:
                return Segment(added, stop_condition="error", error="no message in response",
                               error_type=ErrorType.BAD_RESPONSE)
            added.append(msg)
            if not msg.tool_calls:
                return Segment(added)
            conv.append(msg)
            results = await asyncio.gather(
                *(self._run_tool(c, by_name, box, ctx) for c in msg.tool_calls))
            for result in results:
                added.append(result)
                conv.append(result)
        return Segment(added, stop_condition="max_turns")

    async def _sandbox_tools(self, ctx: SegmentContext,
                             env_tools: dict[str, Tool]) -> SandboxTools | None:
        """The sandbox tools of this segment, when the seat works in a sandbox and
        ``sandbox_tools`` names any."""
        cfg: ChatConfig = self.config
        names = list(dict.fromkeys(cfg.sandbox_tools))
        if not names:
            return None
        sandbox = await ctx.sandbox()
        if sandbox is None:
            return None
        clash = [n for n in names if n in env_tools]
        if clash:
            left = [n for n in names if n not in clash]
            raise InterplayError(
                f"harness 'chat': the env gives seat {ctx.trace.seat or ctx.trace.agent!r} a "
                f"tool named {clash[0]!r}, the name of a sandbox tool; set "
                f"harness_config.sandbox_tools = {left!r} to offer the env's")
        history = ctx.state.setdefault(_HISTORY, {})
        return SandboxTools(sandbox, names, Limits(timeout_s=cfg.command_timeout_s,
                                                   output_bytes=cfg.tool_output_bytes),
                            history)

    async def _run_tool(self, call: ToolCall, tools: dict[str, Tool], box: SandboxTools | None,
                        ctx: SegmentContext) -> Message:
        if box is not None and call.name in box.tools:
            # Checked and answered as an env tool is; its time is its command's own limit.
            outcome = await box.call(call.name, call.arguments, call_id=call.id, ctx=ctx)
        else:
            # The one path every env tool call takes (the tool gateway's too): run, record,
            # answer.
            known = tools if box is None else {**tools, **box.tools}
            outcome = await ctx.call_tool(call.name, call.arguments, call_id=call.id,
                                          tools=tools if call.name in tools else known,
                                          timeout_s=self.config.tool_timeout_s)
        return Message("tool", outcome.output, tool_call_id=call.id)


class NullHarness(ChatHarness):
    """Tool-less chat: one model call per segment."""

    name = "null"
    Config: ClassVar[type] = NullConfig
    use_tools = False


__all__ = ["ChatConfig", "ChatHarness", "NullConfig", "NullHarness"]
