"""The process log captured for a test (:func:`captured_log`): what the ``interplay`` command
writes with ``--log-format json``, kept in a buffer, so a plugin's test can search it for what
must never be logged (message text, personas, tool arguments, user data)."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator

import structlog

from interplay import log


@contextlib.contextmanager
def captured_log(level: str = "debug") -> Iterator[io.StringIO]:
    """Every log line of the block, as JSON lines, in the buffer it yields; logging is put back
    as it was on leaving (structlog to its defaults, the standard library's root logger to its
    level and handlers)."""
    buffer = io.StringIO()
    root = logging.getLogger()
    root_level, root_handlers = root.level, list(root.handlers)
    log.configure(fmt="json", level=level, stream=buffer)
    try:
        yield buffer
    finally:
        structlog.reset_defaults()
        for handler in [h for h in root.handlers if h not in root_handlers]:
            root.removeHandler(handler)
        root.setLevel(root_level)
