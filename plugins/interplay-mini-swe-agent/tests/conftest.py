"""Fixtures of the mini-swe-agent harness's tests.

The tests run the real mini-swe-agent (its ``mini`` command, installed with this plugin from
PyPI) against the scripted model. Every test starts from a plugin host holding the builtins
and this plugin alone, so nothing else that happens to be installed takes part.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from interplay.testing import isolated_plugins
from interplay_mini_swe_agent import plugin as mini_plugin


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[None]:
    """The builtins plus this plugin, registered by name for one test."""
    with isolated_plugins(("mini-swe-agent", mini_plugin, "interplay-mini-swe-agent")):
        yield
