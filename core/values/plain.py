"""A record's JSON read defensively: a field of an unexpected shape is an empty mapping or
sequence, or is shown as text, never a crash (a results folder may come from an older
interplay, a plugin, or a hand). What the typed reading of an episode
(:mod:`interplay.run.recorded`) is made with, and what the pages read a run's config and
summary with.

This module owns only reading values; it must not write markup or read a file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def as_map(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def as_seq(value: Any) -> Sequence[Any]:
    """``value`` if it is a list or tuple, else an empty sequence."""
    return value if isinstance(value, list | tuple) else ()


def as_text(value: Any) -> str:
    """``value`` as text: a string as it is, None as nothing, anything else as JSON."""
    return "" if value is None else value if isinstance(value, str) else as_json(value)


def as_json(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON for a person (non-ASCII kept; what JSON cannot hold, as its repr)."""
    return json.dumps(value, ensure_ascii=False, default=repr, indent=indent)
