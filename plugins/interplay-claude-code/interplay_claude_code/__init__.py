"""interplay-claude-code: the ``claude-code`` harness, which runs Anthropic's Claude Code CLI as
an agent against the interception server's Messages route.

Registered through the ``interplay`` entry-point group (``interplay_claude_code.plugin``); the
kernel never imports this package by name.
"""

from __future__ import annotations

from interplay_claude_code.command_line import CLAUDE_CODE_VERSION, ClaudeCodeConfig
from interplay_claude_code.harness import ClaudeCodeHarness

__version__ = "0.1.0"

__all__ = ["CLAUDE_CODE_VERSION", "ClaudeCodeConfig", "ClaudeCodeHarness", "__version__"]
