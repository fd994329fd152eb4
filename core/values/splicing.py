"""Records as JSON with the JSON they already hold spliced in: the fast way a trace or an
episode becomes its line in episodes.jsonl (:func:`to_json_bytes`), or the plain data a writer
that splits a long line first encodes (:func:`spliced`).

A chat resends its conversation in every request, so an episode holds each message many times
over, and every response came as JSON bytes: each message's wire JSON (made once, when the
message first went on the wire) and each response as it came go into the line as they are,
without being parsed and encoded again. What comes out reads back the same as
:func:`interplay.values.records.to_json`'s (the round-trip tests hold the two to one form).

This module owns that encoding; it reads what a record already holds as JSON and must not make
any of it, change a record, or do I/O.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from interplay._plumbing import codec as _codec
from interplay.values.records import (
    Episode,
    Message,
    ModelCall,
    Tokens,
    Trace,
    listed,
    make_converter,
    message_to_openai,
    to_json,
)

_Fragment = _codec.Fragment


class _Splicing(threading.local):
    known: dict[int, bytes] | None = None


_splicing = _Splicing()


# A message's wire JSON is read where it was made (``Message.wire_json``, when the message went
# on the wire), never made here: a message that never went out is encoded the plain way.
def _splice_message(m: Message) -> Any:
    encoded = m._wire_json
    return _Fragment(encoded) if encoded is not None else message_to_openai(m)


def _splice_messages(messages: list[Message]) -> list[Any]:
    return [_Fragment(m._wire_json) if m._wire_json is not None else message_to_openai(m)
            for m in messages]


def _splice_request(request: Any) -> Any:
    known = _splicing.known
    messages = request.get("messages") if isinstance(request, dict) else None
    if not known or not isinstance(messages, list) or not messages:
        return request
    try:
        joined = b",".join(map(known.__getitem__, map(id, messages)))
    except KeyError:  # a message no trace holds: encode the request the plain way
        return request
    return {**request, "messages": _Fragment(b"[" + joined + b"]")}


def _splice_response(value: bytes | None) -> Any:
    # Only bytes that are one UTF-8 JSON object on one line go in as they are: a pretty-printed
    # response would break the line, and JSON in UTF-16 is legal but is not UTF-8.
    # find() rather than `in`: a bytes `in` first tries its operand as an integer.
    if (isinstance(value, bytes) and value[:1] == b"{" and value[1:2] != b"\x00"
            and value.find(b"\n") < 0 and value.find(b"\r") < 0):
        return _Fragment(value)
    return None if value is None else _codec.loads(value)


def _splice_call(c: ModelCall) -> dict[str, Any]:
    # Written out rather than generated: an episode holds a call per turn, and cattrs' generic
    # handling of each optional field would dominate its line. The round-trip tests hold it to
    # the converter's own form.
    usage = c.usage
    return {"id": c.id, "api": c.api, "model": c.model, "request": _splice_request(c.request),
            "response": _splice_response(c.response),
            "usage": None if usage is None else {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens},
            "started_at": c.started_at, "latency_s": c.latency_s,
            "first_token_s": c.first_token_s, "finish_reason": c.finish_reason,
            "streamed": c.streamed, "attempts": c.attempts, "status": c.status,
            "error": c.error, "error_type": c.error_type,
            "tokens": None if c.tokens is None else _splice_tokens(c.tokens),
            "caller": c.caller}


def _splice_tokens(t: Tokens) -> dict[str, Any]:
    return {"prompt_ids": listed(t.prompt_ids), "completion_ids": listed(t.completion_ids),
            "logprobs": listed(t.logprobs), "missing": t.missing, "warnings": t.warnings,
            "diverged_at": t.diverged_at}


def _splice_calls(calls: list[ModelCall]) -> list[dict[str, Any]]:
    return [_splice_call(c) for c in calls]


@functools.cache
def _splicing_converter() -> cattrs.Converter:
    conv = make_converter()
    conv.register_unstructure_hook(Message, _splice_message)
    conv.register_unstructure_hook(ModelCall, _splice_call)
    # A trace's messages and calls in one call each rather than one hook call per item.
    conv.register_unstructure_hook(Trace, make_dict_unstructure_fn(
        Trace, conv, messages=override(unstruct_hook=_splice_messages),
        model_calls=override(unstruct_hook=_splice_calls)))
    return conv


def spliced(record: Trace | Episode) -> Any:
    """A trace or an episode as plain data for :func:`interplay._plumbing.codec.dumps`, holding the
    JSON it already has as it is (each message's wire JSON, each response as it came): what
    :func:`to_json_bytes` writes, for a writer that splits it first."""
    traces = record.traces if isinstance(record, Episode) else [record]
    known = {id(m._wire): m._wire_json for t in traces for m in t.messages
             if m._wire is not None and m._wire_json is not None}
    _splicing.known = known
    try:
        return _splicing_converter().unstructure(record)
    finally:
        _splicing.known = None


def to_json_bytes(record: Trace | Episode) -> bytes:
    """:func:`to_json` of a trace or an episode, as UTF-8, made without parsing and encoding
    again the JSON it already holds: each message's wire JSON (a chat resends its conversation
    in every request, so an episode holds each message many times over) and each response as
    it came. The result reads back the same as :func:`to_json`'s."""
    data = spliced(record)
    try:
        return _codec.dumps(data)
    except TypeError:
        # Something orjson refuses (an integer past 64 bits in an env's results): the plain
        # way, which hands it to the standard library.
        return to_json(record).encode()
