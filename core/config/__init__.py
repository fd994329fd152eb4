"""Configuration: TOML files and ``--set`` overrides structured into attrs classes
(``loading``), what a settings class says of each field (``settings``), and where a model lives
and how to reach it (``endpoint``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interplay._plumbing.facade import lazy_names

if TYPE_CHECKING:
    from interplay.config.loading import structure as structure_config

_NAMES = {
    "structure_config": "interplay.config.loading:structure",
}
__all__ = [
    "structure_config",
]
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
