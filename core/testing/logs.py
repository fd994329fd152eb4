"""The process log captured for a test (:func:`captured_log`): what the ``interplay`` command
writes with ``--log-format json``, kept in a buffer, so a plugin's test can search it for what
must never be logged (message text, personas, tool arguments, user data)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import structlog

from interplay import log


@contextlib.contextmanager
def captured_log(level: str = "debug") -> Iterator[io.StringIO]:
    """Every log line of the block, as JSON lines, in the buffer it yields; logging is put back
    to structlog's defaults on leaving."""
    buffer = io.StringIO()
    log.configure(fmt="json", level=level, stream=buffer)
    try:
        yield buffer
    finally:
        structlog.reset_defaults()
