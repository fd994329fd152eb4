"""The installed plugin is found through its entry point, by the real ``interplay`` command."""

from __future__ import annotations

import json

import pytest

from interplay.testing import run_interplay

# Each test runs the real command, which loads every installed plugin.
pytestmark = pytest.mark.slow


def interplay(*args: str) -> str:
    done = run_interplay(*args, timeout=120)
    assert done.returncode == 0, done.stderr
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
