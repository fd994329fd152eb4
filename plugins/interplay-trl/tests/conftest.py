"""Tests marked ``training`` train a model on the CPU for minutes: they run only when asked
for (``pytest -m training``), never in the default run."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "training" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="trains on the CPU for minutes: run with -m training")
    for item in items:
        if "training" in item.keywords:
            item.add_marker(skip)
