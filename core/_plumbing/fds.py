"""This process's file descriptors: the soft limit raised to the hard one at start, and the
share of them one listener may hold.

Every connection a server accepts, every upstream call it forwards, every program's pipes take
a descriptor. A listener that takes descriptors without bound lets one client that opens
connections and never finishes them starve everything else of the process: the next upstream
call, the next program's pipes. So each listener keeps its connections under a share of the
limit (:func:`listener_share`), and the ``interplay`` command raises the soft limit to the
hard one (:func:`raise_limit`), as Go programs and most servers do, so the share is as large
as the machine allows.

Standard library only; it must not import interplay.
"""

from __future__ import annotations

import sys

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

#: Descriptors kept out of every listener's share: the process's own files, its loggers, a
#: worker's protocol pipes, the reaper's pipe.
RESERVED = 64
#: A listener's share is never below this many connections.
FLOOR = 16
#: The largest soft limit macOS takes (its hard limit is often "unlimited", which it refuses).
_DARWIN_MAX = 10240


def soft_limit() -> int | None:
    """This process's soft RLIMIT_NOFILE; None where there is none (or it is unlimited)."""
    if resource is None:
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


def raise_limit() -> tuple[int, int] | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit; ``(before, after)``, or None where
    nothing changed (no such limit, already at the hard one, or the system refused)."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if sys.platform == "darwin":
        target = min(hard, _DARWIN_MAX) if hard != resource.RLIM_INFINITY else _DARWIN_MAX
    if soft == resource.RLIM_INFINITY or (target != resource.RLIM_INFINITY and soft >= target):
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return None
    return int(soft), int(target)


def listener_share() -> int:
    """How many connections one listener may hold open at once: half of what the limit leaves
    past :data:`RESERVED` (each request a listener forwards takes a second descriptor
    upstream), and never below :data:`FLOOR`."""
    soft = soft_limit()
    if soft is None:
        return 1 << 20
    return max(FLOOR, (soft - RESERVED) // 2)
