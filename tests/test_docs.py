"""The docs' snippets run as written: the front page's plugin registers and scores, every
command line in the README and docs/ parses as the command reads it (and, for a builtin env,
resolves into a run), and every TOML block of the run's settings loads as a config."""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest
import trustme

from interplay import cli, lookup
from interplay.config import loading as config_mod
from interplay.plugins import host as plugins
from interplay.run.config import flatten, resolve
from interplay.testing import isolated_plugins, run_scripted

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: The pages whose TOML blocks are a run's settings (the others hold env, scenario and package
#: files, which the tests of those read).
SETTINGS_PAGES = [ROOT / "docs" / "config.md", ROOT / "docs" / "scaling.md"]


def blocks(page: Path, lang: str | None = None) -> list[tuple[str, str]]:
    """(language, body) of every fenced block of ``page``, or of those in ``lang``."""
    found = re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), re.S | re.M)
    return [(tag, body) for tag, body in found if lang is None or tag == lang]


def command_lines() -> list[tuple[str, list[str]]]:
    """(page, argv after the program) of every ``interplay`` command line in a block that is
    not a synopsis (a ```text block)."""
    found = []
    for page in PAGES:
        for tag, body in blocks(page):
            if tag == "text":
                continue
            for line in body.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True) if line.strip() else []
                if words and words[0] in ("interplay", ".venv/bin/interplay"):
                    found.append((page.relative_to(ROOT).as_posix(), words[1:]))
    return found


def readme_plugin() -> types.ModuleType:
    (block,) = [b for _, b in blocks(ROOT / "README.md", "python")]
    module = types.ModuleType("readme_plugin")
    exec(compile(block, str(ROOT / "README.md"), "exec"), module.__dict__)
    return module


def test_the_front_pages_plugin_scores_a_run(tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "When does the shop open?"}\n')
    (tmp_path / "brief.toml").write_text(
        'name = "brief-env"\ntaskset = "tasks.jsonl"\n[seats.assistant]\nharness = "null"\n'
        '[[steps]]\nkind = "one_shot"\nseat = "assistant"\n[[verifiers]]\nkind = "brief"\n')
    with isolated_plugins(("readme_plugin", readme_plugin())):
        assert lookup("verifiers", "brief").__name__ == "Brief"
        _, env, _ = resolve({"env": {"name": str(tmp_path / "brief.toml")}})
        task = next(iter(env.tasks()))
        short = asyncio.run(run_scripted(env, task, ["It opens at ten."])).episode
        long = asyncio.run(run_scripted(env, task, [" ".join(["word"] * 21)])).episode
    assert [(r.name, r.value) for r in short.rewards] == [("brief", 1.0)]
    assert [(r.name, r.value) for r in long.rewards] == [("brief", 0.0)]


@pytest.mark.parametrize(("page", "argv"), command_lines(),
                         ids=[f"{p}:{' '.join(a)[:40]}" for p, a in command_lines()])
def test_every_command_line_in_the_docs_parses(page: str, argv: list[str]) -> None:
    parsed = cli.build_parser().parse_args(argv)
    if parsed.command != "eval" or parsed.config or any("taskset" in a for a in argv):
        return
    with isolated_plugins(("readme_plugin", readme_plugin())):
        kinds = set(re.findall(r'kind = "(\w+)"', " ".join(argv)))
        harnesses = set(re.findall(r'harness="([\w-]+)"', " ".join(argv)))
        names = plugins.registry().names
        if parsed.env not in names("envs") or kinds - set(names("verifiers")) \
                or harnesses - set(names("harnesses")):
            return  # a file of the reader's own, or a plugin's name: parsing is what holds
        _, env, _ = resolve(cli._cli_data(parsed))
    assert env.name == parsed.env


def test_the_command_reference_names_every_command_and_option() -> None:
    """docs/cli.md's synopsis has an entry for each subcommand the parser has, naming each of
    its options (in one spelling at least) and each choice of a KIND argument; the global
    options are on the page."""
    page = ROOT / "docs" / "cli.md"
    (synopsis,) = [body for _, body in blocks(page, "text")]
    entries: dict[str, str] = {}
    command = ""
    for line in synopsis.splitlines():
        if line.startswith("interplay "):
            command = line.split()[1]
        entries[command] = entries.get(command, "") + line + "\n"
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) <= set(entries), sorted(set(sub.choices) - set(entries))

    def named(option: str, text: str) -> bool:
        return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None

    missing = []
    for name, subparser in sub.choices.items():
        for action in subparser._actions:
            options = [o for o in action.option_strings if o not in ("-h", "--help")]
            if options and not any(named(o, entries[name]) for o in options):
                missing.append(f"{name} {'/'.join(options)}")
            if not options and action.choices and action.dest == "kind":
                missing += [f"{name} KIND {c}" for c in action.choices
                            if not named(c, entries[name])]
    text = page.read_text()
    missing += [o for a in parser._actions for o in a.option_strings
                if o not in ("-h", "--help") and not named(o, text)]
    assert not missing, missing


def test_the_development_page_says_what_each_extra_adds() -> None:
    """docs/development.md's table of extras has a row for each extra pyproject.toml
    declares, for a plugin's author choosing what to install."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    rows = re.findall(r"^\| `([\w-]+)` \|", (ROOT / "docs" / "development.md").read_text(),
                      re.M)
    assert set(extras) <= set(rows), sorted(set(extras) - set(rows))


def test_the_commands_checked_include_every_page_that_shows_one() -> None:
    pages = {page for page, _ in command_lines()}
    assert {"README.md", "docs/config.md", "docs/scaling.md", "docs/training.md"} <= pages


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, str]:
    """The docs' certificate paths, each made a real PEM file of its kind."""
    ca = trustme.CA()
    leaf = ca.issue_cert("client.example")
    files = {"/etc/ssl/internal-ca.pem": ca.cert_pem, "/etc/ssl/me.pem": leaf.cert_chain_pems[0],
             "/etc/ssl/me.key": leaf.private_key_pem}
    paths = {}
    for name, blob in files.items():
        path = tmp_path / Path(name).name
        blob.write_to_path(str(path))
        paths[name] = str(path)
    return paths


@pytest.mark.parametrize("page", SETTINGS_PAGES, ids=lambda p: p.name)
def test_every_settings_block_loads_as_a_run_config(page: Path,
                                                    pem_files: dict[str, str]) -> None:
    found = blocks(page, "toml")
    assert found, f"{page.name} has no TOML block"
    for _, body in found:
        for name, path in pem_files.items():
            body = body.replace(name, path)
        data: dict[str, Any] = tomllib.loads(body)
        _, _, resolved = resolve(config_mod.merge({"env": {"name": "echo"}}, data))
        # Every value the block sets is the run's (none dropped or renamed on the way).
        assert flatten(data).items() <= flatten(resolved).items()


def test_the_readme_keeps_to_150_lines_and_opens_with_its_two_commands() -> None:
    """The README is the front page: short enough to read at once, its first block the
    two commands a newcomer runs (set up and run; set up and test)."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    first = text.split("```\n", 2)[1].splitlines()
    assert [line.split("#")[0].strip() for line in first] == [
        "bash .ci/setup && .venv/bin/interplay eval user-sim -n 4 --set env.relay.max_turns=2",
        "bash .ci/test"]
