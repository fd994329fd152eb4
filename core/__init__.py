"""interplay: run, score and record multi-turn episodes between LLM agents, simulated users
and simulated worlds.

Importing the package has no side effects: plugins load lazily, once, on the first lookup.
"""

from __future__ import annotations

from interplay.errors import InterplayError
from interplay.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["InterplayError", "__version__", "hookimpl"]
