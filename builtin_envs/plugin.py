"""Registers the builtin envs with the kernel (listed in interplay.plugins.DEFAULT_PLUGINS)."""

from __future__ import annotations

from interplay import hookimpl
from interplay.hookspecs import Register


@hookimpl
def register_envs(register: Register) -> None:
    pass


@hookimpl
def register_steps(register: Register) -> None:
    pass


@hookimpl
def register_user_sims(register: Register) -> None:
    pass
