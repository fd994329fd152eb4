"""Overrides that merge onto the settings an env chose, values of the wrong shape, and
components constructed with a plain dict: what a plugin author and a hostile command line do
to config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

import interplay
from interplay import Env, InterplayError, SeatSpec, Step, Task, Verifier, hookimpl
from interplay.builtin_envs.steps import Relay, RelayConfig
from interplay.builtin_verifiers.match import Contains, MatchConfig
from interplay.config import loading as config
from interplay.run.config import resolve
from interplay.testing import ScriptedModel

# -- overrides merge onto the env's own settings ---------------------------------------------


@attrs.define
class ShopConfig:
    relay: RelayConfig = attrs.Factory(
        lambda: RelayConfig(user_sim="impatient", max_turns=3, persona="a pirate",
                            user_sim_settings={"patience": 2}))
    verifier: MatchConfig = attrs.Factory(lambda: MatchConfig(scope="any", weight=2.0))


class Shop(Env):
    """An env whose Python code configured its relay."""

    name = "shop-test"
    Config: ClassVar[type] = ShopConfig
    seats = {"assistant": SeatSpec(harness="null"), "user": SeatSpec(harness="null")}

    def tasks(self) -> list[Task]:
        return [Task(0, prompt="hi", answer="x")]

    def steps(self) -> list[Step]:
        return [Relay(self.config.relay)]

    def verifiers(self) -> list[Verifier]:
        return [Contains(self.config.verifier)]


@attrs.define
class ImpatientConfig:
    patience: int = 1


class Impatient(interplay.UserSim):
    """A user sim the shop env names."""

    name = "impatient"
    Config: ClassVar[type] = ImpatientConfig

    async def answer(self, read: interplay.contracts.Read) -> interplay.Answer:
        return interplay.Answer("bye", done=True)


@pytest.fixture
def shop(register_plugin: Any) -> None:
    module = types.SimpleNamespace(
        register_envs=hookimpl(lambda register: register(Shop)),
        register_user_sims=hookimpl(lambda register: register(Impatient)))
    register_plugin(module, "shop_test")


def _env_settings(*overrides: str, env: str) -> dict[str, Any]:
    data = config.apply_overrides({"env": {"name": env}}, overrides)
    _, _, resolved = resolve(data)
    return resolved["env"]


def test_an_override_keeps_the_rest_of_the_settings_the_env_chose(shop: None) -> None:
    settings = _env_settings("env.relay.max_turns=1", "env.verifier.case_sensitive=true",
                             env="shop-test")
    chosen = {"user_sim": "impatient", "user_sim_settings": {"patience": 2},
              "persona": "a pirate", "max_turns": 1}
    defaults = attrs.asdict(RelayConfig())
    assert settings["relay"] == {**defaults, **chosen}
    assert settings["verifier"]["scope"] == "any" and settings["verifier"]["weight"] == 2.0
    assert settings["verifier"]["case_sensitive"] is True


def test_an_override_of_a_builtin_env_keeps_its_own_relay_settings() -> None:
    # user-sim-tools gives its relay 8 turns (the relay's own default is 6).
    settings = _env_settings("env.relay.mask_prompt=false", env="user-sim-tools")
    assert settings["relay"]["max_turns"] == 8 and settings["relay"]["mask_prompt"] is False
    assert _env_settings(env="user-sim-tools")["relay"]["max_turns"] == 8


def test_a_config_file_table_merges_the_same_way(tmp_path: Path, shop: None) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[env]\nname = "shop-test"\n[env.relay]\npersona = "a sailor"\n')
    data = config.read_toml(path)
    settings = resolve(data)[2]["env"]
    assert settings["relay"]["persona"] == "a sailor"
    assert settings["relay"]["user_sim"] == "impatient" and settings["relay"]["max_turns"] == 3


@attrs.define
class Inner:
    a: int = 1
    b: int = 2


@attrs.define
class Middle:
    inner: Inner = attrs.Factory(lambda: Inner(a=10, b=20))
    label: str = "m"


@attrs.define
class Outer:
    middle: Middle = attrs.Factory(lambda: Middle(label="chosen"))
    plain: Middle = attrs.Factory(Middle)


def test_a_table_inside_a_default_table_merges_too() -> None:
    out = config.structure({"middle": {"inner": {"b": 5}}, "plain": {"label": "p"}}, Outer)
    assert out == Outer(middle=Middle(inner=Inner(a=10, b=5), label="chosen"),
                        plain=Middle(inner=Inner(a=10, b=20), label="p"))
    # The defaults are not changed by an override.
    assert Outer() == Outer(middle=Middle(inner=Inner(10, 20), label="chosen"))


@pytest.mark.parametrize(("override", "message"), [
    ("env.relay.max_turns=x", "env.relay.max_turns: expected int, got 'x'"),
    ("env.relay.nope=1", "env.relay: unknown key nope; allowed: done_marker"),
    ("env.relay=3", "env.relay: expected a table, got 3"),
    ("env.relay.user_sim_settings=3", "env.relay.user_sim_settings: expected a table, got 3"),
    ("env.relay.persona=[1]", "env.relay.persona: expected str, got [1]"),
    # the user sim's own settings are checked when the env loads, not in every episode
    ("env.relay.user_sim_settings.patience=x", "env 'shop-test' does not fit together: step "
     "'relay': user_sim.impatient.patience: expected int, got 'x'"),
    ("env.relay.user_sim_settings.patient=3", "env 'shop-test' does not fit together: step "
     "'relay': user_sim.impatient: unknown key patient; allowed: patience"),
])
def test_a_bad_override_onto_chosen_settings_is_one_line(shop: None, override: str,
                                                         message: str) -> None:
    with pytest.raises(InterplayError) as info:
        _env_settings(override, env="shop-test")
    assert str(info.value).startswith(message)


@pytest.mark.slow
def test_the_merged_settings_reach_the_episode(tmp_path: Path) -> None:
    """End to end: an override of one relay setting, and the relay still runs the 8 turns
    user-sim-tools chose (the scripted model echoes, so the user is never done)."""
    with ScriptedModel() as model:
        out = tmp_path / "run"
        proc = subprocess.run(
            [sys.executable, "-m", "interplay.cli", "eval", "user-sim-tools", "-n", "1",
             "--base-url", model.base_url, "-o", str(out), "--no-report", "--quiet",
             "--set", "env.relay.mask_prompt=false"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})
    assert proc.returncode in (0, 1), proc.stderr
    saved = json.loads((out / "config.json").read_text())["config"]
    assert saved["env"]["relay"]["max_turns"] == 8
    assert saved["env"]["relay"]["mask_prompt"] is False
    (line,) = (out / "episodes.jsonl").read_text().splitlines()
    relay = json.loads(line)["results"]["relay"]
    assert (relay["turns"], relay["ended_by"]) == (8, "max_turns")


# -- values of the wrong shape -----------------------------------------------------------------


@attrs.define
class Shapes:
    argv: list[str] = attrs.Factory(list)
    env: dict[str, str] = attrs.Factory(dict)
    hours: tuple[int, int] = (7, 23)
    words: tuple[str, ...] = ()
    where: Path = Path("here")


@pytest.mark.parametrize(("data", "message"), [
    ({"argv": "python"}, "argv: expected an array, got 'python'"),
    ({"argv": {"a": 1}}, "argv: expected an array, got {'a': 1}"),
    ({"argv": ["a", 1]}, "argv[1]: expected str, got 1"),
    ({"env": "A=1"}, "env: expected a table, got 'A=1'"),
    ({"env": 3}, "env: expected a table, got 3"),
    ({"hours": [1, 2, 3]}, "hours: expected an array of 2, got [1, 2, 3]"),
    ({"hours": "12"}, "hours: expected an array, got '12'"),
    ({"words": "abc"}, "words: expected an array, got 'abc'"),
])
def test_a_value_of_the_wrong_shape_is_refused_not_reshaped(data: dict[str, Any],
                                                           message: str) -> None:
    with pytest.raises(InterplayError) as info:
        config.structure(data, Shapes)
    assert str(info.value) == message


def test_values_of_the_right_shape_still_structure() -> None:
    got = config.structure({"argv": ["python", "x.py"], "env": {"A": "1"}, "hours": [8, 22],
                            "words": ("a", "b"), "where": "there"}, Shapes)
    assert got == Shapes(["python", "x.py"], {"A": "1"}, (8, 22), ("a", "b"), Path("there"))


def test_a_command_argv_given_as_text_is_refused_at_load() -> None:
    data = config.apply_overrides({"env": {"name": "echo"}}, [
        "seats.assistant.harness=command", "seats.assistant.harness_config.argv=python"])
    with pytest.raises(InterplayError, match=r"harness_config.argv: expected an array"):
        resolve(data)


# -- components constructed with a plain dict ----------------------------------------------------


def test_a_step_or_verifier_given_a_dict_structures_it() -> None:
    assert Relay({"max_turns": 2}).config == RelayConfig(max_turns=2)
    assert Contains({"scope": "any"}).config == MatchConfig(scope="any")
    assert Relay().config == RelayConfig()
    config_obj = RelayConfig(max_turns=4)
    assert Relay(config_obj).config is config_obj


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Relay({"max_turns": "x"}), "relay.max_turns: expected int, got 'x'"),
    (lambda: Relay({"turns": 2}), "relay: unknown key turns; allowed: done_marker"),
    (lambda: Relay(3), "step 'relay' takes a RelayConfig or a mapping of its settings, got int 3"),
    (lambda: Contains(RelayConfig()), "verifier 'contains' takes a MatchConfig or a mapping"),
    (lambda: Shop("x"), "env 'shop-test' takes a ShopConfig or a mapping"),
])
def test_a_component_given_the_wrong_settings_is_refused_with_one_line(make: Any,
                                                                       message: str) -> None:
    with pytest.raises(InterplayError) as info:
        make()
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_an_env_whose_steps_get_a_dict_runs(tmp_path: Path, register_plugin: Any) -> None:
    """The mistake as a plugin author makes it: ``Relay({...})`` in ``steps()``; the env
    checks and loads rather than failing later with an AttributeError."""

    class DictEnv(Shop):
        name = "dict-env"

        def steps(self) -> list[Step]:
            return [Relay({"user_sim": "impatient", "max_turns": 2})]

        def verifiers(self) -> list[Verifier]:
            return [Contains({"scope": "any"})]

    module = types.SimpleNamespace(
        register_envs=hookimpl(lambda register: register(DictEnv)),
        register_user_sims=hookimpl(lambda register: register(Impatient)))
    register_plugin(module, "dict_env")
    _, env, _ = resolve({"env": {"name": "dict-env"}})
    (relay,) = env.steps()
    assert relay.config.max_turns == 2 and relay.config.user_sim == "impatient"


@attrs.define
class Unions:
    arguments: dict[str, Any] | str = ""
    seed: int | str | None = None


@pytest.mark.parametrize(("data", "expected"), [
    ({"arguments": {"a": 1}}, Unions(arguments={"a": 1})),
    ({"arguments": "{}"}, Unions(arguments="{}")),
    ({"seed": 3}, Unions(seed=3)),
    ({"seed": "x"}, Unions(seed="x")),
    ({"seed": None}, Unions(seed=None)),
])
def test_a_union_takes_any_of_its_members(data: dict[str, Any], expected: Unions) -> None:
    assert config.structure(data, Unions) == expected


def test_a_union_none_of_whose_members_fits_is_one_line() -> None:
    with pytest.raises(InterplayError) as info:
        config.structure({"arguments": 3}, Unions)
    assert str(info.value) == "arguments: expected dict or str, got 3"
    with pytest.raises(InterplayError, match=r"^seed: expected int or str or null, got \[1\]$"):
        config.structure({"seed": [1]}, Unions)
