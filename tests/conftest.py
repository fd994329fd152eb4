"""Fixtures shared by the kernel's and the builtins' tests.

The kernel's tests never load whatever plugins happen to be installed: every test starts from
a plugin host holding only the builtins, and a test that needs a plugin registers it by name
(``register_plugin``) and has it unregistered afterwards.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from interplay.plugins import host as plugins


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background without job control (``nohup``, ``cmd &`` in a
    script) inherits SIGINT ignored, and every run a test starts would inherit it too (a
    program keeps an ignored SIGINT ignored, as ``interplay eval`` does): the tests that press
    Ctrl-C on a run need it delivered. A handler is reset to the default in a child at exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
