"""Writes the settings reference, docs/reference/settings/<kind>.md, from the settings classes
of the builtins and of the plugins in plugins/ (each installed, as `.ci/setup --test` does):

    .venv/bin/python docs/reference/generate.py

tests/test_describe.py fails when the pages checked in differ from what this writes.
`interplay describe --markdown DIR` writes the same pages for whatever is installed.
"""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
from pathlib import Path

from interplay import hookspecs, plugins
from interplay.describe import reference_pages

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "reference" / "settings"
COMMAND = ".venv/bin/python docs/reference/generate.py"


def repo_plugins() -> list[str]:
    """The distribution names of the plugins in plugins/."""
    return sorted(tomllib.loads(p.read_text())["project"]["name"]
                  for p in ROOT.glob("plugins/*/pyproject.toml"))


def register() -> list[str]:
    """A plugin host holding the builtins and the plugins in plugins/ (and nothing else that
    may be installed); the plugins' distribution names."""
    wanted = repo_plugins()
    host = plugins.reset(load_entry_points=False)
    found = set()
    for ep in importlib.metadata.entry_points(group=hookspecs.PROJECT):
        if ep.dist is not None and ep.dist.name in wanted:
            host.register_module(ep.load(), ep.name, package=ep.dist.name)
            found.add(ep.dist.name)
    missing = sorted(set(wanted) - found)
    if missing:
        raise SystemExit(f"plugins not installed: {', '.join(missing)}; run .ci/setup --test")
    return wanted


def pages() -> dict[str, str]:
    """The reference pages of the builtins and the plugins in plugins/."""
    return reference_pages(["interplay", *register()], command=COMMAND)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, page in pages().items():
        (OUT / name).write_text(page)
        print(OUT / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
