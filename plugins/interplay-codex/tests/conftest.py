"""Fixtures of the codex harness's tests.

The tests run the real codex CLI. When it is missing and npm is present, the pinned version is
installed into the venv (``<venv>/npm``, linked into the venv's bin) once per session; only
without npm do the codex tests skip. Every test starts from a plugin host holding the builtins
and this plugin alone, so nothing else that happens to be installed takes part.
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
from interplay_codex import plugin as codex_plugin
from interplay_codex.command_line import CODEX_VERSION, find_codex


@pytest.fixture(scope="session")
def codex_bin() -> str:
    """The codex executable, installed into the venv with npm if missing."""
    try:
        return find_codex()
    except InterplayError:
        pass
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"the codex CLI is not installed and npm is absent to install it "
                    f"(needs `npm install @openai/codex@{CODEX_VERSION}`)")
    prefix = Path(sys.prefix) / "npm"
    subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                    f"@openai/codex@{CODEX_VERSION}"], check=True, timeout=900)
    link = Path(sys.executable).parent / "codex"
    if not link.exists():
        link.symlink_to(prefix / "node_modules" / ".bin" / "codex")
    return find_codex()


@pytest.fixture(autouse=True)
def plugin_host() -> Iterator[None]:
    """The builtins plus this plugin, registered by name for one test."""
    with isolated_plugins(("codex", codex_plugin, "interplay-codex")):
        yield
