"""Registers the builtin harnesses (listed in interplay.plugins.host.DEFAULT_PLUGINS)."""

from __future__ import annotations

from interplay.plugins.hookspecs import Register, hookimpl


@hookimpl
def register_harnesses(register: Register) -> None:
    from interplay.builtin_harnesses.chat import ChatHarness, NullHarness
    from interplay.builtin_harnesses.command import CommandHarness

    register(ChatHarness)
    register(NullHarness)
    register(CommandHarness)
