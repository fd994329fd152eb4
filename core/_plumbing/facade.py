"""A package's public names, imported on first use: a subpackage that re-exports what its
modules define without importing them all when any one of them is imported (``interplay.run``,
``interplay.contracts``, ...), so that importing one module of a layer never loads the rest."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any],
                                                              Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``names``: each public name ->
    ``"module:attribute"`` it is read from (``module`` absolute)."""
    namespace = importlib.import_module(package).__dict__

    def getattr_(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = where.split(":")
        value = getattr(importlib.import_module(module), attribute)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *names})

    return getattr_, dir_
