"""Tools a seat can call: a name, a JSON schema, and a function; and :func:`run_call`, the one
way a call of the model's is run against them.

A tool function takes its arguments as keywords and returns text (or anything JSON-able),
sync or async. A sync function runs in a worker thread, so it neither blocks the event loop (the
other tool calls, the model calls of concurrent episodes) nor escapes its timeout. Errors it
raises go back to the model as the tool's output, never crash a run. The in-process ``chat``
harness and the tool gateway (MCP, for harness programs that run as processes) both run calls
through :func:`run_call`, so the model reads the same text either way in, for a success and
for every kind of failure. A call's arguments are checked against the tool's JSON schema
(``parameters``, with ``jsonschema``) before the tool runs: what the model was shown is what it
is held to, and a wrong type comes back as ``bad_arguments`` naming the field instead of the
tool's own exception.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from interplay._plumbing import codec as _codec
from interplay.errors import ErrorType
from interplay.log import get_logger
from interplay.values.records import ToolCall

log = get_logger("interplay.values.tools")

#: The id of the model's tool call a tool function is answering (see :func:`tool_call_id`).
_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("interplay_tool_call_id",
                                                                     default=None)

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
    #: The checker of ``parameters`` (made at the first call; False: the schema is invalid).
    _checker: Any = attrs.field(default=None, init=False, repr=False, eq=False)

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


@attrs.frozen
class CallOutcome:
    """What one call of a tool gave back: the text the model reads, and why it failed (None on
    success): ``unknown_tool``, ``bad_arguments``, ``timeout`` or ``tool_error`` (an
    :class:`~interplay.errors.ErrorType`)."""

    output: str
    error_type: str | None = None


def tool_call_id() -> str | None:
    """Inside a tool function: the id of the model's tool call it answers (the id the model
    gave the call, the same in the trace's messages and its tool runs); None outside a call,
    or for a call run without one. A tool that keeps a record of its own keyed by call (a
    benchmark's trajectory, whose tool results carry the call's id) pairs it with the model's
    call by this id, whichever harness ran the call."""
    return _CALL_ID.get()


async def run_call(tools: Mapping[str, Tool], name: str,
                   arguments: str | Mapping[str, Any] | None, *,
                   timeout_s: float | None = None, call_id: str | None = None) -> CallOutcome:
    """Run the model's call of ``name`` with ``arguments`` (the JSON text it produced, or the
    object a protocol already parsed) against ``tools`` (by name), under the tool's own
    timeout and at most ``timeout_s``. Never raises for what the model or the tool did: a
    name no tool has, arguments that are not a JSON object or do not fit the tool's schema
    or its function, a timeout and an exception in the tool each come back as an error text
    the model can act on. Cancellation propagates. ``call_id`` is what :func:`tool_call_id`
    answers inside the tool function."""
    tool = tools.get(name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return CallOutcome(f"error: there is no tool named {name!r}; available tools: {known}",
                           ErrorType.UNKNOWN_TOOL)
    if arguments is None or isinstance(arguments, str):
        try:
            args = _parsed(arguments)
        except ValueError as exc:
            return CallOutcome(f"error: the arguments are not a JSON object ({exc}); "
                               "call it again", ErrorType.BAD_ARGUMENTS)
    elif isinstance(arguments, Mapping):
        args = dict(arguments)
    else:
        return CallOutcome("error: the arguments are not a JSON object; call it again",
                           ErrorType.BAD_ARGUMENTS)
    problem = _schema_problem(tool, args) or _binding_problem(tool, args)
    if problem is not None:
        return CallOutcome(f"error: {problem}; call it again with the tool's parameters",
                           ErrorType.BAD_ARGUMENTS)
    timeout = tool.timeout_s if timeout_s is None else min(tool.timeout_s, timeout_s)
    # Set in this context only: the tool's task (and a sync tool's thread) copy it from here.
    token = _CALL_ID.set(call_id)
    try:
        return CallOutcome(await asyncio.wait_for(tool.call(args), timeout))
    except TimeoutError:
        return CallOutcome(f"error: the tool did not finish within {timeout:g} s",
                           ErrorType.TIMEOUT)
    except Exception as exc:
        return CallOutcome(f"error: {type(exc).__name__}: {exc}", ErrorType.TOOL_ERROR)
    finally:
        _CALL_ID.reset(token)


def _parsed(arguments: str | None) -> dict[str, Any]:
    """As :meth:`interplay.values.records.ToolCall.parsed_arguments` reads them."""
    return ToolCall(id="", name="", arguments=arguments or "{}").parsed_arguments()


#: Checkers by schema (its JSON text): checking a schema against its meta-schema costs 50 to 100
#: times checking a call against it, and an env makes its tools afresh for every episode.
_CHECKERS: dict[bytes, Any] = {}
_CHECKERS_MAX = 1024
#: How much of the validator's message the model is given (it quotes the value it refused).
_PROBLEM_CHARS = 300


def _checker(tool: Tool) -> Any:
    """The validator of ``tool.parameters`` (False when it is not a valid JSON Schema)."""
    if tool._checker is not None:
        return tool._checker
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for
    from referencing import Registry

    key = _codec.dumps(tool.parameters)
    checker = _CHECKERS.get(key)
    if checker is None:
        cls = validator_for(tool.parameters)
        try:
            cls.check_schema(tool.parameters)
            # No registry: a $ref resolves inside the schema, never over the network.
            checker = cls(tool.parameters, registry=Registry())
        except SchemaError as exc:
            checker = False
            log.warning("tools.schema_invalid", tool=tool.name,
                        reason_code=f"schema_{exc.validator}")
        if len(_CHECKERS) >= _CHECKERS_MAX:
            _CHECKERS.clear()
        _CHECKERS[key] = checker
    tool._checker = checker
    return checker


def _schema_problem(tool: Tool, args: dict[str, Any]) -> str | None:
    """Where the arguments break the tool's JSON schema (the field and what is wrong), or None
    when they fit it or its schema is not a valid one (the call is then bound to the function
    only)."""
    checker = _checker(tool)
    if checker is False:
        return None
    from jsonschema.exceptions import best_match

    error = best_match(checker.iter_errors(args))
    if error is None:
        return None
    message = error.message
    if len(message) > _PROBLEM_CHARS:
        message = message[:_PROBLEM_CHARS] + "..."
    field = ".".join(str(p) for p in error.absolute_path)
    return f"argument {field!r}: {message}" if field else message


def _binding_problem(tool: Tool, args: dict[str, Any]) -> str | None:
    """Why the arguments do not fit the tool function's signature, or None if they do.

    Binding first keeps a TypeError raised inside the tool (or by serializing its result) from
    passing for the model's mistake."""
    try:
        signature = inspect.signature(tool.fn)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(**args)
    except TypeError as exc:
        return str(exc)
    return None


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
