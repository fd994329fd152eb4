"""Test doubles shipped for plugin authors: a scripted OpenAI-compatible model over real HTTP
(:class:`ScriptedModel`) and a pytest plugin with fixtures (``interplay.testing.pytest_plugin``).
"""

from __future__ import annotations

from interplay.testing.scripted import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    ScriptedToolCall,
)

__all__ = ["ScriptedModel", "ScriptedReply", "ScriptedRequest", "ScriptedToolCall"]
