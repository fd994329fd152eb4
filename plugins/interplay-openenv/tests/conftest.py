"""Fixtures for the openenv plugin's tests: this plugin registered by name on a plugin host with
the builtins, and the test environments of openenv_apps.py importable by the servers the tests
start (they run in processes of their own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import interplay_openenv.plugin
from interplay.testing import isolated_plugins

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[None]:
    with isolated_plugins(("openenv", interplay_openenv.plugin, "interplay-openenv")):
        yield


@pytest.fixture(autouse=True)
def apps_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers started by the tests import the test apps from this folder."""
    import os

    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}{os.pathsep}{path}" if path else str(TESTS))
