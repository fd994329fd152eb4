"""interplay-codex: the ``codex`` harness, which runs the OpenAI codex CLI as an agent.

Registered through the ``interplay`` entry-point group (``interplay_codex.plugin``); the kernel
never imports this package by name.
"""

from __future__ import annotations

from interplay_codex.command_line import CODEX_VERSION, CodexConfig
from interplay_codex.harness import CodexHarness

__version__ = "0.1.0"

__all__ = ["CODEX_VERSION", "CodexConfig", "CodexHarness", "__version__"]
