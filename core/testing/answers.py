"""A scripted reply in the shapes the two APIs answer in: a Chat Completions body
(:func:`completion`: the text and tool calls, the finish reason, usage counted in words), its
stream of chunks (:func:`chat_chunks`, the text word by word and each tool call's arguments in
two halves), and a Responses body (:func:`response`, made from the Chat Completions one, or the
reply's own output items).

This module owns the answers' shapes; the ids and logprobs put on them are
:mod:`interplay.testing.tokens`', and serving them (with the script's faults) is
:mod:`interplay.testing.scripted`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from interplay.model import responses as rs
from interplay.testing.script import ScriptedReply

_TEXT_KEYS = ("content", "text", "output", "arguments")


def words(value: Any) -> int:
    """The words of a request's or an answer's text (what usage counts): of a message, only
    the text it carries, not its role or ids."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list | tuple):
        return sum(map(words, value))
    if isinstance(value, Mapping):
        total = 0
        for key in _TEXT_KEYS:
            item = value.get(key)
            if item is not None:
                total += words(item)
        return total
    return 0


def prompt_words(body: Mapping[str, Any], api: str) -> int:
    """A request's prompt, counted in words."""
    return words(body.get("messages") if api == "chat.completions" else body.get("input"))


def completion(body: Mapping[str, Any], reply: ScriptedReply, prompt_tokens: int, *,
               number: int, model: str) -> dict[str, Any]:
    """``reply`` as the ``number``-th Chat Completions answer of the server (which names its
    id and tool calls' ids); ``model`` is the model named when the request names none."""
    calls = [{"id": c.call_id or f"call_{number}_{i}", "type": "function",
              "function": {"name": c.name, "arguments": c.arguments_json()}}
             for i, c in enumerate(reply.tool_calls)]
    text = reply.content
    completion_tokens = words(text or "") + sum(words(c.arguments_json()) for c in
                                                reply.tool_calls)
    message: dict[str, Any] = {"role": "assistant",
                               "content": text if text is not None or not calls else None}
    if message["content"] is None and not calls:
        message["content"] = ""
    if calls:
        message["tool_calls"] = calls
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    return {"id": f"chatcmpl-scripted-{number}", "object": "chat.completion",
            "created": int(time.time()), "model": str(body.get("model") or model),
            "choices": [{"index": 0, "message": message, "finish_reason": finish,
                         "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def chat_chunks(completion: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chunks a streamed ``completion`` is sent in: the role, each word of its text, each
    tool call in two halves, then the finish reason (the usage chunk is
    :func:`usage_chunk`)."""
    base = _chunk_base(completion)
    msg = completion["choices"][0]["message"]
    chunks: list[dict[str, Any]] = [
        dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                             "finish_reason": None}])]
    parts = (msg.get("content") or "").split(" ")
    for i, w in enumerate(parts if msg.get("content") else ()):
        piece = w if i == 0 else " " + w
        chunks.append(dict(base, choices=[{"index": 0, "delta": {"content": piece},
                                           "finish_reason": None}]))
    for i, call in enumerate(msg.get("tool_calls") or ()):
        args = call["function"]["arguments"]
        half = len(args) // 2
        chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": call["id"], "type": "function",
             "function": {"name": call["function"]["name"], "arguments": args[:half]}}]},
            "finish_reason": None}]))
        chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [
            {"index": i, "function": {"arguments": args[half:]}}]}, "finish_reason": None}]))
    chunks.append(dict(base, choices=[{"index": 0, "delta": {},
                                       "finish_reason": completion["choices"][0]
                                       ["finish_reason"]}]))
    return chunks


def usage_chunk(completion: Mapping[str, Any]) -> dict[str, Any]:
    """The last chunk of a stream whose request asked for usage (``include_usage``)."""
    return dict(_chunk_base(completion), choices=[], usage=completion["usage"])


def _chunk_base(completion: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": completion["id"], "object": "chat.completion.chunk",
            "created": completion["created"], "model": completion["model"]}


def response(completion: Mapping[str, Any], body: Mapping[str, Any],
             reply: ScriptedReply) -> dict[str, Any]:
    """``completion`` as a Responses answer to ``body``; a reply with output items of its own
    answers them as they are."""
    out = rs.chat_to_response(completion, body)
    if reply.output is not None:
        out["output"] = [dict(i) for i in reply.output]
    return out
