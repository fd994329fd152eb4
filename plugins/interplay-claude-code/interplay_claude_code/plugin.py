"""The plugin module the ``interplay`` entry point names: it registers the Claude Code harness."""

from __future__ import annotations

import interplay
from interplay import Register


@interplay.hookimpl
def register_harnesses(register: Register) -> None:
    from interplay_claude_code.harness import ClaudeCodeHarness

    register(ClaudeCodeHarness)
