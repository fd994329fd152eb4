"""Test doubles shipped for plugin authors: a scripted OpenAI-compatible model over real HTTP
(:class:`ScriptedModel`) and a pytest plugin with fixtures (``interplay.testing.pytest_plugin``).

The names are imported on first use, so that ``python -m interplay.testing.scripted`` runs the
module once, as ``__main__``, rather than after this package has already imported it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interplay.testing.scripted import (
        ScriptedModel,
        ScriptedReply,
        ScriptedRequest,
        ScriptedToolCall,
    )

__all__ = ["ScriptedModel", "ScriptedReply", "ScriptedRequest", "ScriptedToolCall"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module("interplay.testing.scripted"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
