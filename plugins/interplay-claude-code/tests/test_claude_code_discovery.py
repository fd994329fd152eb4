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


def test_plugins_lists_the_claude_code_plugin_and_describe_shows_its_settings() -> None:
    rows = json.loads(interplay("plugins", "--json"))
    row = next(r for r in rows if r["package"] == "interplay-claude-code")
    assert (row["name"], row["error"], row["builtin"]) == ("claude-code", None, False)
    assert row["registered"] == {"harnesses": ["claude-code"]}
    described = interplay("describe", "harnesses", "claude-code")
    for setting in ("builtin_tools", "timeout_s", "max_turns", "bare", "workdir"):
        assert setting in described
