"""Tools an in-process harness can call: a name, a JSON schema, and a function.

A tool function takes its arguments as keywords and returns text (or anything JSON-able),
sync or async. A sync function runs in a worker thread, so it neither blocks the event loop (the
other tool calls, the model calls of concurrent episodes) nor escapes its timeout. Errors it
raises go back to the model as the tool's output, never crash a run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               list: "array", dict: "object"}


@attrs.define
class Tool:
    """A tool an agent can call: its ``name``, what it does (``description``), its arguments'
    JSON schema (``parameters``), the function that runs it (keyword arguments, sync or async;
    text or anything JSON-able comes back) and how long a call may take. Build one with
    :func:`tool` from a typed function. An env gives each seat its tools
    (``Env.tools(seat, ctx)``); an always_on world gives its apps' tools and the chat tools."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    timeout_s: float = 30.0

    def spec(self) -> dict[str, Any]:
        """The tool in the OpenAI ``tools`` shape."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters}}

    async def call(self, arguments: dict[str, Any]) -> str:
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**arguments)
        else:
            result = await asyncio.to_thread(self.fn, **arguments)
        if inspect.isawaitable(result):
            result = await typing.cast(Awaitable[Any], result)
        return result if isinstance(result, str) else json.dumps(result)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None,
         description: str | None = None, timeout_s: float = 30.0) -> Any:
    """Make a Tool from a function: its signature becomes the JSON schema, its docstring the
    description."""

    def make(f: Callable[..., Any]) -> Tool:
        hints = typing.get_type_hints(f)
        props: dict[str, Any] = {}
        required = []
        for pname, param in inspect.signature(f).parameters.items():
            props[pname] = {"type": _JSON_TYPES.get(hints.get(pname, str), "string")}
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        schema = {"type": "object", "properties": props, "required": required,
                  "additionalProperties": False}
        doc = (f.__doc__ or "").strip()
        return Tool(name=name or f.__name__, description=description or doc, parameters=schema,
                    fn=f, timeout_s=timeout_s)

    return make(fn) if fn is not None else make
