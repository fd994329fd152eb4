"""Strings a client controls, bounded before they reach a log line or a record.

A program talking to the interception server or the tool gateway chooses its request's key
names, tool names, call ids and header values; a hostile or broken one can make any of them a
megabyte long, or send fifty thousand of them. Wherever such a string is logged or recorded it
goes through :func:`bounded` (one string) or :func:`bounded_names` (a list of them): a string
within :data:`MAX_CHARS` is kept as it is, a longer one keeps its head and says how long it was
(``"aaaa…[cut: 1048576 chars]"``), and a list keeps its first :data:`MAX_NAMES` items and says
how many more there were. What the program is answered is not touched: only what interplay
keeps of it.

The log's guard (:class:`interplay.log.Redactor`) bounds every string and list it lets through
the same way, so a log call that forgets is bounded all the same. This module owns the bounds;
it must not log, and it holds no user logic.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The longest client string kept whole (a tool name is at most 64 to 128 characters in every
#: API that names one; a call id some 40).
MAX_CHARS = 256
#: The most names of one list kept (the rest are counted).
MAX_NAMES = 20
#: What is kept of a cut string: its head, so that it can still be recognised.
_HEAD = 64


def bounded(value: str, limit: int = MAX_CHARS) -> str:
    """``value`` itself when it is at most ``limit`` characters; else its first characters and
    its length: ``"aaaa…[cut: 1048576 chars]"`` (never longer than ``limit`` + 32)."""
    if len(value) <= limit:
        return value
    return f"{value[:min(_HEAD, limit)]}…[cut: {len(value)} chars]"


def is_cut(value: str) -> bool:
    """Whether ``value`` is a string :func:`bounded` cut."""
    return value.endswith(" chars]") and "…[cut: " in value


def bounded_names(names: Iterable[str], limit: int = MAX_NAMES) -> list[str]:
    """The first ``limit`` of ``names``, each :func:`bounded`, and when there were more, one
    last item that counts them (``"…[+49980 more]"``)."""
    out: list[str] = []
    extra = 0
    for name in names:
        if len(out) < limit:
            out.append(bounded(name))
        else:
            extra += 1
    if extra:
        out.append(f"…[+{extra} more]")
    return out
