"""Translation between the Anthropic Messages API and Chat Completions.

Upstreams such as vLLM and llama.cpp speak Chat Completions; programs such as Claude Code speak
only Messages. This module turns a Messages request into a Chat Completions body, and a
chat.completion (or its stream of chunks) into a Messages ``message`` and the SSE events a
Messages client reads: ``message_start``; each content block as ``content_block_start``,
its deltas (``text_delta``, ``input_json_delta``) and ``content_block_stop``;
``message_delta`` with the stop reason and usage; ``message_stop``. Pure functions and a small
stateful streamer; no I/O.

What a Chat Completions upstream cannot honour is dropped or refused by a rule, each one here
and in the model-boundary reference (docs/harnesses.md), never half-applied:

- **Translated**: ``system`` (a string or text blocks, one system message; Claude Code's
  ``x-anthropic-billing-header`` line, a header it carries in the prompt, is not prompt text
  and is left out), ``messages`` (text, images as image parts, ``tool_use`` as tool calls,
  ``tool_result`` as tool messages, errors included), a ``system``-role message inside
  ``messages`` (Claude Code sends its environment so; kept in place as a system message),
  custom ``tools`` (``input_schema`` as parameters), ``tool_choice`` (``auto``, ``any`` as
  ``required``, ``tool``, ``none``; ``disable_parallel_tool_use`` as
  ``parallel_tool_calls: false``), ``max_tokens``, ``stop_sequences`` as ``stop``,
  ``temperature``, ``top_p``, ``top_k`` (vLLM and llama.cpp take it), ``stream``, and
  ``output_config.format`` (a JSON schema) as ``response_format``.
- **Dropped** (named in the server's ``interception.fields_not_forwarded`` log line, once per
  trace): ``thinking`` (no thinking is asked for or returned: a Chat Completions model's
  reasoning has no signed thinking block to give back), ``context_management`` (its edits
  clear thinking blocks, which never exist here), ``output_config.effort``, ``metadata``
  (its ``user_id`` names a device), ``service_tier``, ``cache_control`` wherever it stands
  (prompt caching is the upstream's own: vLLM caches prefixes by itself), thinking blocks in
  earlier assistant turns, tools marked ``defer_loading`` (the API keeps them out of the
  model's context until a tool search loads them, and there is no tool search here), tools of
  Anthropic-defined types (``web_search_*``, ``bash_*``, ...: run by Anthropic's servers or
  described by schemas it alone holds), and any top-level field this module does not know.
- **Refused** (an HTTP 400 naming the field): ``mcp_servers`` and ``container`` (Anthropic's
  servers run those), document blocks, images inside a tool result (a Chat Completions tool
  message holds text), and content blocks of any other type.

A model's tool call whose arguments are not a JSON object reaches the program with an empty
``input`` (the Messages API has no other form for it); the tool then answers as it does to a
call without arguments. Images are passed on as image parts: a text-only upstream refuses
them, and its refusal reaches the program.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from interplay._plumbing import codec as _codec
from interplay.model.request import BadRequest
from interplay.model.responses import new_id, sse

#: Claude Code puts this header in the first system block (``x-anthropic-billing-header:
#: cc_version=...``): Anthropic's API reads it as a header, so it is not prompt text.
BILLING_HEADER = "x-anthropic-billing-header:"

_REFUSED_FIELDS = {
    "mcp_servers": "MCP servers in the request are run by Anthropic's API; give the seat's "
                   "tools through the program's own MCP config (the tool gateway)",
    "container": "containers are Anthropic's; this endpoint runs none",
}
_READ_FIELDS = frozenset({"model", "messages", "system", "max_tokens", "stream", "tools",
                          "tool_choice", "stop_sequences", "temperature", "top_p", "top_k",
                          "output_config"})

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                 "function_call": "tool_use", "content_filter": "refusal"}

#: The Anthropic error type of an HTTP status (the ``error.type`` a Messages client reads).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 408: "timeout_error",
               409: "conflict_error", 413: "request_too_large", 429: "rate_limit_error",
               500: "api_error", 502: "api_error", 503: "overloaded_error",
               504: "timeout_error", 529: "overloaded_error"}


def error_type(status: int) -> str:
    """The Anthropic error type for an HTTP ``status``."""
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(status: int, message: str) -> dict[str, Any]:
    """An error in the Messages API's shape."""
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


# -- request: Messages -> Chat Completions ------------------------------------------------------


def _text_blocks(value: Any, where: str) -> str:
    """A ``system`` value (a string or a list of text blocks) as one text; the billing header
    block is left out."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise BadRequest(f"{where} must be a string or a list of text blocks", where)
    texts = []
    for i, block in enumerate(value):
        if not isinstance(block, Mapping) or block.get("type") != "text" \
                or not isinstance(block.get("text"), str):
            raise BadRequest(f"{where}[{i}] must be a text block", where)
        if block["text"].startswith(BILLING_HEADER):
            continue
        texts.append(block["text"])
    return "\n\n".join(t for t in texts if t)


def _image_part(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise BadRequest(f"{where}.source must be an object", "messages")
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        url = f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise BadRequest(f"{where}: an image's source must be base64 data or a url "
                         "(files are Anthropic's)", "messages")
    return {"type": "image_url", "image_url": {"url": url}}


def _result_text(block: Mapping[str, Any], where: str) -> str:
    """A ``tool_result``'s content as the text of a Chat Completions tool message."""
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "image":
                raise BadRequest(f"{where}.content[{i}]: an image in a tool result cannot be "
                                 "passed to a Chat Completions model (a tool message holds "
                                 "text)", "messages")
            else:
                raise BadRequest(f"{where}.content[{i}] must be a text block", "messages")
        text = "\n\n".join(texts)
    else:
        raise BadRequest(f"{where}.content must be a string or a list of blocks", "messages")
    if not text and block.get("is_error") is True:
        return "error"
    return text


def _user(messages: list[dict[str, Any]], content: Any, where: str) -> None:
    if isinstance(content, str):
        messages.append({"role": "user", "content": content})
        return
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or a list of blocks", "messages")
    parts: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            parts.append({"type": "text", "text": _block_text(block, at)})
        elif kind == "image":
            parts.append(_image_part(block, at))
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                raise BadRequest(f"{at}: a tool_result needs its tool_use_id", "messages")
            # A Chat Completions tool message follows the assistant's calls directly, so the
            # results come before the user's own words of the same turn.
            results.append({"role": "tool", "tool_call_id": call_id,
                             "content": _result_text(block, at)})
        elif kind == "document":
            raise BadRequest(f"{at}: document blocks cannot be passed to a Chat Completions "
                             "model; send the document's text", "messages")
        else:
            raise BadRequest(f"{at}: content blocks of type {kind!r} are not supported here",
                             "messages")
    messages.extend(results)
    if parts:
        if all(p["type"] == "text" for p in parts):
            # Separate blocks (a reminder, then the prompt) stay apart: a blank line. A plain
            # string, since every Chat Completions upstream takes one.
            messages.append({"role": "user",
                             "content": "\n\n".join(p["text"] for p in parts if p["text"])})
        else:
            messages.append({"role": "user", "content": parts})


def _block_text(block: Mapping[str, Any], at: str) -> str:
    if not isinstance(text := block.get("text"), str):
        raise BadRequest(f"{at}.text must be a string", "messages")
    return text


def tool_arguments(value: Any) -> str:
    """A ``tool_use`` block's ``input`` as a Chat Completions call's ``arguments``: JSON as vLLM
    writes a parsed call's arguments (``json.dumps``, non-ASCII kept), so that a conversation
    sent back renders the call as the model's answer gave it."""
    return json.dumps({} if value is None else value, ensure_ascii=False)


def _assistant(messages: list[dict[str, Any]], content: Any, where: str) -> None:
    if isinstance(content, str):
        messages.append({"role": "assistant", "content": content})
        return
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or a list of blocks", "messages")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            texts.append(_block_text(block, at))
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise BadRequest(f"{at}: a tool_use needs an id and a name", "messages")
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"],
                                       "arguments": tool_arguments(block.get("input"))}})
        elif kind in ("thinking", "redacted_thinking"):
            continue  # never produced here; another model's thinking is not this one's
        else:
            raise BadRequest(f"{at}: content blocks of type {kind!r} are not supported here",
                             "messages")
    text = "".join(texts)
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls
                               else None}
    if calls:
        message["tool_calls"] = calls
    messages.append(message)


def chat_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Chat Completions ``messages`` of a Messages request (``system`` and
    ``messages``); BadRequest if they do not fit."""
    out: list[dict[str, Any]] = []
    if body.get("system") is not None:
        system = _text_blocks(body["system"], "system")
        if system:
            out.append({"role": "system", "content": system})
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'messages' must be a non-empty list", "messages")
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise BadRequest(f"{where} must be an object", "messages")
        role = message.get("role")
        if role == "user":
            _user(out, message.get("content"), where)
        elif role == "assistant":
            _assistant(out, message.get("content"), where)
        elif role == "system":
            text = _text_blocks(message.get("content"), f"{where}.content")
            out.append({"role": "system", "content": text})
        else:
            raise BadRequest(f"{where}.role must be user or assistant", "messages")
    return out


def chat_tools(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The request's custom tools as Chat Completions tools, and the names of those left
    out (deferred, or of an Anthropic-defined type)."""
    tools: list[dict[str, Any]] = []
    dropped: list[str] = []
    raw = body.get("tools")
    if raw is None:
        return tools, dropped
    if not isinstance(raw, list):
        raise BadRequest("'tools' must be a list", "tools")
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise BadRequest(f"tools[{i}] must be an object with a name", "tools")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            dropped.append(f"tools[{tool['name']}:{kind}]")
            continue
        if tool.get("defer_loading") is True:
            dropped.append(f"tools[{tool['name']}:defer_loading]")
            continue
        schema = tool.get("input_schema")
        if not isinstance(schema, Mapping):
            raise BadRequest(f"tools[{i}].input_schema must be an object", "tools")
        fn: dict[str, Any] = {"name": tool["name"]}
        if tool.get("description") is not None:
            fn["description"] = tool["description"]
        fn["parameters"] = dict(schema)
        if isinstance(tool.get("strict"), bool):
            fn["strict"] = tool["strict"]
        tools.append({"type": "function", "function": fn})
    return tools, dropped


def _tool_choice(choice: Any) -> tuple[Any, bool | None]:
    """``(Chat Completions tool_choice, parallel_tool_calls)`` for a Messages ``tool_choice``."""
    if not isinstance(choice, Mapping):
        raise BadRequest("'tool_choice' must be an object", "tool_choice")
    parallel = False if choice.get("disable_parallel_tool_use") is True else None
    kind = choice.get("type")
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", None
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise BadRequest("'tool_choice' must be auto, any, none, or a tool with its name",
                     "tool_choice")


def messages_to_chat(body: Any) -> tuple[dict[str, Any], list[str]]:
    """The Chat Completions body for a Messages request, and what was not forwarded (the
    names of fields and tools dropped by the rules above); BadRequest if it does not fit."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    for name, reason in _REFUSED_FIELDS.items():
        if body.get(name) is not None:
            raise BadRequest(f"'{name}' is not supported here: {reason}", name,
                             code="unsupported_parameter")
    out: dict[str, Any] = {"messages": chat_messages(body)}
    dropped = [k for k in body if k not in _READ_FIELDS and k not in _REFUSED_FIELDS]
    if body.get("model") is not None:
        out["model"] = body["model"]
    tools, left = chat_tools(body)
    dropped += left
    if tools:
        out["tools"] = tools
        if body.get("tool_choice") is not None:
            choice, parallel = _tool_choice(body["tool_choice"])
            out["tool_choice"] = choice
            if parallel is not None:
                out["parallel_tool_calls"] = parallel
    if body.get("max_tokens") is not None:
        out["max_tokens"] = body["max_tokens"]
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise BadRequest("'stop_sequences' must be a list of strings", "stop_sequences")
        if stops:
            out["stop"] = list(stops)
    for key in ("temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            out[key] = body[key]
    config = body.get("output_config")
    if isinstance(config, Mapping):
        fmt = config.get("format")
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            out["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "output", "schema": fmt.get("schema") or {}}}
        dropped += [f"output_config.{k}" for k in config if k != "format"]
    if body.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out, dropped


# -- chat.completion -> Message -----------------------------------------------------------------


def usage_of(usage: Any) -> dict[str, Any]:
    """A Chat Completions ``usage`` as Messages usage: prompt tokens the upstream read from its
    cache are ``cache_read_input_tokens``, the rest ``input_tokens`` (zeros when there is no
    usage)."""
    if not isinstance(usage, Mapping):
        return {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0}
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, Mapping) else 0
    cached = min(cached, prompt)
    return {"input_tokens": prompt - cached,
            "output_tokens": int(usage.get("completion_tokens") or 0),
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def _tool_input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, str):
        try:
            parsed = _codec.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _stop(choice: Mapping[str, Any], request: Mapping[str, Any],
          has_calls: bool) -> tuple[str, str | None]:
    """``(stop_reason, stop_sequence)`` of a Chat Completions choice."""
    if has_calls:
        return "tool_use", None
    reason = _STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn")
    if reason == "end_turn":
        # vLLM says which stop string ended the text (``stop_reason``); others do not, and
        # the end is then the model's own.
        matched = choice.get("stop_reason")
        stops = request.get("stop_sequences")
        if isinstance(matched, str) and isinstance(stops, list) and matched in stops:
            return "stop_sequence", matched
    return reason, None


def _content(message: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    text = message.get("content")
    if isinstance(text, list):
        text = "".join(str(p.get("text", "")) for p in text if isinstance(p, Mapping))
    if not text and isinstance(message.get("refusal"), str):
        text = message["refusal"]
    blocks = []
    for call in message.get("tool_calls") or ():
        if not isinstance(call, Mapping):
            continue
        fn = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": str(call.get("id") or new_id("toolu")),
                       "name": str(fn.get("name") or ""),
                       "input": _tool_input(fn.get("arguments"))})
    return str(text or ""), blocks


def chat_to_message(completion: Mapping[str, Any], request: Mapping[str, Any], *,
                    msg_id: str | None = None) -> dict[str, Any]:
    """The Messages ``message`` for a chat.completion answering ``request`` (a Messages
    body)."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    message = choice.get("message") if isinstance(choice.get("message"), Mapping) else {}
    text, calls = _content(message)
    content: list[dict[str, Any]] = []
    if text or not calls:
        content.append({"type": "text", "text": text})
    content += calls
    stop_reason, stop_sequence = _stop(choice, request, bool(calls))
    return {"id": msg_id or new_id("msg"), "type": "message", "role": "assistant",
            "model": str(request.get("model") or completion.get("model") or ""),
            "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": usage_of(completion.get("usage"))}


# -- SSE events ---------------------------------------------------------------------------------


def error_event(message: str, status: int = 500) -> bytes:
    """The SSE event that ends a stream with an error."""
    return sse(error_body(status, message))


class ChatToMessagesStream:
    """Turns a live stream of chat.completion chunks into Messages SSE events.

    Text deltas are forwarded as they arrive; tool calls are sent whole once the stream ends
    (their arguments are only known to be JSON then), each as one ``input_json_delta``.
    """

    def __init__(self, request: Mapping[str, Any], model: str) -> None:
        self.request = request
        self.model = str(request.get("model") or model)
        self.msg_id = new_id("msg")
        self.index = 0
        self.text_open = False
        self.any_text = False

    def start(self) -> list[bytes]:
        message = {"id": self.msg_id, "type": "message", "role": "assistant",
                   "model": self.model, "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": usage_of(None)}
        return [sse({"type": "message_start", "message": message})]

    def _text(self, delta: str) -> list[bytes]:
        out = []
        if not self.text_open:
            self.text_open = self.any_text = True
            out.append(sse({"type": "content_block_start", "index": self.index,
                            "content_block": {"type": "text", "text": ""}}))
        out.append(sse({"type": "content_block_delta", "index": self.index,
                        "delta": {"type": "text_delta", "text": delta}}))
        return out

    def _close_text(self) -> list[bytes]:
        if not self.text_open:
            return []
        self.text_open = False
        self.index += 1
        return [sse({"type": "content_block_stop", "index": self.index - 1})]

    def _tool_use(self, block: Mapping[str, Any]) -> list[bytes]:
        i = self.index
        self.index += 1
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        return [sse({"type": "content_block_start", "index": i, "content_block": start}),
                sse({"type": "content_block_delta", "index": i,
                     "delta": {"type": "input_json_delta",
                               "partial_json": _codec.dumps(block["input"]).decode()}}),
                sse({"type": "content_block_stop", "index": i})]

    def _end(self, stop_reason: str, stop_sequence: Any,
             usage: Mapping[str, Any]) -> list[bytes]:
        return [sse({"type": "message_delta",
                     "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                     "usage": dict(usage)}),
                sse({"type": "message_stop"})]

    def chunk(self, chunk: Mapping[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        for ch in chunk.get("choices") or ():
            if ch.get("index", 0) != 0:
                continue
            delta = (ch.get("delta") or {}).get("content")
            if delta:
                out += self._text(delta)
        return out

    def finish(self, completion: Mapping[str, Any]) -> tuple[list[bytes], dict[str, Any]]:
        """The closing events and the ``message`` built from the reassembled completion."""
        message = chat_to_message(completion, self.request, msg_id=self.msg_id)
        out: list[bytes] = []
        blocks = message["content"]
        if blocks and blocks[0]["type"] == "text":
            text = blocks[0]["text"]
            if text and not self.any_text:  # the upstream answered without streaming it
                out += self._text(text)
            elif not text and not self.any_text and len(blocks) == 1:
                # An empty answer is still one (empty) text block, as the API gives it.
                out += self._text("")
        out += self._close_text()
        for block in blocks:
            if block["type"] == "tool_use":
                out += self._tool_use(block)
        out += self._end(message["stop_reason"], message["stop_sequence"], message["usage"])
        return out, message

    def failed(self, message: str, code: str = "server_error") -> bytes:
        """The event that ends this stream with an error (``code`` is interplay's; the
        event's type follows from it)."""
        status = {"timeout": 504, "rate_limited": 429, "trace_closed": 410,
                  "client_disconnected": 499, "server_stopping": 503}.get(code, 500)
        return error_event(message, status)


def count_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Chat Completions ``messages`` and ``tools`` whose prompt a ``count_tokens`` request
    asks the size of."""
    out: dict[str, Any] = {"messages": chat_messages(body)}
    tools, _ = chat_tools(body)
    if tools:
        out["tools"] = tools
    return out

