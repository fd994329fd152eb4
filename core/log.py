"""Logging: the loggers library code logs through, structlog configuration (for the CLI only)
and the guard that keeps user data out.

Library code calls :func:`get_logger` (``get_logger("interplay.<area>")``) and logs namespaced
events with keys: names, ids, counts, lengths, times. Once structlog is configured (by the
command, or by a host application for itself) the events go through that configuration; until
then they go to the standard library's ``logging`` under the logger's name, so a library's
host decides, and with no logging set up only warnings and above reach stderr, never stdout.
:func:`configure` is called by the CLI and nowhere else.

Message text stays out of the log because interplay's log calls never pass it: they pass
names, ids, counts, lengths, times, package names and error types. The guard,
:func:`redact`, is the second line: whatever a caller passes, it lets through only values that
cannot carry message text, tool arguments or user data: numbers, booleans, strings under keys
known to hold names and identifiers, text the calling code vouches for (:class:`Verbatim`: a
plugin's import error, say), and an event that is a namespaced name
(``"interception.request"``; an event with spaces or %-formatted text is user text as far as
the guard knows). Any other string becomes ``<redacted len=N>``. URLs and paths are kept
without their credentials: userinfo, query string and fragment are dropped and a trace's
secret segment (``/t/<secret>/``) is masked. What is kept is bounded
(:mod:`interplay._bounded`: a string past 256 characters keeps its head and its length, a
list its first 20 items and a count of the rest), so no value a client chose (a key name, a tool
name, a call id) can make a line long; in console format, characters a terminal would act on (escape
sequences, other controls, a newline) are shown escaped (``\\x1b``), never written raw. Tracebacks
are dropped (their type is kept) unless the level is debug. Records from the standard library's
``logging`` (httpx, uvicorn, ...) go through the same guard, so no log line on the process's
stream bypasses it; the servers' own lines (:data:`SERVER_LOGGERS`: uvicorn's status lines and
protocol errors, the MCP SDK's server lines, which never hold a request's bytes) keep their
text, their arguments redacted unless numbers.
"""

from __future__ import annotations

import itertools
import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from interplay._bounded import MAX_NAMES, bounded

#: Keys whose string values are names, ids or enumerations, never user text.
SAFE_KEYS = frozenset({
    "event", "level", "logger", "timestamp", "log_level",
    "agent", "seat", "env", "harness", "model", "plugin", "package", "version", "hook",
    "kind", "name", "step", "verifier", "user_sim", "tool", "api", "route", "method",
    "stop_condition", "error_type", "finish_reason", "phase",
    "host", "format", "reason_code", "packages",
})
#: Keys whose string values are URLs or paths: kept, but scrubbed by :func:`scrub_location`.
LOCATION_KEYS = frozenset({"url", "base_url", "path"})
#: Key suffixes that mark ids and enumerations.
SAFE_SUFFIXES = ("_id", "_ids", "_name", "_names", "_type", "_kind")
#: Key suffixes that mark URLs and paths.
LOCATION_SUFFIXES = ("_path", "_url")

#: A trace route's secret path segment.
_TRACE_SECRET = re.compile(r"/t/[^/?#]+")


def _safe_key(key: str) -> bool:
    return key in SAFE_KEYS or key.endswith(SAFE_SUFFIXES)


def _location_key(key: str) -> bool:
    return key in LOCATION_KEYS or key.endswith(LOCATION_SUFFIXES)


def scrub_location(value: str) -> str:
    """A URL or path without what can carry a credential: userinfo (``user:pw@``), query string,
    fragment, and a trace route's secret segment (``/t/<secret>/`` becomes ``/t/<redacted>/``)."""
    text = value.split("#", 1)[0].split("?", 1)[0]
    scheme, sep, rest = text.partition("://")
    if sep:
        authority, slash, tail = rest.partition("/")
        authority = authority.rpartition("@")[2]
        text = f"{scheme}://{authority}{slash}{tail}"
    return _TRACE_SECRET.sub("/t/<redacted>", text)


def _scrub_str(key: str, value: str) -> str:
    if _safe_key(key):
        return bounded(value)
    if _location_key(key):
        return bounded(scrub_location(value))
    return f"<redacted len={len(value)}>"


class Verbatim(str):
    """Text a log call vouches holds no message text, tool arguments or user data (a plugin's
    import error, a program's name): let through as it is, under any key."""

    __slots__ = ()


#: Loggers of the servers interplay runs whose own lines are let through with their text:
#: uvicorn's (``uvicorn.error`` is its main logger despite the name; its access log, which
#: holds request paths, is off and stays redacted), and those of the ``mcp`` SDK's server that
#: the tool gateway runs (its transport, session manager, Host/Origin checks, low-level server,
#: request runner and JSON-RPC dispatcher: they name what happened to a request, never what
#: it carried).
SERVER_LOGGERS = frozenset({
    "uvicorn", "uvicorn.error",
    "mcp.server.streamable_http", "mcp.server.streamable_http_manager",
    "mcp.server.transport_security", "mcp.server.lowlevel.server",
    "mcp.server.runner", "mcp.shared.jsonrpc_dispatcher",
})


def _server_line(record: logging.LogRecord) -> str | None:
    """A server's own line: its format string, with each argument kept only if a number."""
    if record.name not in SERVER_LOGGERS or not isinstance(record.msg, str):
        return None
    args = record.args if isinstance(record.args, tuple) else ()
    if not args:
        return record.msg
    shown = tuple(a if isinstance(a, int | float) and not isinstance(a, bool)
                  else _scrub("text", a) for a in args)
    try:
        return record.msg % shown
    except (TypeError, ValueError):
        return record.msg


def _scrub(key: str, value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, Verbatim):
        return str(value)
    if isinstance(value, str):
        return _scrub_str(key, value)
    if isinstance(value, list | tuple | set | frozenset):
        if ((_safe_key(key) or _location_key(key))
                and all(isinstance(v, str | int | float | bool) for v in value)):
            # One more item than the bound is let through: the count that ends a list
            # already bounded (interplay._bounded.bounded_names).
            shown = len(value) if len(value) <= MAX_NAMES + 1 else MAX_NAMES
            kept = [_scrub_str(key, v) if isinstance(v, str) else v
                    for v in itertools.islice(value, shown)]
            if len(value) > shown:
                kept.append(f"…[+{len(value) - shown} more]")
            return kept
        return f"<redacted items={len(value)}>"
    if isinstance(value, dict):
        return f"<redacted keys={len(value)}>"
    return f"<redacted {type(value).__name__}>"


#: A namespaced event name: what library code passes as the event. Anything else is redacted.
_EVENT = re.compile(r"[A-Za-z0-9_.:\-]{1,120}")
_META_KEYS = ("_record", "_from_structlog")
_TRACEBACK_KEYS = ("exc_info", "stack_info")


class Redactor:
    """The guard, as a structlog processor. ``keep_tracebacks`` is for debug level only."""

    def __init__(self, *, keep_tracebacks: bool = False) -> None:
        self.keep_tracebacks = keep_tracebacks

    def __call__(self, _: Any, __: str,
                 event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key in list(event_dict):
            if key in _META_KEYS:
                continue
            if key in _TRACEBACK_KEYS:
                if not self.keep_tracebacks:
                    _drop_traceback(event_dict, key)
                continue
            value = event_dict[key]
            if key == "event":
                if not (isinstance(value, str) and _EVENT.fullmatch(value)):
                    record = event_dict.get("_record")
                    line = None
                    if record is not None and not event_dict.get("_from_structlog"):
                        line = _server_line(record)
                    event_dict[key] = _scrub("text", value) if line is None else line
                continue
            event_dict[key] = _scrub(key, value)
        return event_dict


def _drop_traceback(event_dict: MutableMapping[str, Any], key: str) -> None:
    value = event_dict.pop(key)
    if key != "exc_info" or not value:
        return
    exc = value
    if value is True:
        exc = sys.exc_info()[1]
    elif isinstance(value, tuple) and len(value) == 3:
        exc = value[1]
    if isinstance(exc, BaseException):
        event_dict.setdefault("error_type", type(exc).__name__)


#: The guard with tracebacks dropped: the processor for every level above debug.
redact = Redactor()


def _shown(text: str) -> str:
    return text if text.isprintable() else "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def printable(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor for text meant for a terminal: every string value (the event's
    name too) with the characters a terminal would act on or hide (ESC and the other controls,
    a newline, a bidirectional override) written as escapes (``\\x1b``, ``\\n``,
    ``\\u202e``). Lists and other values are rendered by ``repr``, which escapes them
    already; JSON escapes them too, so only the console format needs this."""
    for key, value in event_dict.items():
        if type(value) is str and not value.isprintable():
            event_dict[key] = _shown(value)
    return event_dict


#: What an event goes through on its way to the standard library's ``logging`` (structlog
#: unconfigured): dropped below the logger's level first, then guarded, then one line of text.
_STDLIB_CHAIN = [
    structlog.stdlib.filter_by_level,
    structlog.contextvars.merge_contextvars,
    redact,
    printable,
    structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0),
]


class Logger:
    """A logger named ``interplay.<area>`` (see :func:`get_logger`). Each call goes to
    structlog's configured logger once structlog is configured, else to the standard
    library's logger of the same name."""

    __slots__ = ("_configured", "_stdlib")

    def __init__(self, name: str) -> None:
        self._configured = structlog.get_logger(name)
        self._stdlib = structlog.wrap_logger(
            logging.getLogger(name), processors=_STDLIB_CHAIN,
            wrapper_class=structlog.stdlib.BoundLogger, cache_logger_on_first_use=True)

    def __getattr__(self, attr: str) -> Any:
        # Decided at each call, not at import: a host may configure structlog after
        # importing interplay, or reset it.
        return getattr(self._configured if structlog.is_configured() else self._stdlib, attr)


def get_logger(name: str) -> Any:
    """The logger of ``name`` (``"interplay.<area>"``; a plugin's under its own area).

    structlog's default configuration prints every event, debug included, to stdout: no place
    for a library's lines. So until structlog is configured, by the ``interplay`` command
    (:func:`configure`) or by the host for itself, the events go to the standard library's
    ``logging`` under ``name``, through the same guard, as any well-behaved library's do: the
    host's logging configuration decides where they go and from which level, and with none,
    Python's last-resort handler shows warnings and above on stderr and drops the rest.
    Importing interplay configures nothing.
    """
    return Logger(name)


_settings: dict[str, str] = {"fmt": "console", "level": "warning"}


def settings() -> dict[str, str]:
    """The arguments of the last :func:`configure` (worker processes log the same way)."""
    return dict(_settings)


def json_lines() -> bool:
    """Whether the process logs JSON lines now (:func:`configure` with ``fmt="json"``, and
    structlog not reset since): what shares stderr with them must keep to whole lines."""
    return structlog.is_configured() and _settings["fmt"] == "json"


class _Stderr:
    """``sys.stderr`` as it is at each write, not as it was when logging was configured: a
    progress bar that takes the stream over for a while (printing what is written above the
    bar) gets the log lines too."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _SharedLogger:
    def __init__(self, printer: structlog.PrintLogger) -> None:
        self.printer = printer

    def __call__(self, *_: Any) -> structlog.PrintLogger:
        return self.printer


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
    # JSON escapes what a terminal would act on; console text has it escaped before.
    shown: list[Any] = [] if fmt == "json" else [printable]
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    elif fmt == "console":
        # Tracebacks (debug level only) without their frames' locals: a local is a request
        # body or a message as often as not.
        renderer = structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback)
    else:
        from interplay.errors import InterplayError

        raise InterplayError(f"--log-format: expected console or json; got {fmt!r}")
    _settings.update(fmt=fmt, level=level)
    out: Any = stream or _Stderr()
    guard = Redactor(keep_tracebacks=numeric <= logging.DEBUG)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            guard,
            *shown,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One printer for every logger: the default factory makes one per log call (with a
        # lock lookup), which a run pays for each turn even for a debug line it drops.
        logger_factory=_SharedLogger(structlog.PrintLogger(file=out)),
        cache_logger_on_first_use=False,
    )
    _route_stdlib_logging(numeric, [guard, *shown], renderer, out)


def _route_stdlib_logging(level: int, guarded: list[Any], renderer: Any,
                          stream: TextIO) -> None:
    """Send the standard library's log records through the same guard (``guarded``: it and
    what follows it) and renderer."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        # The guard first: a server's own line is told apart by its record.
        processors=[*guarded, structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    renderer],
    ))
    handler._interplay = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_interplay", False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
