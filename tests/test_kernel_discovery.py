"""Plugin discovery for real: third-party packages built and pip-installed from
tests/fixtures/plugins/, then found by the `interplay` command through their entry points."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

# Each test builds and pip-installs fixture packages.
pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures" / "plugins"
PACKAGES = ("good", "bad_import", "bad_hook", "clash")

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each fixture package pip-installed into a target folder of its own."""
    targets: dict[str, Path] = {}
    for name in PACKAGES:
        root = tmp_path_factory.mktemp(f"{name}_plugin")
        source = root / "src"
        # Build from a copy so the build leaves nothing behind in the repository.
        shutil.copytree(FIXTURES / f"{name}_plugin", source)
        target = root / "site"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
             "--no-build-isolation", "--no-index", "--disable-pip-version-check",
             "--target", str(target), str(source)],
            check=True, capture_output=True, text=True,
        )
        targets[name] = target
    return targets


def _interplay_command() -> list[str]:
    script = Path(sys.executable).parent / "interplay"
    return [str(script)] if script.exists() else [sys.executable, "-m", "interplay.cli"]


def _environ(installed: dict[str, Path], packages: Sequence[str],
             env: dict[str, str] | None) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("INTERPLAY_LOAD_PLUGINS", "INTERPLAY_BLOCK_PLUGINS")}
    paths = [str(installed[p]) for p in packages]
    if environ.get("PYTHONPATH"):
        paths.append(environ["PYTHONPATH"])
    environ["PYTHONPATH"] = os.pathsep.join(paths)
    environ.update(env or {})
    return environ


@pytest.fixture
def run(installed: dict[str, Path]) -> Run:
    """Run the `interplay` command with the given fixture packages on its path."""

    def run_(*args: str, packages: Sequence[str] = (), env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*_interplay_command(), *args], capture_output=True, text=True,
                              env=_environ(installed, packages, env), timeout=120)

    return run_


def _plugins(run: Run, **kwargs: Any) -> dict[str, dict[str, Any]]:
    out = run("plugins", "--all", "--json", **kwargs)
    assert out.returncode == 0, out.stderr
    return {info["name"]: info for info in json.loads(out.stdout)}


def _listed(run: Run, kind: str, **kwargs: Any) -> dict[str, dict[str, Any]]:
    out = run("list", kind, "--json", **kwargs)
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout)}


BUILTINS = {"interplay.builtin_harnesses.plugin", "interplay.builtin_envs.plugin",
            "interplay.builtin_verifiers.plugin"}


def test_installed_plugin_is_discovered_through_its_entry_point(run: Run) -> None:
    infos = _plugins(run, packages=["good"])
    good = infos["fixture_good"]
    assert good["package"] == "interplay-fixture-good"
    assert good["version"] == "1.2.3"
    assert good["builtin"] is False
    assert good["error"] is None
    assert good["hooks"] == ["register_harnesses", "register_verifiers"]
    assert good["registered"] == {"verifiers": ["fixture_exact"],
                                  "harnesses": ["fixture_echo"]}
    assert BUILTINS <= set(infos)

    verifiers = _listed(run, "verifiers", packages=["good"])
    assert verifiers["fixture_exact"]["package"] == "interplay-fixture-good"
    assert verifiers["fixture_exact"]["summary"].startswith("Scores 1 when")
    harnesses = _listed(run, "harnesses", packages=["good"])
    assert harnesses["fixture_echo"]["plugin"] == "fixture_good"

    text = run("list", "verifiers", packages=["good"])
    assert "fixture_exact" in text.stdout
    assert "[interplay-fixture-good]" in text.stdout


def test_without_the_package_nothing_is_found(run: Run) -> None:
    assert "fixture_good" not in _plugins(run)
    assert "fixture_exact" not in _listed(run, "verifiers")


def test_broken_plugins_are_reported_and_the_rest_still_works(run: Run) -> None:
    packages = ["good", "bad_import", "bad_hook"]
    infos = _plugins(run, packages=packages)

    bad_import = infos["fixture_bad_import"]
    assert bad_import["package"] == "interplay-fixture-bad-import"
    assert bad_import["version"] == "0.0.1"
    assert "RuntimeError: fixture_bad_import_plugin is broken on purpose" in bad_import["error"]

    bad_hook = infos["fixture_bad_hook"]
    assert bad_hook["package"] == "interplay-fixture-bad-hook"
    assert bad_hook["version"] == "0.0.2"
    assert bad_hook["error"].startswith("register_verifiers: ValueError: ")
    assert bad_hook["registered"] == {}

    assert infos["fixture_good"]["error"] is None
    assert BUILTINS <= set(infos)
    assert all(infos[name]["error"] is None for name in BUILTINS)
    assert "fixture_exact" in _listed(run, "verifiers", packages=packages)

    text = run("plugins", packages=packages)
    assert text.returncode == 0, text.stderr
    assert "interplay-fixture-bad-import 0.0.1" in text.stdout
    assert "FAILED: RuntimeError: fixture_bad_import_plugin is broken on purpose" in text.stdout
    assert "FAILED: register_verifiers: ValueError" in text.stdout
    assert "Traceback" not in text.stderr


def test_a_name_registered_by_two_packages_is_an_error_naming_both(
        run: Run, installed: dict[str, Path]) -> None:
    packages = ["good", "clash"]
    text = run("plugins", packages=packages)
    assert text.returncode == 0, text.stderr
    assert ("CLASH: verifier 'fixture_exact' registered by interplay-fixture-good and "
            "interplay-fixture-clash") in text.stdout or (
            "CLASH: verifier 'fixture_exact' registered by interplay-fixture-clash and "
            "interplay-fixture-good") in text.stdout

    harnesses = _listed(run, "harnesses", packages=packages)
    assert "fixture_echo" in harnesses  # the rest of both packages still works

    # Looking the name up is an error that names both packages and says what to do.
    probe = ("from interplay import InterplayError, plugins\n"
             "try:\n"
             "    plugins.get('verifiers', 'fixture_exact')\n"
             "except InterplayError as exc:\n"
             "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=_environ(installed, packages, None), timeout=120)
    assert out.returncode == 0, out.stderr
    message = out.stdout.strip()
    assert "verifier 'fixture_exact' is registered by both" in message
    assert "'interplay-fixture-good'" in message and "'interplay-fixture-clash'" in message
    assert "INTERPLAY_BLOCK_PLUGINS" in message


def test_allow_list_loads_only_the_named_plugins(run: Run) -> None:
    packages = ["good", "bad_import", "clash"]
    infos = _plugins(run, packages=packages,
                     env={"INTERPLAY_LOAD_PLUGINS": "interplay-fixture-good"})
    assert "fixture_good" in infos
    assert "fixture_bad_import" not in infos and "fixture_clash" not in infos
    assert BUILTINS <= set(infos)

    by_entry_point = _plugins(run, packages=packages,
                              env={"INTERPLAY_LOAD_PLUGINS": "fixture_clash, fixture_good"})
    assert {"fixture_good", "fixture_clash"} <= set(by_entry_point)
    assert "fixture_bad_import" not in by_entry_point


def test_empty_allow_list_loads_no_external_plugin(run: Run) -> None:
    out = run("plugins", "--json", packages=["good", "bad_import"],
              env={"INTERPLAY_LOAD_PLUGINS": ""})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    infos = _plugins(run, packages=["good"], env={"INTERPLAY_LOAD_PLUGINS": ""})
    assert set(infos) == BUILTINS


def test_block_list_skips_the_named_plugins(run: Run) -> None:
    packages = ["good", "bad_import", "bad_hook"]
    infos = _plugins(run, packages=packages, env={
        "INTERPLAY_BLOCK_PLUGINS": "fixture_bad_import,interplay-fixture-bad-hook"})
    assert "fixture_good" in infos
    assert "fixture_bad_import" not in infos and "fixture_bad_hook" not in infos

    both = _plugins(run, packages=packages, env={
        "INTERPLAY_LOAD_PLUGINS": "fixture_good,fixture_bad_hook",
        "INTERPLAY_BLOCK_PLUGINS": "fixture_good"})
    assert "fixture_bad_hook" in both
    assert "fixture_good" not in both
