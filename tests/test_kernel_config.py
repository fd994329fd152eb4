"""Config: TOML files plus --set overrides, and one-line errors that name the path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Literal

import attrs
import pytest

from interplay import InterplayError
from interplay.config import loading as config


@attrs.define
class UserConfig:
    max_turns: int = 3
    style: Literal["terse", "chatty"] = "terse"
    temperature: float = 0.7


@attrs.define
class EnvConfig:
    name: str
    user: UserConfig = attrs.Factory(UserConfig)
    tags: list[str] = attrs.Factory(list)


@attrs.define
class RunConfig:
    env: EnvConfig
    rollouts: int = 1
    output: Path = Path("results")
    seed: int | None = None


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_toml_files_then_overrides(tmp_path: Path) -> None:
    base = write(tmp_path, "base.toml", """
rollouts = 2
[env]
name = "echo"
tags = ["a"]
[env.user]
max_turns = 5
""")
    local = write(tmp_path, "local.toml", '[env.user]\nstyle = "chatty"\n')
    cfg = config.load(RunConfig, files=[base, local], overrides=[
        "env.user.max_turns=7", "env.user.temperature=1", "output=out/dir", "seed=11",
        'env.tags=["x", "y"]'])
    assert cfg == RunConfig(
        env=EnvConfig(name="echo", user=UserConfig(max_turns=7, style="chatty", temperature=1.0),
                      tags=["x", "y"]),
        rollouts=2, output=Path("out/dir"), seed=11)


def test_an_override_can_create_a_table() -> None:
    cfg = config.load(RunConfig, overrides=["env.name=relay", "env.user.max_turns=2"])
    assert cfg.env == EnvConfig(name="relay", user=UserConfig(max_turns=2))


def test_override_values_are_read_as_toml_else_as_text() -> None:
    assert config.parse_override("a.b=3") == (["a", "b"], 3)
    assert config.parse_override("a=true") == (["a"], True)
    assert config.parse_override('a="3"') == (["a"], "3")
    assert config.parse_override("a=hello world") == (["a"], "hello world")
    assert config.parse_override("a=") == (["a"], "")


@pytest.mark.parametrize(("files", "overrides", "message"), [
    ({}, ["env.name=e", "env.user.max_turns=x"], "env.user.max_turns: expected int, got 'x'"),
    ({}, ["env.name=e", "env.user.max_turn=3"],
     "env.user: unknown key max_turn; allowed: max_turns, style, temperature"),
    ({}, ["env.user.max_turns=3"], "env.name: missing value; expected str"),
    ({}, [], "env: missing value; expected a table"),
    ({}, ["env.name=e", "env.user.style=loud"],
     "env.user.style: expected one of 'terse', 'chatty', got 'loud'"),
    ({}, ["env.name=e", "env.tags=['a', 3]"], "env.tags[1]: expected str, got 3"),
    ({}, ["env.name=e", "env.user.temperature=true"],
     "env.user.temperature: expected float, got True"),
    ({}, ["env.name=e", "rollouts=2.5"], "rollouts: expected int, got 2.5"),
    ({}, ["env.name=e", "colour=red"], "config: unknown key colour; allowed: env, output, "
     "rollouts, seed"),
    ({"a.toml": "[env]\nname = 3\n"}, [], "env.name: expected str, got 3"),
])
def test_each_problem_is_one_line_naming_the_path(
        tmp_path: Path, files: dict[str, str], overrides: list[str], message: str) -> None:
    paths = [write(tmp_path, name, text) for name, text in files.items()]
    with pytest.raises(InterplayError) as info:
        config.load(RunConfig, files=paths, overrides=overrides)
    assert str(info.value) == message
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_structure_prefixes_a_path() -> None:
    with pytest.raises(InterplayError, match=r"^seats\.assistant\.max_turns: expected int"):
        config.structure({"max_turns": "many"}, UserConfig, path="seats.assistant")


@pytest.mark.parametrize(("item", "message"), [
    ("novalue", "--set 'novalue': expected KEY=VALUE"),
    ("=3", "--set '=3': expected KEY=VALUE"),
    ("a..b=3", "--set 'a..b=3': empty part in key 'a..b'"),
])
def test_bad_overrides_are_refused(item: str, message: str) -> None:
    with pytest.raises(InterplayError, match=f"^{message.replace('.', '[.]')}"):
        config.parse_override(item)


def test_an_override_into_a_value_is_refused() -> None:
    with pytest.raises(InterplayError, match=r"env is a value, not a table"):
        config.apply_overrides({"env": "echo"}, ["env.name=x"])


def test_missing_and_invalid_files_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(InterplayError, match="does not exist"):
        config.read_toml(tmp_path / "nope.toml")
    bad = write(tmp_path, "bad.toml", "a = [\n")
    with pytest.raises(InterplayError, match="not valid TOML"):
        config.read_toml(bad)


def test_unreadable_config_files_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(InterplayError, match="is a directory; expected a TOML file"):
        config.read_toml(tmp_path)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"a = \"\xff\xfe\"\n")
    with pytest.raises(InterplayError, match="not valid TOML: the file is not UTF-8 text"):
        config.read_toml(binary)
    if os.geteuid() != 0:  # root reads any file
        locked = write(tmp_path, "locked.toml", "a = 1\n")
        locked.chmod(0)
        with pytest.raises(InterplayError, match="cannot be read"):
            config.read_toml(locked)


@pytest.mark.parametrize("value", [3, "text", ["a"], None])
def test_structuring_a_value_that_is_not_a_table_is_one_line(value: object) -> None:
    expected = f"seats.assistant: expected a table, got {value!r}"
    with pytest.raises(InterplayError, match=f"^{re.escape(expected)}$"):
        config.structure(value, UserConfig, path="seats.assistant")  # type: ignore[arg-type]


def test_merge_is_deep_and_leaves_its_inputs_alone() -> None:
    base = {"env": {"user": {"max_turns": 1, "style": "terse"}}}
    top = {"env": {"user": {"max_turns": 2}}}
    assert config.merge(base, top) == {"env": {"user": {"max_turns": 2, "style": "terse"}}}
    assert base == {"env": {"user": {"max_turns": 1, "style": "terse"}}}


# -- through the command -----------------------------------------------------------------------


def _interplay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interplay.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_user_error_exits_2_with_one_line_and_no_traceback() -> None:
    out = _interplay("--log-level", "nonsense", "plugins")
    assert out.returncode == 2
    assert out.stderr == ("interplay: error: --log-level: expected one of debug, info, "
                          "warning, error; got 'nonsense'\n")
    assert out.stdout == ""


def test_a_bad_argument_exits_2_with_usage() -> None:
    out = _interplay("list", "bogus")
    assert out.returncode == 2
    assert "invalid choice: 'bogus'" in out.stderr
    assert "Traceback" not in out.stderr
