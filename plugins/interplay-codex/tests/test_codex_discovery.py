"""The installed plugin is found through its entry point, by the real ``interplay`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Each test runs the real command, which loads every installed plugin.
pytestmark = pytest.mark.slow


def interplay(*args: str) -> str:
    exe = Path(sys.executable).parent / "interplay"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "interplay.cli"]
    # The allow/block lists of the caller's environment must not hide the plugin.
    env = {k: v for k, v in os.environ.items()
           if k not in ("INTERPLAY_LOAD_PLUGINS", "INTERPLAY_BLOCK_PLUGINS")}
    done = subprocess.run([*argv, *args], capture_output=True, text=True, env=env, timeout=120,
                          check=True)
    return done.stdout


def test_plugins_lists_the_codex_plugin() -> None:
    rows = json.loads(interplay("plugins", "--json"))
    row = next(r for r in rows if r["package"] == "interplay-codex")
    assert row["name"] == "codex"
    assert row["error"] is None
    assert row["builtin"] is False
    assert row["registered"] == {"harnesses": ["codex"]}


def test_list_harnesses_shows_codex() -> None:
    lines = interplay("list", "harnesses").splitlines()
    row = next(line for line in lines if line.split()[0] == "codex")
    assert "[interplay-codex]" in row
