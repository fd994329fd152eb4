"""A tool function learns the id of the model's call it answers (interplay.values.tool_call_id),
sync or async, and only while it runs that call."""

from __future__ import annotations

import asyncio

from interplay import tool
from interplay.values import tool_call_id
from interplay.values.tools import run_call


@tool
async def async_id() -> str:
    """The call's id, from a coroutine."""
    await asyncio.sleep(0)
    return tool_call_id() or "none"


@tool
def sync_id() -> str:
    """The call's id, from the worker thread a sync tool runs in."""
    return tool_call_id() or "none"


async def test_a_tool_learns_the_id_of_the_call_it_answers() -> None:
    tools = {"async_id": async_id, "sync_id": sync_id}
    outcomes = await asyncio.gather(*(run_call(tools, name, "{}", call_id=f"call_{i}")
                                      for i, name in enumerate(["async_id", "sync_id"] * 2)))
    assert [o.output for o in outcomes] == ["call_0", "call_1", "call_2", "call_3"]
    assert (await run_call(tools, "sync_id", "{}")).output == "none"
    assert tool_call_id() is None
