"""The runtime never imports what only the tests install (httpx, pytest, hypothesis)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

RUNTIME_MODULES = [
    "interplay", "interplay.cli", "interplay.plugins.host", "interplay.model.client",
    "interplay.interception", "interplay.interception.passthrough", "interplay.model.local",
    "interplay.run.runner", "interplay.run.workers",
    "interplay.report", "interplay.run.episode", "interplay.run.agent", "interplay.testing",
    "interplay.testing.scripted", "interplay.builtin_harnesses.plugin",
    "interplay.builtin_envs.plugin", "interplay.builtin_verifiers.plugin",
    "interplay.builtin_sandboxes.plugin", "interplay.gateway",
    "interplay.view", "interplay.view.app",
]
TEST_ONLY = ["httpx", "pytest", "hypothesis"]


def test_runtime_modules_import_without_test_only_packages() -> None:
    code = "\n".join([
        "import sys",
        *[f"sys.modules[{name!r}] = None" for name in TEST_ONLY],
        *[f"import {name}" for name in RUNTIME_MODULES],
        "from interplay.plugins import host as plugins",
        "plugins.reset(load_entry_points=False)",
        "for kind in plugins.KINDS: plugins.registry().entries(kind)",
        # The MCP SDK the tool gateway imports when it starts.
        "from interplay.gateway.server import _sdk",
        "_sdk()",
        "print('ok')",
    ])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.slow
def test_the_wheel_carries_the_builtins_and_the_report_template(tmp_path: Path) -> None:
    """The builtins live in top-level folders outside core/ and the page is package data: a
    wheel without either installs a command that fails."""
    root = Path(__file__).resolve().parents[1]
    # A copy of the sources alone: a checkout's own build metadata (an editable install's
    # SOURCES.txt) would add the files whatever pyproject.toml says.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "core", "builtin_harnesses", "builtin_envs",
                 "builtin_verifiers", "builtin_sandboxes"):
        copy = shutil.copytree if (root / name).is_dir() else shutil.copy
        copy(root / name, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--quiet", "-w", str(tmp_path), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("interplay-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"interplay/report/templates/{name}"
            for name in ("report.html.j2", "run_figures.html.j2", "report.css", "report.js")} \
        <= names
    assert {f"interplay/view/templates/{name}"
            for name in ("runs.html.j2", "view.js", "view.css", "icon.svg")} <= names
    assert {"interplay/builtin_harnesses/plugin.py", "interplay/builtin_envs/plugin.py",
            "interplay/builtin_verifiers/plugin.py", "interplay/builtin_sandboxes/plugin.py",
            "interplay/builtin_envs/data/echo.jsonl",
            "interplay/builtin_envs/data/always_on_month.json"} <= names
