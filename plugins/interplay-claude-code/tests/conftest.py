"""Fixtures of the Claude Code harness's tests.

The tests run the real Claude Code CLI. When it is missing and npm is present, the pinned
version is installed into the venv (``<venv>/npm``, linked into the venv's bin) once per
session; only without npm do the tests skip. Every test starts from a plugin host holding the
builtins and this plugin alone, so nothing else that happens to be installed takes part.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from interplay import InterplayError
from interplay.testing import isolated_plugins
from interplay_claude_code import plugin as claude_plugin
from interplay_claude_code.command_line import CLAUDE_CODE_VERSION, NPM_PACKAGE, find_claude


@pytest.fixture(scope="session")
def claude_bin() -> str:
    """The claude executable, installed into the venv with npm if missing."""
    try:
        return find_claude()
    except InterplayError:
        pass
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"the Claude Code CLI is not installed and npm is absent to install it "
                    f"(needs `npm install {NPM_PACKAGE}@{CLAUDE_CODE_VERSION}`)")
    prefix = Path(sys.prefix) / "npm"
    subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                    f"{NPM_PACKAGE}@{CLAUDE_CODE_VERSION}"], check=True, timeout=900)
    link = Path(sys.executable).parent / "claude"
    if not link.exists():
        link.symlink_to(prefix / "node_modules" / ".bin" / "claude")
    return find_claude()


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[None]:
    """The builtins plus this plugin, registered by name for one test."""
    with isolated_plugins(("claude-code", claude_plugin, "interplay-claude-code")):
        yield
