"""Ids for episodes, model calls and responses: unique, not secret.

Drawn from one generator seeded from the OS, rather than from ``os.urandom`` per id: a run
makes one per model call, and a system call each would add to every call.
A forked child seeds afresh, so parent and child never draw the same ids.
"""

from __future__ import annotations

import os
import random

_source = random.Random(os.urandom(32))


def _reseed() -> None:
    _source.seed(os.urandom(32))


os.register_at_fork(after_in_child=_reseed)


def new_id(nbytes: int = 8) -> str:
    """``nbytes`` random bytes as lowercase hex (``2 * nbytes`` characters)."""
    return f"{_source.getrandbits(nbytes * 8):0{nbytes * 2}x}"
