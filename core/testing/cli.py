"""Running the ``interplay`` command as a user types it, for plugin tests: the installed
script (or ``python -m interplay.cli``) in a subprocess, with the plugin allow- and block-lists
of the test's own environment taken away, so what is installed is what the command finds.
Also :data:`needs_local_model`, the marks of a test that runs on the embedded model, and
:func:`npm_program`, an agent program from npm (codex, Claude Code) installed into the venv
for the tests that run it, and :func:`eval_with_harness`, a one-episode run with a harness in
the assistant seat, as a user starts it."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

#: Variables that choose which plugins load; a test names its own or none.
PLUGIN_VARS = ("INTERPLAY_LOAD_PLUGINS", "INTERPLAY_BLOCK_PLUGINS")

needs_local_model = [
    pytest.mark.local_model,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama_cpp is not installed (run: bash .ci/setup)"),
]
"""``pytestmark = needs_local_model``: the test runs on the embedded llama.cpp model (marked
``local_model``), and is skipped, saying how to install it, where it is not installed."""


def interplay_command() -> list[str]:
    """The argv that starts the ``interplay`` command of the running interpreter."""
    script = Path(sys.executable).parent / "interplay"
    return [str(script)] if script.exists() else [sys.executable, "-m", "interplay.cli"]


def command_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the plugin lists, with ``env`` over it."""
    environ = {k: v for k, v in os.environ.items() if k not in PLUGIN_VARS}
    environ.update(env or {})
    return environ


def run_interplay(*args: str, env: Mapping[str, str] | None = None, timeout: float = 300,
                  cwd: str | Path | None = None) -> subprocess.CompletedProcess[str]:
    """``interplay ARGS...`` in a subprocess, its output captured as text."""
    return subprocess.run([*interplay_command(), *args], capture_output=True, text=True,
                          env=command_env(env), timeout=timeout, cwd=cwd)


def eval_with_harness(harness: str, out: Path, *, timeout: float = 300,
                      **harness_config: Any) -> tuple[subprocess.CompletedProcess[str], int]:
    """``interplay eval echo -n 1`` in a subprocess, as a user runs it, with ``harness`` in the
    assistant seat and ``harness_config`` its settings (``binary=...``), results in ``out``,
    on a scripted model that answers **once** ("Hello."; a second request gets a 500,
    ``scripted model: script exhausted``): the command's result, and how many requests the
    model got. What a program harness's user meets as a run starts (its program missing,
    of another version)."""
    from interplay.testing.scripted import ScriptedModel

    settings = [arg for key, value in harness_config.items()
                for arg in ("--set", f"seats.assistant.harness_config.{key}={json.dumps(value)}")]
    with ScriptedModel(["Hello."]) as model:
        done = run_interplay("eval", "echo", "-n", "1", "--base-url", model.base_url,
                             "-o", str(out), "--no-report",
                             "--set", f"seats.assistant.harness={json.dumps(harness)}",
                             *settings, timeout=timeout)
        return done, len(model.requests)


def npm_program(name: str, package: str, version: str) -> str:
    """The executable ``name`` of the npm ``package`` at ``version``: next to the running
    Python (the venv's bin, where ``bash .ci/setup --test`` links it) when it is there, else
    installed with npm into ``<venv>/npm`` and linked there, once. Skips the test, saying
    what to install, when it is missing and npm is absent."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"{name} is not installed and npm is absent to install it (needs "
                    f"`npm install {package}@{version}`)")
    prefix = Path(sys.prefix) / "npm"
    subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                    f"{package}@{version}"], check=True, timeout=900)
    if not beside.exists():
        beside.symlink_to(prefix / "node_modules" / ".bin" / name)
    return str(beside)
