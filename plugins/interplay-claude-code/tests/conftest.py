"""Fixtures of the Claude Code harness's tests.

The tests run the real Claude Code CLI. When it is missing and npm is present, the pinned
version is installed into the venv (``<venv>/npm``, linked into the venv's bin) once per
session; only without npm do the tests skip. Every test starts from a plugin host holding the
builtins and this plugin alone, so nothing else that happens to be installed takes part.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from interplay.testing import isolated_plugins, npm_program
from interplay_claude_code import plugin as claude_plugin
from interplay_claude_code.command_line import CLAUDE_CODE_VERSION, NPM_PACKAGE


@pytest.fixture(scope="session")
def claude_bin() -> str:
    """The claude executable, installed into the venv with npm if missing."""
    return npm_program("claude", NPM_PACKAGE, CLAUDE_CODE_VERSION)


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[None]:
    """The builtins plus this plugin, registered by name for one test."""
    with isolated_plugins(("claude-code", claude_plugin, "interplay-claude-code")):
        yield
