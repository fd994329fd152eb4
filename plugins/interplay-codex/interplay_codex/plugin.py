"""The plugin module the ``interplay`` entry point names: it registers the codex harness."""

from __future__ import annotations

import interplay
from interplay import Register


@interplay.hookimpl
def register_harnesses(register: Register) -> None:
    from interplay_codex.harness import CodexHarness

    register(CodexHarness)
