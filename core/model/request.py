"""A program's request as a server interplay runs takes it (the interception server, in Chat
Completions, Responses or Anthropic Messages; the embedded model's server): its body parsed
strictly and its shape checked, in one place, before anything is forwarded or recorded.

A body that does not pass is a :class:`BadRequest` (an HTTP 400 with a one-line reason, and no
recorded turn): bytes that are not strict JSON (invalid UTF-8, a lone UTF-16 surrogate, NaN),
nesting past :data:`MAX_DEPTH`, a body that is not an object, or a top-level field the server
reads that has the wrong type. What the server does not read (sampling values, a message's
content) is the upstream's to judge. Pure functions: no I/O, no logging.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

#: How deep a request body may nest: as deep as orjson writes. Past it the codec falls back to
#: the standard library's encoder, which recurses, and a body nested a thousand levels down
#: could be neither forwarded nor recorded.
MAX_DEPTH = 254


class BadRequest(ValueError):
    """A request body that does not fit the API; becomes an HTTP 400 whose error carries
    ``param`` and ``code`` (OpenAI's error code, when it has one; the log line's reason)."""

    def __init__(self, message: str, param: str | None = None, *,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


def parse(raw: bytes) -> dict[str, Any]:
    """The request body as an object; BadRequest if it is not strict JSON, nests too deep or
    is not an object.

    Strict on purpose: a string the codec's lenient path would take (a lone surrogate from
    ``"\\ud800"`` or the bytes ED A0 80) cannot be encoded as UTF-8 again, so it could be
    neither forwarded nor recorded.
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "cannot be parsed"
        if reason.startswith("depth limit"):
            raise BadRequest(f"the request body nests deeper than {MAX_DEPTH} levels") from None
        raise BadRequest(f"the request body is not valid JSON: {reason}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    try:
        # Writing is the check: what orjson read it writes again, save what nests past its
        # depth (and it writes a few times faster than a walk in Python could look).
        orjson.dumps(body)
    except orjson.JSONEncodeError:
        raise BadRequest(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    return body


_OBJECT = (dict,)
_TEXT = (str,)
_FLAG = (bool,)
_LIST = (list,)
_NUMBER = (int, float)
_NAMES = {dict: "an object", str: "a string", bool: "a boolean", list: "a list",
          int: "an integer", float: "a number"}

# The top-level fields the server reads, per API, and the types it can work with (null is
# taken as absent, as the OpenAI API takes it).
_CHAT_FIELDS: dict[str, tuple[type, ...]] = {
    "model": _TEXT, "messages": _LIST, "stream": _FLAG, "stream_options": _OBJECT,
    "tools": _LIST, "tool_choice": (str, dict), "parallel_tool_calls": _FLAG,
    "max_tokens": (int,), "max_completion_tokens": (int,)}
_RESPONSES_FIELDS: dict[str, tuple[type, ...]] = {
    "model": _TEXT, "input": (str, list), "instructions": _TEXT, "stream": _FLAG,
    "tools": _LIST, "tool_choice": (str, dict), "parallel_tool_calls": _FLAG, "text": _OBJECT,
    "max_output_tokens": (int,), "previous_response_id": _TEXT}
_MESSAGES_FIELDS: dict[str, tuple[type, ...]] = {
    "model": _TEXT, "messages": _LIST, "system": (str, list), "max_tokens": (int,),
    "stream": _FLAG, "tools": _LIST, "tool_choice": _OBJECT, "stop_sequences": _LIST,
    "temperature": _NUMBER, "top_p": _NUMBER, "top_k": (int,), "metadata": _OBJECT,
    "thinking": _OBJECT, "output_config": _OBJECT}
_FIELDS = {"chat.completions": _CHAT_FIELDS, "responses": _RESPONSES_FIELDS,
           "messages": _MESSAGES_FIELDS, "messages.count_tokens": _MESSAGES_FIELDS}


def check(api: str, body: Mapping[str, Any], *, translated: bool = True) -> None:
    """Refuse (BadRequest) a body whose shape the server cannot work with: ``api`` is
    ``"chat.completions"``, ``"responses"``, ``"messages"`` or ``"messages.count_tokens"``;
    ``translated`` when a Responses request is to be sent upstream as Chat Completions (which
    needs its ``input``)."""
    fields = _FIELDS[api]
    for name, types in fields.items():
        value = body.get(name)
        if value is None:
            continue
        # bool is an int to Python, never to JSON
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            kinds = "a number" if types == _NUMBER else " or ".join(_NAMES[t] for t in types)
            raise BadRequest(f"'{name}' must be {kinds}, got {_json_type(value)}", name)
    tools = body.get("tools") or ()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise BadRequest(f"tools[{i}] must be an object, got {_json_type(tool)}", "tools")
    if api != "responses":
        msgs = body.get("messages")
        if not msgs:
            raise BadRequest("'messages' must be a non-empty list", "messages")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadRequest(f"messages[{i}] must be an object with a role", "messages")
        if api == "messages" and body.get("max_tokens") is None:
            # Required by the Messages API: a program that works here works there too.
            raise BadRequest("missing required parameter: 'max_tokens'", "max_tokens")
    elif translated and body.get("input") is None:
        raise BadRequest("missing required parameter: 'input'", "input")
    elif translated and body.get("previous_response_id") is not None:
        # The server keeps no earlier responses, and a Chat Completions upstream none either:
        # answering without the earlier turns would be a wrong answer given as a right one.
        raise BadRequest(
            "'previous_response_id' is not supported here: this endpoint serves Chat "
            "Completions and earlier responses are not kept; send the whole conversation in "
            "'input' (with store: false), or use an endpoint with api = \"responses\"",
            "previous_response_id", code="unsupported_parameter")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return _NAMES.get(type(value), type(value).__name__)
