"""Registers the builtin verifiers with the kernel (listed in interplay.plugins.DEFAULT_PLUGINS)."""

from __future__ import annotations

from interplay import hookimpl
from interplay.hookspecs import Register


@hookimpl
def register_verifiers(register: Register) -> None:
    pass
