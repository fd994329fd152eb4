"""The export formats the kernel registers through the export hook, as any plugin does
(``plugins.DEFAULT_PLUGINS``): ``inspect``, an Inspect eval log
(:mod:`interplay.export.inspect_log`; inspect-ai is imported only when it writes)."""

from __future__ import annotations

from interplay.plugins.hookspecs import Register, hookimpl


@hookimpl
def register_export_formats(register: Register) -> None:
    from interplay.export.inspect_log import InspectLog

    register(InspectLog)
