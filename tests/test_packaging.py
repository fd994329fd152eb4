"""The runtime never imports what only the tests install (httpx, pytest, hypothesis)."""

from __future__ import annotations

import subprocess
import sys

RUNTIME_MODULES = [
    "interplay", "interplay.cli", "interplay.plugins", "interplay.model.client",
    "interplay.interception", "interplay.interception.passthrough", "interplay.model.local",
    "interplay.run.runner", "interplay.run.workers",
    "interplay.report", "interplay.run.episode", "interplay.run.agent", "interplay.testing",
    "interplay.testing.scripted", "interplay.builtin_harnesses.plugin",
    "interplay.builtin_envs.plugin", "interplay.builtin_verifiers.plugin",
]
TEST_ONLY = ["httpx", "pytest", "hypothesis"]


def test_runtime_modules_import_without_test_only_packages() -> None:
    code = "\n".join([
        "import sys",
        *[f"sys.modules[{name!r}] = None" for name in TEST_ONLY],
        *[f"import {name}" for name in RUNTIME_MODULES],
        "from interplay import plugins",
        "plugins.reset(load_entry_points=False)",
        "for kind in plugins.KINDS: plugins.registry().entries(kind)",
        "print('ok')",
    ])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
