"""The logging guard: message text, tool arguments and user data never reach a log line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from interplay import log as ilog

SENTINEL = "SENTINEL-7f3a"


@pytest.fixture
def buffer() -> Iterator[io.StringIO]:
    """A stream the logging is configured to, restored afterwards."""
    out = io.StringIO()
    yield out
    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_interplay", False)]:
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    structlog.contextvars.clear_contextvars()


def emit_everything(logger: structlog.typing.FilteringBoundLogger) -> None:
    """Log a sentinel every way library code could, next to ids and counts."""
    logger.warning("episode.turn", text=f"user said {SENTINEL}", arguments=f'{{"q": "{SENTINEL}"}}',
                   content=[{"type": "text", "text": SENTINEL}],
                   messages=[{"role": "user", "content": SENTINEL}],
                   info={"nested": {"deeper": SENTINEL}}, prompt=(SENTINEL,),
                   request_id="req-42", agent="assistant", n_messages=3, tokens=17,
                   latency_s=0.25, trainable=True)
    logger.warning(f"said {SENTINEL}")
    logger.warning("format %s", SENTINEL)
    logger.warning("episode.reply", reply=SENTINEL.encode(), obj=object(), chars={SENTINEL})
    structlog.contextvars.bind_contextvars(user_text=SENTINEL, episode_id="ep-9")
    logger.warning("episode.bound")
    structlog.contextvars.clear_contextvars()
    try:
        raise ValueError(f"bad answer {SENTINEL}")
    except ValueError:
        logger.exception("verifier.failed", verifier="exact")
    logger.error("tool.failed", exc_info=RuntimeError(SENTINEL), tool="search")
    logging.getLogger("httpx").warning("HTTP Request: POST %s", f"http://x/?q={SENTINEL}")
    logging.getLogger("uvicorn.error").error("boom", exc_info=KeyError(SENTINEL))


def test_json_logs_carry_ids_and_counts_but_no_user_text(buffer: io.StringIO) -> None:
    ilog.configure(fmt="json", level="info", stream=buffer)
    emit_everything(structlog.get_logger("interplay.test"))
    output = buffer.getvalue()
    assert SENTINEL not in output
    lines = [json.loads(line) for line in output.splitlines()]
    assert len(lines) == 9
    turn = lines[0]
    assert turn["event"] == "episode.turn"
    assert turn["request_id"] == "req-42" and turn["agent"] == "assistant"
    assert turn["n_messages"] == 3 and turn["tokens"] == 17 and turn["latency_s"] == 0.25
    assert turn["trainable"] is True
    assert turn["text"] == f"<redacted len={len('user said ' + SENTINEL)}>"
    assert turn["content"] == "<redacted items=1>"
    assert turn["info"] == "<redacted keys=1>"
    assert lines[1]["event"].startswith("<redacted len=")
    assert lines[2]["event"].startswith("<redacted len=")
    assert lines[4]["episode_id"] == "ep-9"
    assert lines[5]["event"] == "verifier.failed" and lines[5]["error_type"] == "ValueError"
    assert lines[6]["error_type"] == "RuntimeError" and lines[6]["tool"] == "search"
    assert lines[7]["logger"] == "httpx" and lines[7]["event"].startswith("<redacted")
    assert lines[8]["logger"] == "uvicorn.error" and lines[8]["error_type"] == "KeyError"


def test_console_logs_have_no_user_text(buffer: io.StringIO) -> None:
    ilog.configure(fmt="console", level="warning", stream=buffer)
    emit_everything(structlog.get_logger("interplay.test"))
    output = buffer.getvalue()
    assert SENTINEL not in output
    assert "request_id=req-42" in output
    assert "Traceback" not in output


def test_debug_level_keeps_tracebacks(buffer: io.StringIO) -> None:
    ilog.configure(fmt="console", level="debug", stream=buffer)
    try:
        raise ValueError("kept at debug")
    except ValueError:
        structlog.get_logger("interplay.test").exception("verifier.failed")
    assert "Traceback" in buffer.getvalue()


def test_the_level_filters(buffer: io.StringIO) -> None:
    ilog.configure(fmt="json", level="error", stream=buffer)
    logger = structlog.get_logger("interplay.test")
    logger.warning("quiet.event")
    logger.error("loud.event")
    assert [json.loads(x)["event"] for x in buffer.getvalue().splitlines()] == ["loud.event"]


def test_configuring_twice_keeps_one_stdlib_handler(buffer: io.StringIO) -> None:
    ilog.configure(fmt="json", stream=buffer)
    ilog.configure(fmt="json", stream=buffer)
    logging.getLogger("some.library").warning("once")
    assert len(buffer.getvalue().splitlines()) == 1


def test_bad_settings_are_user_errors() -> None:
    from interplay import InterplayError

    with pytest.raises(InterplayError, match="--log-level"):
        ilog.configure(level="loud")
    with pytest.raises(InterplayError, match="--log-format"):
        ilog.configure(fmt="xml")


def test_library_code_never_configures_logging() -> None:
    """Only the command configures logging: no module but log.py and cli.py calls it, and the
    test helper that captures the log for one test (testing/logs.py, a host like the command)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    offenders = []
    for path in (root / "core").rglob("*.py"):
        if path.name in ("log.py", "cli.py") and path.parent.name == "core":
            continue
        if path.relative_to(root).as_posix() == "core/testing/logs.py":
            continue
        source = path.read_text()
        if ("structlog.configure(" in source or "logging.basicConfig(" in source
                or "log.configure(" in source):
            offenders.append(str(path.relative_to(root)))
    assert offenders == []
