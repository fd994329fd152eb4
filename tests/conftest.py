"""Fixtures shared by the kernel's and the builtins' tests.

The kernel's tests never load whatever plugins happen to be installed: every test starts from
a plugin host holding only the builtins, and a test that needs a plugin registers it by name
(``register_plugin``) and has it unregistered afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from interplay import plugins


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[plugins.PluginHost]:
    """A fresh plugin host with the builtins only (no entry points) for every test."""
    yield plugins.reset(load_entry_points=False)
    plugins.reset(load_entry_points=False)


RegisterPlugin = Callable[..., plugins.PluginHost]


@pytest.fixture
def register_plugin(plugin_host: plugins.PluginHost) -> Iterator[RegisterPlugin]:
    """``register_plugin(module, name=None, package="local")``: register a plugin module (or
    any object with ``@interplay.hookimpl`` functions) for this test only."""
    names: list[str] = []

    def register(module: Any, name: str | None = None, package: str = "local") -> (
        plugins.PluginHost
    ):
        host = plugins.host()
        plugin_name = name or getattr(module, "__name__", None) or repr(module)
        host.register_module(module, plugin_name, package=package)
        names.append(plugin_name)
        return host

    yield register
    host = plugins.host()
    for name in reversed(names):
        host.unregister(name)
