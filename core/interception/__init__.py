"""The model boundary for harness programs that run as separate processes: an
OpenAI-compatible interception server that records each request as one turn of a trace."""

from __future__ import annotations

from interplay.interception.limits import Limits
from interplay.interception.server import InterceptionServer, TraceRoute

__all__ = ["InterceptionServer", "Limits", "TraceRoute"]
