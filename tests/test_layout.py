"""The layout a newcomer reads stays true: every package folder is in the layout table of
docs/layout.md (and every folder the table names exists), the layers there are the contracts,
and plugins, in plugins/ and in the docs' examples, reach the kernel only through its public
API: ``interplay`` and ``interplay.testing``."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import interplay
from interplay.testing import PUBLIC_API

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".venv", ".git", "build", "dist", "node_modules", "__pycache__"}
PUBLIC = PUBLIC_API
LAYOUT = ROOT / "docs" / "layout.md"
#: The pages a reader meets: the front page and every page of the docs.
PAGES = ["README.md",
         *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))]


def layout_table() -> dict[str, str]:
    """The layout table of docs/layout.md: folder -> import name."""
    text = LAYOUT.read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| `?([^|`]*)`? \|", section, re.M)
    assert rows, "docs/layout.md has no layout table"
    return {folder.rstrip("/"): name for folder, name in rows}


def package_folders() -> dict[str, str]:
    """Every package folder: those pyproject.toml lists (mapped through package-dir) and every
    folder with an __init__.py outside the tests, as folder -> import name."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = setuptools["package-dir"]
    found: dict[str, str] = {}
    for package in setuptools["packages"]:
        parts = package.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in roots:
                folder = Path(roots[".".join(parts[:n])], *parts[n:])
                break
        found[folder.as_posix()] = package
    for init in ROOT.rglob("__init__.py"):
        folder = init.parent.relative_to(ROOT)
        if SKIP & set(folder.parts) or "tests" in folder.parts \
                or any(p.endswith(".egg-info") for p in folder.parts):
            continue
        parts = [folder.name]
        while (ROOT / folder.parent / "__init__.py").exists():
            folder = folder.parent
            parts.insert(0, folder.name)
        found.setdefault(init.parent.relative_to(ROOT).as_posix(), ".".join(parts))
    return found


def test_every_package_folder_is_in_the_layout_table() -> None:
    table = layout_table()
    packages = package_folders()
    assert sorted(set(packages) - set(table)) == []
    assert {f: table[f] for f in packages} == packages


def test_every_folder_in_the_layout_table_exists() -> None:
    assert [f for f in layout_table() if not (ROOT / f).is_dir()] == []


def _interplay_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every reach into the kernel past its public API: imports of an
    interplay module other than the root and interplay.testing, and attribute chains such as
    ``interplay.report.render`` on the imported root."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.split(".")[0] == "interplay" and a.name not in PUBLIC]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "interplay" and node.module not in PUBLIC:
                found.append((node.lineno, node.module))
            elif node.module == "interplay":
                # `from interplay import plugins` takes a submodule, not the API.
                found += [(node.lineno, f"interplay.{a.name}") for a in node.names
                          if a.name not in interplay.__all__
                          and f"interplay.{a.name}" not in PUBLIC]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "interplay" and node.attr not in interplay.__all__
              and f"interplay.{node.attr}" not in PUBLIC):
            found.append((node.lineno, f"interplay.{node.attr}"))
    return found


PLUGIN_FILES = sorted(p for p in (ROOT / "plugins").rglob("*.py")
                      if not SKIP & set(p.parts) and ".egg-info" not in str(p))


def test_the_plugins_import_only_the_public_api() -> None:
    assert PLUGIN_FILES, "no plugin sources found"
    reaches = [f"{p.relative_to(ROOT)}:{line}: {what}" for p in PLUGIN_FILES
               for line, what in _interplay_imports(ast.parse(p.read_text()))]
    assert reaches == []


def test_the_check_finds_a_reach_past_the_public_api() -> None:
    code = ("import interplay.run.episode\nfrom interplay.values.records import Task\n"
            "from interplay import report, Step\nimport interplay\ninterplay.report.render()\n"
            "from interplay.testing import ScriptedModel\nfrom interplay import hookimpl\n")
    assert _interplay_imports(ast.parse(code)) == [
        (1, "interplay.run.episode"), (2, "interplay.values.records"),
        (3, "interplay.report"), (5, "interplay.report")]


def _parse(block: str) -> ast.AST:
    try:
        return ast.parse(block)
    except SyntaxError:  # a hook's signature, shown without a body
        return ast.parse(block.rstrip() + ": ...")


@pytest.mark.parametrize("doc", PAGES)
def test_the_docs_examples_import_only_the_public_api(doc: str) -> None:
    text = (ROOT / doc).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    reaches = [what for block in blocks for _, what in _interplay_imports(_parse(block))]
    # Names in the prose, too: `interplay.x.Y` for something the root exports is a stale path.
    reaches += [m for m in re.findall(r"`(interplay\.[a-z_]+(?:\.[A-Za-z_]+)+)", text)
                if m.split(".")[1] not in ("testing", "builtin_envs", "builtin_verifiers",
                                           "builtin_harnesses")
                and m.split(".")[-1] in interplay.__all__]
    assert reaches == []


def main_job() -> list[str]:
    """The README's first command after setup: ``interplay eval ...`` as its arguments."""
    first = (ROOT / "README.md").read_text().split("```\n", 2)[1].splitlines()[0]
    command = first.split("#", 1)[0].split("&&", 1)[1].split()
    assert command[0] == ".venv/bin/interplay", first
    return command[1:]


def test_the_readmes_main_job_is_a_run_that_loads_on_the_embedded_model() -> None:
    """The first command a newcomer runs parses and resolves (env, settings, seats) on the
    embedded model, and the README says what it runs."""
    import shlex

    from interplay import cli
    from interplay.run.config import resolve

    args = main_job()
    parsed = cli.build_parser().parse_args(args)
    assert parsed.command == "eval" and parsed.base_url is None
    cfg, env, _ = resolve(cli._cli_data(parsed))
    assert cfg.model.base_url is None and env.name == parsed.env
    assert f"`{shlex.join(['interplay', *args])}`" in (ROOT / "README.md").read_text()


def importlinter() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    return config["importlinter"]  # type: ignore[no-any-return]


def contract(contract_id: str) -> dict[str, Any]:
    (found,) = [c for c in importlinter()["contracts"] if c["id"] == contract_id]
    return found  # type: ignore[no-any-return]


def test_the_layers_page_is_the_contracts() -> None:
    text = LAYOUT.read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [cell.replace("\\|", "|") for cell in re.findall(r"^\| `(.+?)` \| ", section, re.M)]
    assert rows == contract("layers")["layers"]


def test_every_plugin_is_held_to_the_public_api_and_kept_apart() -> None:
    """A plugin added under plugins/ is analysed, kept on the public API, independent of the
    others, and never imported by the kernel: every plugin contract names it."""
    packages = sorted(p.parent.name for p in (ROOT / "plugins").glob("*/*/__init__.py")
                      if not p.parent.name.endswith(".egg-info"))
    assert packages, "no plugin packages found"
    assert importlinter()["root_packages"] == ["interplay", *packages]
    assert sorted(contract("plugins-public-api")["source_modules"]) == packages
    assert sorted(contract("plugins-independent")["modules"]) == packages
    assert sorted(contract("kernel-no-plugins")["forbidden_modules"]) == packages
