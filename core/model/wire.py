"""What model calls carry over the wire, read into records: a whole Chat Completions body, a
stream of chunks folded into one, the data lines of server-sent events, usage, and the
messages of a recorded call (:func:`assistant_message`, :func:`request_messages`, for Chat
Completions, Responses and Messages alike).

Pure functions and one small stateful folder; no I/O, no logging.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from interplay._plumbing import codec as _codec
from interplay._plumbing.ids import new_id
from interplay.errors import ErrorType, InterplayError
from interplay.model import messages as ms
from interplay.model import responses as rs
from interplay.model.retries import Failure
from interplay.values.records import Message, ModelCall, ToolCall, Usage


async def aiter_sse_data(chunks: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of an SSE byte stream (``chunks`` is closed with it)."""
    buf = b""
    async with contextlib.aclosing(chunks):
        async for piece in chunks:
            buf += piece
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line, buf = buf[:nl].rstrip(b"\r"), buf[nl + 1:]
                if line.startswith(b"data:"):
                    yield line[5:].strip()


def parse_body(data: bytes, status: int, list_key: str, what: str) -> dict[str, Any]:
    """A whole (non-streamed) response body: a JSON object with a list under ``list_key``
    (``choices`` for Chat Completions, ``output`` for Responses); else a ``bad_response``."""
    try:
        parsed = _codec.loads(data)
    except ValueError:
        raise Failure(ErrorType.BAD_RESPONSE, "response body is not JSON", status) from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get(list_key), list):
        raise Failure(ErrorType.BAD_RESPONSE, f"response is not {what}", status)
    return parsed


def json_object(data: bytes | None) -> bytes | None:
    """``data`` when it is a JSON object (an error answer worth recording), else None."""
    if not data:
        return None
    try:
        return data if isinstance(_codec.loads(data), dict) else None
    except ValueError:
        return None


def _not_chunk(where: str, status: int) -> Failure:
    return Failure(ErrorType.BAD_RESPONSE,
                   f"stream chunk is not a chat.completion.chunk ({where})",
                   status)


def _fits(value: Any, kind: type | tuple[type, ...]) -> bool:
    """``value`` is absent (None) or of ``kind``."""
    return value is None or isinstance(value, kind)


def check_chunk(chunk: Mapping[str, Any], status: int) -> None:
    """Raise a ``bad_response`` Failure unless ``chunk`` (of an answer with ``status``) has the
    shape of a chat.completion.chunk in every field :class:`StreamAssembler` reads: the
    upstream's fault, as a whole body of the wrong shape is."""
    if "choices" not in chunk and "usage" not in chunk:
        raise _not_chunk("neither choices nor usage", status)
    if not _fits(chunk.get("usage"), Mapping):
        raise _not_chunk("usage", status)
    choices = chunk.get("choices")
    if not _fits(choices, list):
        raise _not_chunk("choices", status)
    for ch in choices or ():
        if not isinstance(ch, Mapping) or type(ch.get("index", 0)) is not int:
            raise _not_chunk("choices[]", status)
        delta = ch.get("delta")
        if not (_fits(delta, Mapping) and all(_fits((delta or {}).get(k), str)
                                              for k in ("role", "content", "refusal"))):
            raise _not_chunk("choices[].delta", status)
        calls = (delta or {}).get("tool_calls")
        if not _fits(calls, list):
            raise _not_chunk("choices[].delta.tool_calls", status)
        for tc in calls or ():
            fn = tc.get("function") if isinstance(tc, Mapping) else None
            if not (isinstance(tc, Mapping) and type(tc.get("index", 0)) is int
                    and _fits(tc.get("id"), str) and _fits(fn, Mapping)
                    and all(_fits((fn or {}).get(k), str) for k in ("name", "arguments"))):
                raise _not_chunk("choices[].delta.tool_calls[]", status)


class StreamAssembler:
    """Folds chat.completion.chunk dicts (each passed by :func:`check_chunk`) into one
    chat.completion dict."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.system_fingerprint: str | None = None
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.finished = False

    def add(self, chunk: Mapping[str, Any]) -> None:
        if self.id is None:
            self.id = chunk.get("id")
            self.model = chunk.get("model")
            self.created = chunk.get("created")
            self.system_fingerprint = chunk.get("system_fingerprint")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for ch in chunk.get("choices") or ():
            idx = ch.get("index", 0)
            acc = self.choices.get(idx)
            if acc is None:
                acc = self.choices[idx] = {"role": "assistant", "text": [], "calls": {},
                                           "finish_reason": None, "refusal": None}
            delta = ch.get("delta") or {}
            if delta.get("role"):
                acc["role"] = delta["role"]
            if delta.get("content"):
                acc["text"].append(delta["content"])
            if delta.get("refusal"):
                acc["refusal"] = (acc["refusal"] or "") + delta["refusal"]
            for tc in delta.get("tool_calls") or ():
                i = tc.get("index", len(acc["calls"]))
                call = acc["calls"].get(i)
                if call is None:
                    call = acc["calls"][i] = {"id": "", "type": "function",
                                              "function": {"name": "", "arguments": ""}}
                if tc.get("id"):
                    call["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    call["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    call["function"]["arguments"] += fn["arguments"]
            if ch.get("finish_reason"):
                acc["finish_reason"] = ch["finish_reason"]
                self.finished = True

    def result(self) -> dict[str, Any]:
        choices = []
        for idx in sorted(self.choices):
            acc = self.choices[idx]
            message: dict[str, Any] = {"role": acc["role"],
                                       "content": "".join(acc["text"]) if acc["text"] else None}
            if acc["refusal"] is not None:
                message["refusal"] = acc["refusal"]
            if acc["calls"]:
                message["tool_calls"] = [acc["calls"][i] for i in sorted(acc["calls"])]
            elif message["content"] is None:
                message["content"] = ""
            choices.append({"index": idx, "message": message,
                            "finish_reason": acc["finish_reason"], "logprobs": None})
        out: dict[str, Any] = {"id": self.id or f"chatcmpl-{new_id(12)}",
                               "object": "chat.completion", "created": self.created or
                               int(time.time()), "model": self.model or "", "choices": choices}
        if self.system_fingerprint:
            out["system_fingerprint"] = self.system_fingerprint
        if self.usage is not None:
            out["usage"] = self.usage
        return out


def chat_usage(data: Any) -> Usage | None:
    """A Chat Completions ``usage`` object as Usage (None when it is missing or malformed)."""
    if not isinstance(data, Mapping):
        return None
    try:
        p = int(data.get("prompt_tokens") or 0)
        c = int(data.get("completion_tokens") or 0)
        t = int(data.get("total_tokens") or (p + c))
    except (TypeError, ValueError):
        return None
    return Usage(prompt_tokens=p, completion_tokens=c, total_tokens=t)


def assistant_message(call: ModelCall) -> Message | None:
    """The assistant Message a recorded call answered (tool calls as ToolCall), or None: a
    Chat Completions ``choices[0].message``, a Responses object's output items, or a Messages
    ``message``'s content blocks."""
    raw = call.response
    known = call._message
    if known is not None and known[0] is raw:
        return known[1]
    if raw is None:
        return None
    try:
        response = _codec.loads(raw)
    except ValueError:
        return None
    if isinstance(response, dict) and "output" in response and "choices" not in response:
        message: Message | None = _responses_message(response)
    elif isinstance(response, dict) and response.get("type") == "message":
        message = _messages_message(response)
    else:
        message = chat_message(response)
    call._message = (raw, message)
    return message


def request_messages(call: ModelCall) -> list[Message]:
    """A recorded request's conversation as Messages (Chat Completions ``messages``, a
    Responses ``input``, or a Messages request's ``system`` and ``messages``); what cannot be
    read as a message is left out."""
    body: Any = call.request or {}
    if call.api == "messages":
        try:
            body = {"messages": ms.chat_messages(body)}
        except ms.BadRequest:
            return []
    elif "messages" not in body and "input" in body:
        try:
            body = rs.responses_to_chat(body)
        except rs.BadRequest:
            return []
    out = []
    for raw in body.get("messages") or ():
        with contextlib.suppress(InterplayError, TypeError, ValueError):
            out.append(Message.from_openai(raw))
    return out


def request_tool_names(call: ModelCall) -> list[str]:
    """The names of the function tools a recorded request offered, as a Chat Completions model
    sees them (a Responses namespace's tools as ``<namespace>__<name>``; hosted and
    Anthropic-defined tools, which no Chat Completions model is sent, left out)."""
    body: Any = call.request or {}
    raw = body.get("tools") if isinstance(body, Mapping) else None
    names: list[str] = []
    for tool in raw if isinstance(raw, list) else ():
        if not isinstance(tool, Mapping):
            continue
        kind, name = tool.get("type"), tool.get("name")
        if call.api == "messages":
            if kind in (None, "custom") and isinstance(name, str) \
                    and tool.get("defer_loading") is not True:
                names.append(name)
        elif kind == "namespace" and isinstance(tool.get("tools"), list):
            names += [rs.qualified_name(name, m["name"]) for m in tool["tools"]
                      if isinstance(m, Mapping) and m.get("type") == "function"
                      and isinstance(m.get("name"), str)]
        elif kind == "function":
            fn = tool.get("function", tool)  # Chat Completions nests it; Responses does not
            if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
                names.append(fn["name"])
    return names


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else _codec.dumps({} if value is None
                                                              else value).decode()


def _responses_message(resp: Mapping[str, Any]) -> Message:
    texts: list[str] = []
    tool_calls: list[ToolCall] = []
    for item in resp.get("output") or ():
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "message":
            texts += [str(p.get("text") or "") for p in item.get("content") or ()
                      if isinstance(p, Mapping) and p.get("type") == "output_text"]
        elif item.get("type") == "function_call":
            tool_calls.append(ToolCall(id=str(item.get("call_id") or ""),
                                       name=rs.qualified_name(item.get("namespace"),
                                                              str(item.get("name") or "")),
                                       arguments=_arguments(item.get("arguments"))))
    return Message("assistant", "".join(texts) if texts or not tool_calls else None,
                   tool_calls=tuple(tool_calls))


def _messages_message(resp: Mapping[str, Any]) -> Message:
    texts: list[str] = []
    tool_calls: list[ToolCall] = []
    for block in resp.get("content") or ():
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            tool_calls.append(ToolCall(id=str(block.get("id") or ""),
                                       name=str(block.get("name") or ""),
                                       arguments=ms.tool_arguments(block.get("input"))))
    text = "".join(texts)
    return Message("assistant", text if text or not tool_calls else None,
                   tool_calls=tuple(tool_calls))


def chat_message(resp: Any) -> Message | None:
    """The assistant Message of a chat.completion dict, or None when it has none."""
    if not isinstance(resp, Mapping):
        return None
    choices = resp.get("choices")
    if not choices or not isinstance(choices[0], Mapping):
        return None
    msg = choices[0].get("message")
    if not isinstance(msg, Mapping):
        return None
    calls = []
    for raw in msg.get("tool_calls") or ():
        fn = raw.get("function") or {}
        calls.append(ToolCall(id=str(raw.get("id") or ""), name=str(fn.get("name") or ""),
                              arguments=_arguments(fn.get("arguments"))))
    content = msg.get("content")
    if content is not None and not isinstance(content, str | list):
        content = str(content)
    return Message(role="assistant", content=content, tool_calls=tuple(calls))
