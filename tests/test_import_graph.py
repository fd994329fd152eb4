"""The import graph import-linter checks is the whole package, builtins included, and has no
cycle inside any package.

The builtins live in top-level folders outside ``core/`` and are mapped into the ``interplay``
package by pyproject.toml (``[tool.setuptools.package-dir]``). import-linter reads a package
from the one folder ``importlib`` finds it in, so .ci/setup installs in setuptools' strict
editable mode: the installed ``interplay`` is one folder of links with the wheel's layout, and
that folder is what both Python and ``lint-imports`` read. These tests hold the installed
folder to the tree, break the layers on purpose in a copy laid out as the wheel is, and look
for cycles among each package's modules (type-only and function-level imports included).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import interplay

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def package_dirs() -> dict[str, str]:
    """pyproject.toml's package-dir: import name -> folder, the root package first."""
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return dict(sorted(found["package-dir"].items()))


def sources() -> dict[str, Path]:
    """Every module of the package as the wheel lays it out (path under the package's
    folder -> file in the tree)."""
    found: dict[str, Path] = {}
    for name, folder in package_dirs().items():
        inside = Path(*name.split(".")[1:])
        for path in (ROOT / folder).rglob("*.py"):
            found[(inside / path.relative_to(ROOT / folder)).as_posix()] = path
    return found


def test_the_installed_package_is_the_tree() -> None:
    """What Python imports and lint-imports reads is every module of core/ and the builtin
    folders, each the very file in the tree (a module added since the install needs
    `bash .ci/setup` again: the install links files)."""
    installed = Path(interplay.__file__).parent
    files = sources()
    assert any(p.startswith("builtin_envs/") for p in files)
    missing = sorted(p for p in files if not (installed / p).is_file())
    assert missing == [], f"run `bash .ci/setup` again: the installed package lacks {missing}"
    assert [p for p, source in files.items()
            if not os.path.samefile(installed / p, source)] == []


def scratch_copy(tmp_path: Path) -> Path:
    """The package copied as the wheel lays it out, beside a copy of pyproject.toml (the
    contracts); returns the folder to put on the path."""
    site = tmp_path / "site"
    for name, folder in package_dirs().items():
        shutil.copytree(ROOT / folder, site.joinpath(*name.split(".")), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return site


def run_in(tmp_path: Path, site: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)},
                          capture_output=True, text=True, timeout=300)


def add_import(site: Path, module: str, line: str) -> None:
    path = site.joinpath(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")


def test_the_copy_keeps_the_contracts(tmp_path: Path) -> None:
    done = run_in(tmp_path, scratch_copy(tmp_path), [str(LINT_IMPORTS), "--no-cache"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "chain"), [
    # The kernel: a record reaching up into the run.
    ("interplay.values.records", "from interplay.run import episode",
     "interplay.values.records -> interplay.run.episode"),
    # A builtin in its top-level folder: a verifier reaching up into the envs.
    ("interplay.builtin_verifiers.match", "from interplay.builtin_envs import wordle",
     "interplay.builtin_verifiers.match -> interplay.builtin_envs.wordle"),
    # A builtin reaching up into another sibling it must not know.
    ("interplay.builtin_harnesses.chat", "import interplay.builtin_verifiers.rubric",
     "interplay.builtin_harnesses.chat -> interplay.builtin_verifiers.rubric"),
])
def test_an_upward_import_fails_with_its_chain(tmp_path: Path, module: str, line: str,
                                               chain: str) -> None:
    site = scratch_copy(tmp_path)
    add_import(site, module, line)
    done = run_in(tmp_path, site, [str(LINT_IMPORTS), "--no-cache"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "interplay's layers" in done.stdout and "BROKEN" in done.stdout
    assert chain in " ".join(done.stdout.split())


#: Each package whose children import each other in a circle -> the imports grimp would
#: remove to break it. A package's children are its modules and subpackages, a subpackage
#: taken with everything in it; TYPE_CHECKING and function-level imports count.
CYCLES = """
import json
import grimp
graph = grimp.build_graph("interplay", cache_dir=None)
found = {}
for package in sorted(m for m in graph.modules if graph.find_children(m)):
    breakers = graph.nominate_cycle_breakers(package)
    if breakers:
        found[package] = sorted(map(list, breakers))
print(json.dumps(found))
"""


def cycles(tmp_path: Path, site: Path | None = None) -> dict[str, list[list[str]]]:
    env = {**os.environ}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    done = subprocess.run([sys.executable, "-c", CYCLES], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_no_package_has_an_import_cycle_inside_it(tmp_path: Path) -> None:
    assert cycles(tmp_path) == {}


def test_a_cycle_inside_a_package_is_found(tmp_path: Path) -> None:
    site = scratch_copy(tmp_path)
    # The prompts are below the loop that sends them; a type-only import back is a cycle too.
    add_import(site, "interplay.builtin_envs.always_on.prompts",
               "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
               "    from interplay.builtin_envs.always_on.loop import Loop")
    assert cycles(tmp_path, site) == {"interplay.builtin_envs.always_on": [
        ["interplay.builtin_envs.always_on.prompts", "interplay.builtin_envs.always_on.loop"]]}
