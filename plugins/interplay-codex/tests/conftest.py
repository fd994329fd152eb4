"""Fixtures of the codex harness's tests.

The tests run the real codex CLI. When it is missing and npm is present, the pinned version is
installed into the venv (``<venv>/npm``, linked into the venv's bin) once per session; only
without npm do the codex tests skip. Every test starts from a plugin host holding the builtins
and this plugin alone, so nothing else that happens to be installed takes part.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from interplay.testing import isolated_plugins, npm_program
from interplay_codex import plugin as codex_plugin
from interplay_codex.command_line import CODEX_VERSION


@pytest.fixture(scope="session")
def codex_bin() -> str:
    """The codex executable, installed into the venv with npm if missing."""
    return npm_program("codex", "@openai/codex", CODEX_VERSION)


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[None]:
    """The builtins plus this plugin, registered by name for one test."""
    with isolated_plugins(("codex", codex_plugin, "interplay-codex")):
        yield
