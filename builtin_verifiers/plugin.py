"""Registers the builtin verifiers (listed in interplay.plugins.DEFAULT_PLUGINS)."""

from __future__ import annotations

from interplay import hookimpl
from interplay.hookspecs import Register


@hookimpl
def register_verifiers(register: Register) -> None:
    from interplay.builtin_verifiers.match import Contains, Exact, Regex

    register(Exact)
    register(Contains)
    register(Regex)
