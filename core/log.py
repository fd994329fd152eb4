"""Logging: structlog configuration (for the CLI only) and the guard that keeps user data out.

Library code calls ``structlog.get_logger("interplay.<area>")`` and logs namespaced events with
keys: names, ids, counts, lengths, times. :func:`configure` is called by the CLI and nowhere
else. Whatever a caller passes, :func:`redact` lets through only values that cannot carry
message text, tool arguments or user data: numbers, booleans, and strings under keys known to
hold names and identifiers. Any other string becomes ``<redacted len=N>``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

#: Keys whose string values are names, ids or enumerations, never user text.
SAFE_KEYS = frozenset({
    "event", "level", "logger", "timestamp", "log_level",
    "agent", "seat", "env", "harness", "model", "plugin", "package", "version", "hook",
    "kind", "name", "step", "verifier", "user_sim", "tool", "api", "route", "method",
    "stop_condition", "error_type", "finish_reason", "status", "phase", "state",
    "url", "base_url", "host", "path", "output", "config", "format", "reason_code",
})
#: Key suffixes that mark ids and enumerations.
SAFE_SUFFIXES = ("_id", "_ids", "_name", "_type", "_kind", "_path", "_url")


def _safe_key(key: str) -> bool:
    return key in SAFE_KEYS or key.endswith(SAFE_SUFFIXES)


def _scrub(key: str, value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if _safe_key(key) else f"<redacted len={len(value)}>"
    if isinstance(value, list | tuple | set | frozenset):
        if _safe_key(key) and all(isinstance(v, str | int | float | bool) for v in value):
            return list(value)
        return f"<redacted items={len(value)}>"
    if isinstance(value, dict):
        return f"<redacted keys={len(value)}>"
    return f"<redacted {type(value).__name__}>"


def redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: the guard. Tracebacks are dropped unless logging is at debug."""
    for key in list(event_dict):
        if key in ("exc_info", "stack_info", "_record", "_from_structlog"):
            continue
        event_dict[key] = _scrub(key, event_dict[key])
    return event_dict


def configure(*, fmt: str = "console", level: str = "warning",
              stream: TextIO | None = None) -> None:
    """Configure structlog for the process. Called by the CLI, never by library code."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        from interplay.errors import InterplayError

        raise InterplayError(
            f"--log-level: expected one of debug, info, warning, error; got {level!r}"
        )
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    elif fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    else:
        from interplay.errors import InterplayError

        raise InterplayError(f"--log-format: expected console or json; got {fmt!r}")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
