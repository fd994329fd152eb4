"""Fixtures for the tau2 plugin's tests.

Every test starts from a plugin host holding the builtins and this plugin, registered by name
(not through whatever entry points happen to be installed), and the host is reset afterwards.
The entry-point path itself is tested in test_tau2_cli.py, in subprocesses.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import interplay_tau2.plugin
from interplay.testing import isolated_plugins


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[None]:
    """The builtins plus this plugin, registered by name for one test."""
    with isolated_plugins(("tau2", interplay_tau2.plugin, "interplay-tau2")):
        yield
