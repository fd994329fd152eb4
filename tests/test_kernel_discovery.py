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
PACKAGES = ("good", "bad_import", "bad_hook", "clash", "mistakes")

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
            "interplay.builtin_verifiers.plugin", "interplay.builtin_sandboxes.plugin",
            "interplay.export.plugin"}


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


def test_a_name_from_a_plugin_that_failed_to_import_says_why(run: Run, tmp_path: Path) -> None:
    out = run("eval", "echo", "-n", "1", "-o", str(tmp_path / "run"), "--set",
              'seats.assistant.harness="fixture_echo2"', packages=["good", "bad_import"])
    assert out.returncode == 2, out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("interplay: error: ")]
    assert "unknown harness 'fixture_echo2'" in line
    assert ("plugin fixture_bad_import (interplay-fixture-bad-import 0.0.1) failed to load: "
            "RuntimeError: fixture_bad_import_plugin is broken on purpose") in line
    assert "fixture_bad_import_plugin/__init__.py:3)" in line


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
    probe = ("from interplay import InterplayError\n"
             "from interplay.plugins import host as plugins\n"
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


def _loaded(infos: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, info in infos.items() if info["skipped"] is None}


def test_allow_list_loads_only_the_named_plugins(run: Run) -> None:
    packages = ["good", "bad_import", "clash"]
    infos = _plugins(run, packages=packages,
                     env={"INTERPLAY_LOAD_PLUGINS": "interplay-fixture-good"})
    assert "fixture_good" in _loaded(infos)
    assert "fixture_bad_import" not in _loaded(infos) and "fixture_clash" not in _loaded(infos)
    assert infos["fixture_clash"]["skipped"] == "not named in INTERPLAY_LOAD_PLUGINS"
    assert infos["fixture_clash"]["registered"] == {} and infos["fixture_clash"]["error"] is None
    assert BUILTINS <= _loaded(infos)

    by_entry_point = _plugins(run, packages=packages,
                              env={"INTERPLAY_LOAD_PLUGINS": "fixture_clash, fixture_good"})
    assert {"fixture_good", "fixture_clash"} <= _loaded(by_entry_point)
    assert "fixture_bad_import" not in _loaded(by_entry_point)


def test_empty_allow_list_loads_no_external_plugin(run: Run) -> None:
    out = run("plugins", "--json", packages=["good", "bad_import"],
              env={"INTERPLAY_LOAD_PLUGINS": ""})
    assert out.returncode == 0, out.stderr
    infos = {info["name"]: info for info in json.loads(out.stdout)}
    assert {"fixture_good", "fixture_bad_import"} <= set(infos)
    assert _loaded(infos) == set()
    assert {info["skipped"] for info in infos.values()} == {
        "INTERPLAY_LOAD_PLUGINS is set and empty"}
    assert _loaded(_plugins(run, packages=["good"], env={"INTERPLAY_LOAD_PLUGINS": ""})) == (
        BUILTINS)


def test_the_plugins_command_tells_not_loaded_from_not_installed(run: Run) -> None:
    out = run("plugins", packages=["good"], env={"INTERPLAY_LOAD_PLUGINS": ""})
    assert out.returncode == 0, out.stderr
    assert "no external plugins installed" not in out.stdout
    assert out.stdout.startswith("no external plugins loaded")
    assert ("fixture_good  (interplay-fixture-good 1.2.3)\n"
            "  not loaded: INTERPLAY_LOAD_PLUGINS is set and empty") in out.stdout
    blocked = run("plugins", packages=["good"], env={"INTERPLAY_BLOCK_PLUGINS": "fixture_good"})
    assert "  not loaded: named in INTERPLAY_BLOCK_PLUGINS" in blocked.stdout


def test_block_list_skips_the_named_plugins(run: Run) -> None:
    packages = ["good", "bad_import", "bad_hook"]
    infos = _plugins(run, packages=packages, env={
        "INTERPLAY_BLOCK_PLUGINS": "fixture_bad_import,interplay-fixture-bad-hook"})
    assert "fixture_good" in _loaded(infos)
    assert "fixture_bad_import" not in _loaded(infos)
    assert "fixture_bad_hook" not in _loaded(infos)
    assert infos["fixture_bad_import"]["error"] is None  # never imported

    both = _plugins(run, packages=packages, env={
        "INTERPLAY_LOAD_PLUGINS": "fixture_good,fixture_bad_hook",
        "INTERPLAY_BLOCK_PLUGINS": "fixture_good"})
    assert "fixture_bad_hook" in _loaded(both)
    assert "fixture_good" not in _loaded(both)


# -- a plugin author's mistakes, as an installed package (tests/fixtures/plugins/mistakes_plugin):
# one entry point per mistake, each reported on its own while the rest keeps working.

MISTAKES = FIXTURES / "mistakes_plugin" / "fixture_mistakes_plugin"


def _line_of(module: str, text: str) -> int:
    lines = (MISTAKES / f"{module}.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_a_package_registering_a_builtin_name_cannot_take_the_builtin_down(
        run: Run, scripted_model: Any, tmp_path: Path) -> None:
    """The builtin env that uses `exact` runs on the builtin `exact`; the clash is reported
    by `plugins` and `list`, text and JSON."""
    model = scripted_model(lambda request: request.last_user_text().rsplit(" ", 1)[-1])
    out = run("eval", "echo-toml", "-n", "2", "--base-url", model.base_url, "--quiet",
              "--no-report", "-o", str(tmp_path / "run"), packages=["mistakes"])
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["reward_mean"] == 1.0  # the shadowing verifier scores every episode 0

    infos = _plugins(run, packages=["mistakes"])
    shadow = infos["fixture_shadow"]
    assert shadow["error"] is None
    expected = {"kind": "verifiers", "name": "exact",
                "packages": ["interplay", "interplay-fixture-mistakes"], "used": "interplay"}
    assert shadow["clashes"] == [expected]
    assert expected in infos["interplay.builtin_verifiers.plugin"]["clashes"]
    assert shadow["registered"]["harnesses"] == ["fixture_shadow_echo"]

    verifiers = _listed(run, "verifiers", packages=["mistakes"])
    assert verifiers["exact"]["package"] == "interplay"
    assert verifiers["exact"]["clash"] == expected
    assert verifiers["contains"]["clash"] is None
    assert "fixture_shadow_echo" in _listed(run, "harnesses", packages=["mistakes"])

    text = run("plugins", packages=["mistakes"])
    assert ("CLASH: verifier 'exact' registered by interplay and interplay-fixture-mistakes; "
            "the builtin one is used") in text.stdout
    listed = run("list", "verifiers", packages=["mistakes"])
    (exact_line,) = [line for line in listed.stdout.splitlines() if line.startswith("exact ")]
    assert "[interplay]  CLASH:" in exact_line


def test_each_mistake_is_reported_on_its_own_and_nothing_else_breaks(run: Run) -> None:
    out = run("plugins", "--all", "--json", packages=["mistakes"])
    assert out.returncode == 0, out.stderr
    infos = {info["name"]: info for info in json.loads(out.stdout)}  # prints went to stderr
    assert "fixture_shadow: loading" in out.stderr and "fixture_shadow: registering" in out.stderr
    errors = {name: infos[name]["error"] for name in infos if name.startswith("fixture_")}

    # sys.exit() and a BaseException at import are failed imports like any other
    assert errors["fixture_exits"].startswith("SystemExit: 3 (")
    assert errors["fixture_exits"].endswith(f"exits.py:{_line_of('exits', 'sys.exit(3)')})")
    assert errors["fixture_base_exception"].startswith(
        "GiveUp: fixture_base_exception gives up (")
    assert errors["fixture_hook_exits"].startswith(
        "register_verifiers: SystemExit: fixture_hook_exits leaves (")
    # a refused register() points at the plugin's own line, not the kernel's
    assert errors["fixture_refused"].startswith(
        "register_verifiers: InterplayError: interplay-fixture-mistakes: register() for "
        "verifiers takes a subclass of interplay.Verifier, got <")
    refused_line = _line_of("refused", "register(Half())")
    assert errors["fixture_refused"].endswith(f"refused.py:{refused_line})")
    assert "core/plugins/host.py" not in errors["fixture_refused"]
    assert errors["fixture_unmarked"] == (
        "register_verifiers is not marked as a hook; decorate it with @interplay.hookimpl "
        "(from interplay import hookimpl)")
    assert errors["fixture_returns"].startswith(
        "register_verifiers: InterplayError: register_verifiers returned list; hooks return "
        "nothing: call register(cls) for each class instead")
    assert "Config must be a class made with @attrs.define, got {'times': 2}" in (
        errors["fixture_bad_config"])
    assert errors["fixture_shadow"] is None
    assert all(infos[name]["error"] is None for name in BUILTINS)

    text = run("plugins", packages=["mistakes"])
    assert text.returncode == 0 and "Traceback" not in text.stderr
    for name in ("fixture_exits", "fixture_base_exception", "fixture_refused"):
        assert f"{name}  (interplay-fixture-mistakes 0.4.0)\n  FAILED: " in text.stdout
    envs = run("list", "envs", packages=["mistakes"])
    assert envs.returncode == 0 and "echo-toml" in envs.stdout, envs.stderr


def test_listing_into_a_closed_pipe_ends_quietly(installed: dict[str, Path]) -> None:
    """`interplay list verifiers | head -0`: the reader is gone before anything is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([*_interplay_command(), "list", "verifiers"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              env=_environ(installed, [], None))
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.returncode == 141  # as a writer killed by SIGPIPE, which shells expect



def test_plugin_failures_and_clashes_are_logged_so_an_operator_can_read_them(run: Run) -> None:
    """The log names a clash's packages and carries a plugin's import error, both the
    plugins' own words (no user data)."""
    out = run("--log-format", "json", "plugins", packages=["good", "bad_import", "clash"])
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    [failed] = [x for x in lines if x["event"] == "plugins.load_failed"]
    assert failed["package"] == "interplay-fixture-bad-import"
    assert "RuntimeError: fixture_bad_import_plugin is broken on purpose" in failed["error"]
    [clash] = [x for x in lines if x["event"] == "plugins.clash"]
    assert sorted(clash["packages"]) == ["interplay-fixture-clash", "interplay-fixture-good"]
    assert "redacted" not in out.stderr
