"""What the interception server takes from the harness programs that talk to it: the
``[interception]`` table of a run's config."""

from __future__ import annotations

import attrs

from interplay.errors import InterplayError


@attrs.frozen
class Limits:
    """What the interception server takes from a client (``[interception]`` in a run's config).

    A body past ``max_body_mb`` is refused with a 413 (from its Content-Length before it is
    read, else once it outgrows the limit), a request whose headers have not all arrived
    ``header_timeout_s`` after its connection opened (or, on a kept-alive connection, after its
    first byte) has its connection closed, and one whose body has not all arrived
    ``body_timeout_s`` after its headers gets a 408 and its connection closed. A program that
    reads nothing of its answer for ``unread_timeout_s`` (a stream it holds open unread, a
    connection left half-open) has its connection closed; the upstream call goes on only
    while another request waits for it.
    """

    #: The largest request body taken, in MiB (a larger one is refused with a 413).
    max_body_mb: float = 8.0
    #: Seconds a request's headers may take to arrive before its connection is closed.
    header_timeout_s: float = 10.0
    #: Seconds a request's body may take after its headers before a 408.
    body_timeout_s: float = 30.0
    #: Seconds an answer may go unread by its program (nothing of it taken) before its
    #: connection is closed.
    unread_timeout_s: float = 60.0

    def __attrs_post_init__(self) -> None:
        for name in ("max_body_mb", "header_timeout_s", "body_timeout_s", "unread_timeout_s"):
            value = getattr(self, name)
            if not value > 0 or value == float("inf"):
                raise InterplayError(f"{name} must be above 0 and finite, got {value!r}")

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * (1 << 20))
