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


def test_plugins_lists_the_mini_swe_agent_plugin_and_describe_shows_its_settings() -> None:
    rows = json.loads(interplay("plugins", "--json"))
    row = next(r for r in rows if r["package"] == "interplay-mini-swe-agent")
    assert (row["name"], row["error"], row["builtin"]) == ("mini-swe-agent", None, False)
    assert row["registered"] == {"harnesses": ["mini-swe-agent"]}
    described = interplay("describe", "harnesses", "mini-swe-agent")
    for setting in ("config", "step_limit", "cost_limit", "wall_time_limit_s",
                    "command_timeout_s", "timeout_s", "shell"):
        assert setting in described
