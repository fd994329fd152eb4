"""The plugin host: the pluggy manager and what it loaded (``host``), the registry of names
every plugin registered (``registry``) and the hook specifications (``hookspecs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interplay._plumbing.facade import lazy_names

if TYPE_CHECKING:
    from interplay.plugins.host import describe_kinds, is_kind

_NAMES = {
    "describe_kinds": "interplay.plugins.host:describe_kinds",
    "is_kind": "interplay.plugins.host:is_kind",
}
__all__ = [
    "describe_kinds",
    "is_kind",
]
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
