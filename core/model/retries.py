"""The one retry policy of every model call (the model client, the Responses passthrough, the
judges, either transport) and of starting a seat's program (the ``command`` harness), and the
failures it tells apart.

A failed attempt is a :class:`Failure` with an ``error_type``. Only transient ones are tried
again (``rate_limited``, ``server_error``, ``timeout``, ``connection_error``, and
``spawn_error``: a program the system could not start for want of descriptors, processes or
memory), and only while nothing of the answer has been handed on. The wait is exponential
backoff with full jitter, or the endpoint's Retry-After when it sends one; a call stops after
``max_retries`` retries, or rather than wait past ``retry_max_s`` from its start, or once
two attempts in a row sent their request and got no answer begun (``unanswered``: an
endpoint that accepts requests and answers none is not worth a third wait). One
:class:`RetryPolicy` per endpoint, held by its :class:`~interplay.model.client.ModelClient`.

No I/O of its own; logs carry error types, statuses and delays, never bodies.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from interplay._plumbing import codec as _codec
from interplay.config.endpoint import Endpoint
from interplay.errors import ErrorType
from interplay.log import get_logger

T = TypeVar("T")

log = get_logger("interplay.model")

RETRYABLE = frozenset({ErrorType.RATE_LIMITED, ErrorType.SERVER_ERROR, ErrorType.TIMEOUT,
                       ErrorType.CONNECTION_ERROR, ErrorType.SPAWN_ERROR})
_BACKOFF_FIRST_S = 0.5
_BACKOFF_CAP_S = 8.0


class Failure(Exception):
    """One failed attempt, classified (``interplay.model.AttemptFailure``): its ``error_type`` says
    whether :class:`RetryPolicy` tries again (:data:`RETRYABLE`) and is what the record keeps;
    ``message`` is the one line a user reads. An answer with an error status carries its
    ``status``, ``body`` and the ``headers`` worth passing on (content type, Retry-After).
    ``final`` marks a failure that trying again cannot mend: part of the answer was already
    handed on, or the endpoint's certificate is not trusted. ``unanswered`` marks a
    ``timeout`` whose request was sent and whose answer never began."""

    def __init__(self, error_type: str, message: str, status: int | None = None, *,
                 retry_after: float | None = None, body: bytes | None = None,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.body = body
        self.headers = headers or []
        self.final = False
        self.unanswered = False

    @classmethod
    def from_status(cls, status: int, body: bytes, headers: Mapping[str, str]) -> Failure:
        """The failure an answer with an error ``status`` amounts to."""
        retry_after = headers.get("retry-after")
        keep = [(b"content-type", (headers.get("content-type") or "application/json")
                 .encode("latin-1"))]
        if retry_after:
            keep.append((b"retry-after", retry_after.encode("latin-1")))
        return cls(status_error_type(status), error_message(body, status), status,
                   retry_after=parse_retry_after(retry_after), body=body, headers=keep)

    @property
    def retryable(self) -> bool:
        return self.error_type in RETRYABLE and not self.final


def status_error_type(status: int) -> ErrorType:
    """The error type of an answer with the error ``status``."""
    if status == 429:
        return ErrorType.RATE_LIMITED
    # A conflict is transient by OpenAI's own convention; retry it like a server error.
    if status >= 500 or status == 409:
        return ErrorType.SERVER_ERROR
    if status == 408:
        return ErrorType.TIMEOUT
    if status in (401, 403):
        return ErrorType.AUTH_ERROR
    if status == 404:
        return ErrorType.NOT_FOUND
    return ErrorType.BAD_REQUEST


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_message(body: bytes, status: int) -> str:
    """``HTTP <status>``, with the message of an OpenAI-style error body when there is one."""
    try:
        data = _codec.loads(body)
    except ValueError:
        return f"HTTP {status}"
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and err.get("message"):
        return f"HTTP {status}: {err['message']}"
    if isinstance(err, str) and err:
        return f"HTTP {status}: {err}"
    return f"HTTP {status}"


class RetryPolicy:
    """The retry policy for one endpoint's calls (``interplay.model.RetryPolicy``): an attempt that
    raises a transient :class:`Failure` is tried again after exponential backoff with full
    jitter (or the endpoint's Retry-After), at most ``max_retries`` times and never past
    ``retry_max_s`` from the first attempt, and not after a second ``unanswered`` timeout in
    a row; any other failure, or the last one, is raised."""

    #: Attempts in a row whose answer never began, after which a call stops.
    UNANSWERED_AT_MOST = 2

    def __init__(self, endpoint: Endpoint) -> None:
        self.max_retries = endpoint.max_retries
        self.budget_s = endpoint.retry_budget_s

    def delay(self, failure: Failure, attempt: int, elapsed_s: float) -> float | None:
        """Seconds to wait before trying again after ``failure`` ended attempt number
        ``attempt``, ``elapsed_s`` into the call; None when the call must stop here."""
        if not failure.retryable or attempt > self.max_retries:
            return None
        if failure.retry_after is not None:
            wait = failure.retry_after
        else:
            wait = random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_FIRST_S * 2 ** (attempt - 1)))
        return None if elapsed_s + wait >= self.budget_s else wait

    async def run(self, attempt: Callable[[], Awaitable[T]], *,
                  event: str = "model.retry") -> T:
        """``await attempt()`` until it returns, or raise the :class:`Failure` it raised
        once that is not worth retrying or the limits are reached; ``event`` names the log
        line of each retry."""
        t0 = time.monotonic()
        number = unanswered = 0
        while True:
            number += 1
            try:
                return await attempt()
            except Failure as failure:
                unanswered = unanswered + 1 if failure.unanswered else 0
                if unanswered >= self.UNANSWERED_AT_MOST:
                    failure.message += (f"; {unanswered} attempts in a row, none answered: it "
                                        f"takes requests and answers none")
                    raise
                wait = self.delay(failure, number, time.monotonic() - t0)
                if wait is None:
                    raise
                log.info(event, attempt=number, error_type=failure.error_type,
                         status=failure.status, delay_s=round(wait, 3))
                await asyncio.sleep(wait)
