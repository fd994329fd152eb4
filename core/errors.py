"""The project's one exception type for errors a user can cause.

It carries a one-line message that says what to change. The CLI prints it without a traceback
and exits 2. Bugs are ordinary exceptions and keep their traceback.
"""

from __future__ import annotations


class InterplayError(Exception):
    """A bad config, an unknown name, a bad input: something the user can fix."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
