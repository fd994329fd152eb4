"""``interplay describe`` and the settings reference: every builtin and plugin name described,
every setting with a line of meaning, and the checked-in reference what the code generates."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest

from interplay import InterplayError
from interplay.cli import LIST_KINDS, first_sentence, main
from interplay.commands.describe import DESCRIBE_KINDS, describe, names, reference_pages, text
from interplay.config.settings import field_docs, settings_of
from interplay.plugins import host as plugins

ROOT = Path(__file__).resolve().parents[1]
GENERATE = ROOT / "docs" / "reference" / "generate.py"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("generate_reference", GENERATE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def with_repo_plugins(plugin_host: plugins.PluginHost) -> Any:
    """The builtins and the plugins in plugins/ registered, as the reference is made; the
    generator module."""
    generator = _generator()
    generator.register()  # or fails naming the ones not installed
    return generator


def _all_names() -> list[tuple[str, str]]:
    _generator().register()
    out = [(kind, name) for kind in DESCRIBE_KINDS for name in names(kind)]
    plugins.reset(load_entry_points=False)
    return out


ALL = _all_names()


@pytest.mark.parametrize(("kind", "name"), ALL, ids=[f"{k}:{n}" for k, n in ALL])
def test_every_name_is_described_with_a_meaning_for_each_setting(
        with_repo_plugins: Any, kind: str, name: str) -> None:
    info = describe(kind, name)
    assert info["name"] == name and info["summary"], f"{kind} {name} has no docstring"
    undocumented = [s["name"] for s in info["settings"] + info.get("seat_settings", [])
                    + info.get("sampling_settings", []) if not s["doc"]]
    assert not undocumented, (f"{kind} {name}: settings without a docstring (a #: comment "
                              f"above the field): {', '.join(undocumented)}")
    json.loads(json.dumps(info, default=repr))
    shown = text(info)
    for setting in info["settings"]:
        assert setting["name"] in shown
    if kind == "envs" and not info.get("needs"):
        assert info["seats"] and info["steps"]
        assert info["example_task"] is not None and "idx" in info["example_task"]


def test_an_env_shows_where_its_verifier_settings_differ_from_the_verifiers_own() -> None:
    info = describe("envs", "user-sim")
    (contains,) = info["verifiers"]
    assert contains["name"] == "contains" and contains["settings"]["scope"] == "any"
    assert contains["differs_from_defaults"] == {"scope": {"env": "any", "default": "last"}}
    assert 'scope="any" here; the verifier\'s own default is "last"' in text(info)
    assert info["results"] == ["relay"]
    assert set(info["seats"]) == {"assistant", "user"}
    assert {"persona", "opening"} <= set(info["info_keys"])


def test_an_env_is_described_with_settings_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "envs", "user-sim", "--set", "verifier.scope=last",
                 "--set", "env.relay.max_turns=2", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["verifiers"][0]["differs_from_defaults"] == {}
    assert info["steps"][0]["settings"]["max_turns"] == 2


def test_a_setting_shows_its_type_default_allowed_values_and_meaning() -> None:
    scope = next(s for s in describe("verifiers", "contains")["settings"]
                 if s["name"] == "scope")
    assert scope == {"name": "scope", "type": '"last" | "any"', "default": "last",
                     "required": False, "allowed": ("last", "any"),
                     "doc": "Compare with the seat's last reply, or pass when any of its "
                            "replies matches.", "fixed": False}
    argv = next(s for s in describe("harnesses", "command")["settings"] if s["name"] == "argv")
    assert argv["required"] and argv["type"] == "list[str]"


def test_nested_and_listed_settings_are_flattened_under_dotted_names() -> None:
    rubric = {s["name"]: s for s in describe("verifiers", "rubric")["settings"]}
    assert rubric["criteria[].name"]["required"]
    assert rubric["judge"]["default"] is None and "judge.base_url" in rubric
    relay = {s["name"]: s for s in describe("envs", "user-sim-tools")["settings"]}
    # The env's default for its relay (8 turns), not the relay's own (6).
    assert relay["relay.max_turns"]["default"] == 8


def test_field_docs_read_comments_above_and_strings_below() -> None:
    @attrs.define
    class Settings:
        #: Above,
        #: on two lines.
        a: int = 1
        b: Literal["x", "y"] = "x"
        """Below."""
        c: str = ""

    assert field_docs(Settings) == {"a": "Above, on two lines.", "b": "Below."}
    listed = settings_of(Settings)
    assert [s.doc for s in listed] == ["Above, on two lines.", "Below.", ""]
    assert listed[1].allowed == ("x", "y")


def test_the_model_kind_describes_the_endpoint_and_a_seat(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "model"]) == 0
    out = capsys.readouterr().out
    assert "sampling: table of any" in out
    assert "sampling (model.sampling.*" in out and "embedded model: 0.2" in out
    assert "each seat (seats.<seat>.*):" in out and "trainable: bool" in out


def test_the_embedded_models_sampling_defaults_are_the_ones_the_docs_name() -> None:
    from interplay.model.local import DEFAULT_MAX_TOKENS
    from interplay.model.local_generation import _DEFAULTS

    docs = {s["name"]: s["doc"] for s in describe("model", "model")["sampling_settings"]}
    for key in ("temperature", "top_p", "top_k", "min_p", "repeat_penalty"):
        assert f"embedded model: {_DEFAULTS[key]})" in docs[key], key
    assert f"embedded model: {DEFAULT_MAX_TOKENS})" in docs["max_tokens"]


def test_describe_kind_lists_its_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "verifiers"]) == 0
    listed = capsys.readouterr().out.split()
    assert {"contains", "exact", "regex", "rubric", "payoff"} <= set(listed)
    assert main(["describe", "envs", "--json"]) == 0
    assert "echo" in json.loads(capsys.readouterr().out)


def test_list_gives_each_name_the_first_sentence_of_its_docstring_whole(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The relay's first sentence ends inside its first line; the tau2 step's runs over two.
    assert main(["list", "steps"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "two chat sessions, relayed.  [interplay]" in lines["relay"]
    assert "It writes" not in lines["relay"]
    assert first_sentence("Reads one paragraph, e.g. the first:\n    its lines joined.\n\n"
                          "Not the second.") == "Reads one paragraph, e.g. the first: its " \
                                               "lines joined."
    for kind in LIST_KINDS:
        assert main(["list", kind, "--json"]) == 0
        for row in json.loads(capsys.readouterr().out):
            assert row["summary"].endswith((".", ")")) or not row["summary"], (kind, row)


def test_an_unknown_name_or_kind_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "verifiers", "contain"]) == 2
    assert "unknown verifier 'contain'" in capsys.readouterr().err
    with pytest.raises(InterplayError, match="unknown kind"):
        names("judges")
    assert main(["describe", "verifiers", "contains", "--set", "scope=any"]) == 2
    assert "name an env" in capsys.readouterr().err


def test_a_plugins_settings_are_described_from_its_class(register_plugin: Any) -> None:
    import types

    from interplay import Verifier, hookimpl

    @attrs.define
    class LengthConfig:
        #: The most characters a reply may have.
        limit: int = 100
        weight: float = 1.0

    class Length(Verifier):
        """Reward 1 when the reply is short."""

        name = "length"
        Config = LengthConfig

    module = types.SimpleNamespace(register_verifiers=hookimpl(
        lambda register: register(Length)))
    register_plugin(module, "length_plugin", package="interplay-length")
    info = describe("verifiers", "length")
    assert info["package"] == "interplay-length"
    assert [(s["name"], s["doc"]) for s in info["settings"]] == [
        ("limit", "The most characters a reply may have."), ("weight", "")]


def test_describe_markdown_writes_a_page_per_kind(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "interplay.cli", "describe", "--markdown",
                           str(tmp_path)], capture_output=True, text=True, check=False,
                          env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{k}.md"
                                                               for k in DESCRIBE_KINDS)
    assert "## contains" in (tmp_path / "verifiers.md").read_text()


def test_the_checked_in_reference_is_what_the_code_generates(with_repo_plugins: Any) -> None:
    generator = with_repo_plugins
    expected = generator.pages()
    stale = [name for name, page in expected.items()
             if not (generator.OUT / name).exists() or (generator.OUT / name).read_text() != page]
    extra = sorted(p.name for p in generator.OUT.glob("*.md") if p.name not in expected)
    assert not stale and not extra, (
        f"docs/reference/settings is out of date ({', '.join(stale + extra)}); regenerate it "
        f"with: {generator.COMMAND}")


def test_the_reference_covers_every_builtin(with_repo_plugins: Any) -> None:
    pages = reference_pages(["interplay"])
    for kind in DESCRIBE_KINDS:
        for name in names(kind):
            if kind in ("model", "run") or \
                    plugins.registry().entry(kind, name).package == "interplay":
                assert f"## {name}\n" in pages[f"{kind}.md"]


def test_an_envs_steps_show_what_they_were_given_not_the_keys_a_config_may_add() -> None:
    info = describe("envs", "always-on-week")
    user = next(s for s in info["steps"] if s["name"] == "user_sim")["settings"]
    assert user["busy"][0]["label"] == "work" and user["opening"] is None
    assert not [k for k in user if "[]" in k or k.startswith("opening.")]
    step = {s["name"]: s for s in describe("steps", "user_sim")["settings"]}
    assert "busy[].start" in step and "opening.at" in step  # what a config may write


def test_an_env_file_is_described_as_eval_takes_it(capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "builtin_envs" / "data" / "echo_toml.toml"
    assert main(["describe", "envs", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["package"] == f"file {path}" and info["steps"] and info["example_task"]
