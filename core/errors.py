"""The project's one exception type for errors a user can cause.

It carries a one-line message that says what to change. The CLI prints it without a traceback
and exits 2. Bugs are ordinary exceptions and keep their traceback.
"""

from __future__ import annotations

import os
import traceback

#: Where the kernel's own modules are: a frame outside it is where a plugin went wrong.
_KERNEL = os.path.dirname(os.path.abspath(__file__)) + os.sep


class InterplayError(Exception):
    """A bad config, an unknown name, a bad input: something the user can fix."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def describe_exception(exc: BaseException) -> str:
    """``Type: message (file:line)``, the line being where a plugin's code went wrong: the
    innermost frame outside the kernel (a plugin's, a builtin's), else the innermost of all."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    outside = [f for f in frames if not os.path.abspath(f.filename).startswith(_KERNEL)]
    frame = (outside or frames)[-1:] if frames else []
    where = f" ({frame[0].filename}:{frame[0].lineno})" if frame else ""
    return f"{type(exc).__name__}: {exc}{where}"
