"""Fixtures of the Harbor plugin's tests.

Every test starts from a plugin host holding the builtins and this plugin, registered by name
(not through whatever entry points happen to be installed). ``task_copy`` copies an example
task into a test's folder, to be broken there. Tests marked ``sweep`` run Harbor's own runner
(minutes, a Python 3.12 venv with harbor 0.26): only when asked for (``pytest -m sweep``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import interplay_harbor.plugin
from interplay.testing import isolated_plugins
from interplay_harbor.env import examples


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[None]:
    """The builtins plus this plugin, registered by name for one test."""
    with isolated_plugins(("harbor", interplay_harbor.plugin, "interplay-harbor")):
        yield


@pytest.fixture
def task_copy(tmp_path: Path) -> Callable[[str], Path]:
    """A copy of the example task ``name`` in a dataset folder of the test's own."""
    def copy(name: str) -> Path:
        target = tmp_path / "dataset" / name
        shutil.copytree(examples() / name, target)
        return target
    return copy
