"""A figure as the report's page shows it (:func:`fmt`). The record's fields themselves are
read defensively by :mod:`interplay.values.plain` and typed by
:mod:`interplay.run.recorded`.

This module owns only formatting values; it must not write markup or read a file.
"""

from __future__ import annotations

from typing import Any


def fmt(value: Any, digits: int = 4) -> str:
    """A figure as the page shows it: ``-`` for none, a float to ``digits`` significant
    digits."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)
