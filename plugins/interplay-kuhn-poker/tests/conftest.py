"""Fixtures for the kuhn poker plugin's tests.

Every test starts from a plugin host holding the builtins and this plugin, registered by name
(not through whatever entry points happen to be installed), and the host is reset afterwards.
The entry-point path itself is tested in test_discovery.py, in subprocesses.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import interplay_kuhn_poker.plugin
from interplay import plugins


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[plugins.PluginHost]:
    host = plugins.reset(load_entry_points=False)
    host.register_module(interplay_kuhn_poker.plugin, "kuhn_poker",
                         package="interplay-kuhn-poker")
    yield host
    plugins.reset(load_entry_points=False)
