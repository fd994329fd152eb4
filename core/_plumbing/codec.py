"""JSON as interplay writes and reads it: one codec for requests, responses, SSE events,
server answers and records.

orjson does the work; what it refuses goes through the standard library: integers past 64 bits
and lone surrogates (a model may answer "\\ud800", which UTF-8 cannot hold: it is written as
the JSON escape it came as) when writing, NaN and Infinity tokens (which some servers put in
logprobs) when reading. The two write the same compact UTF-8 JSON, save NaN and the
infinities, which are not JSON: orjson writes them as null.

Pure functions: no I/O, no logging.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

#: JSON written out as it is, unchecked, inside what :func:`dumps` writes.
Fragment = orjson.Fragment

# One standard-library encoder: json.dumps with options builds a new one per call.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return _encode(value).encode("utf-8", "backslashreplace")


def dumps_kept(value: Any) -> bytes:
    """:func:`dumps` for bytes that are kept (a message's JSON, a response): orjson's result
    holds a 4 KB buffer whatever its length, so a kept one is copied to its own size."""
    return bytes(memoryview(dumps(value)))


def loads(data: bytes | str) -> Any:
    """Parse JSON (bytes or text); raises ValueError when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
