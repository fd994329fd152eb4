"""Registers the builtin sandbox backends (listed in interplay.plugins.host.DEFAULT_PLUGINS)."""

from __future__ import annotations

from interplay.plugins.hookspecs import Register, hookimpl


@hookimpl
def register_sandboxes(register: Register) -> None:
    from interplay.builtin_sandboxes.docker import DockerSandbox
    from interplay.builtin_sandboxes.local import LocalSandbox

    register(DockerSandbox)
    register(LocalSandbox)
