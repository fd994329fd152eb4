"""The plugin host in-process: each hook, registration rules, failures and clashes.

Every hook spec has a ``test_hook_<hook name>`` here (tests/test_kernel_meta.py checks it).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest

from interplay import InterplayError, hookimpl
from interplay.contracts.env import Env, EnvFile, SeatSpec
from interplay.contracts.harness import Harness, Segment
from interplay.contracts.sandbox import Sandbox
from interplay.contracts.step import Step
from interplay.contracts.usersim import Answer, Read, UserSim
from interplay.contracts.verifier import Verifier
from interplay.plugins import host as plugins
from interplay.plugins.hookspecs import Register
from interplay.run.episode import sandbox_backend
from interplay.run.loader import env_class
from interplay.values.records import Episode, Message, Reward, Task

RegisterPlugin = Callable[..., plugins.PluginHost]


def make_plugin(name: str, **hooks: Callable[[Register], None]) -> types.ModuleType:
    """A plugin module whose hooks are the given functions (marked as implementations)."""
    module = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        fn.__name__ = hook_name
        setattr(module, hook_name, hookimpl(fn))
    return module


class EchoHarness(Harness):
    """Replies with the prompt."""

    name = "test_echo"

    async def launch(self, task: Task, ctx: Any) -> Segment:
        return Segment([Message("assistant", str(task.prompt))])


class ParrotUser(UserSim):
    """Says the same line until told three times."""

    name = "test_parrot"

    async def answer(self, read: Read) -> Answer:
        return Answer("again", done=read.turn >= 3)


@attrs.define
class SayConfig:
    seat: str = "assistant"
    times: int = 1


class SayStep(Step):
    """Opens the assistant's session and says one line."""

    name = "test_say"
    Config = SayConfig
    writes = frozenset({"said"})

    async def run(self, ctx: Any) -> None:
        ctx.results["said"] = self.config.times


class AlwaysOne(Verifier):
    """Scores every episode 1."""

    name = "test_one"

    def check(self, steps: Sequence[Step]) -> list[str]:
        return [] if steps else ["needs at least one step"]

    async def score(self, episode: Episode, ctx: Any) -> Reward:
        return Reward(self.name, 1.0)


class TinyEnv(Env):
    """One task, one step, one verifier."""

    name = "test_tiny"

    def tasks(self) -> list[Task]:
        return [Task(idx=0, prompt="hi", answer="hi")]

    def steps(self) -> list[Step]:
        return [SayStep()]

    def verifiers(self) -> list[Verifier]:
        return [AlwaysOne()]


# -- one test per hook -----------------------------------------------------------------------


def test_hook_register_harnesses(register_plugin: RegisterPlugin) -> None:
    def register_harnesses(register: Register) -> None:
        register(EchoHarness)
        register(EchoHarness, name="test_echo_too")

    host = register_plugin(make_plugin("h", register_harnesses=register_harnesses))
    assert plugins.get("harnesses", "test_echo") is EchoHarness
    assert plugins.get("harnesses", "test_echo_too") is EchoHarness
    assert host.infos["h"].registered == {"harnesses": ["test_echo", "test_echo_too"]}
    assert host.infos["h"].hooks == ["register_harnesses"]
    assert EchoHarness().can_resume()


def test_hook_register_user_sims(register_plugin: RegisterPlugin) -> None:
    def register_user_sims(register: Register) -> None:
        register(ParrotUser)

    register_plugin(make_plugin("u", register_user_sims=register_user_sims))
    cls = plugins.get("user-sims", "test_parrot")
    assert cls is ParrotUser
    sim = cls()
    sim.configure({})
    assert plugins.registry().entry("user-sims", "test_parrot").plugin == "u"


def test_hook_register_steps(register_plugin: RegisterPlugin) -> None:
    def register_steps(register: Register) -> None:
        register(SayStep)

    register_plugin(make_plugin("s", register_steps=register_steps), package="steps-pkg")
    entry = plugins.registry().entry("steps", "test_say")
    assert entry.obj is SayStep
    assert entry.package == "steps-pkg"
    assert "test_say" in plugins.registry().names("steps")


def test_hook_register_verifiers(register_plugin: RegisterPlugin) -> None:
    def register_verifiers(register: Register) -> None:
        register(AlwaysOne)

    register_plugin(make_plugin("v", register_verifiers=register_verifiers))
    verifier = plugins.get("verifiers", "test_one")()
    assert verifier.check([]) == ["needs at least one step"]
    assert verifier.check([SayStep()]) == []


@attrs.define
class FolderConfig:
    #: How many CPUs it pretends to have.
    cpus: int = 1


class FolderSandbox(Sandbox):
    """A sandbox registered by a test plugin."""

    name = "test_folder"
    Config = FolderConfig
    isolated = False


def test_hook_register_sandboxes(register_plugin: RegisterPlugin) -> None:
    def register_sandboxes(register: Register) -> None:
        register(FolderSandbox)

    register_plugin(make_plugin("s", register_sandboxes=register_sandboxes))
    assert plugins.get("sandboxes", "test_folder") is FolderSandbox
    # A run's sandbox table names it by kind; its other keys are its settings, checked.
    cls, settings = sandbox_backend("test_folder", {"kind": "test_folder", "cpus": 4})
    assert cls is FolderSandbox and settings == FolderConfig(cpus=4)
    with pytest.raises(InterplayError, match="sandbox: unknown key gpus"):
        sandbox_backend("test_folder", {"kind": "test_folder", "gpus": 1})
    with pytest.raises(InterplayError,
                       match=r"^sandbox\.kind: unknown sandbox 'nope'.*test_folder"):
        sandbox_backend("nope", {"kind": "nope"})


def test_hook_register_envs(register_plugin: RegisterPlugin, tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "hello", "answer": "hello"}\n')
    toml_env = tmp_path / "from-file.toml"
    toml_env.write_text('taskset = "tasks.jsonl"\n'
                        '[seats.assistant]\nharness = "test_echo"\ntrainable = false\n')

    def register_envs(register: Register) -> None:
        register(TinyEnv)
        register(toml_env)

    register_plugin(make_plugin("e", register_envs=register_envs))
    assert env_class("test_tiny") is TinyEnv
    from_file = env_class("from-file")
    assert issubclass(from_file, Env)
    assert from_file.seats == {"assistant": SeatSpec(harness="test_echo", trainable=False)}
    assert [t.prompt for t in from_file().tasks()] == ["hello"]


def test_an_env_file_is_kept_by_its_path_and_read_once_when_looked_up(
        register_plugin: RegisterPlugin, tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "hello", "answer": "hello"}\n')
    named = tmp_path / "file.toml"
    named.write_text('name = "by-its-name"\ntaskset = "tasks.jsonl"\n')

    def register_envs(register: Register) -> None:
        register(named)
        register(str(named), name="also")

    register_plugin(make_plugin("e", register_envs=register_envs))
    kept = plugins.get("envs", "by-its-name")
    assert kept == EnvFile(path=named, name="by-its-name")
    cls = env_class("by-its-name")
    assert issubclass(cls, Env) and cls.name == "by-its-name" and cls.source == str(named)
    assert env_class("by-its-name") is cls  # read once
    assert env_class("also") is cls


def test_a_broken_env_file_fails_where_it_is_used_and_spares_the_rest(
        register_plugin: RegisterPlugin, tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text('taskset = "tasks.jsonl"\nstepz = []\n')

    def register_envs(register: Register) -> None:
        register(broken)
        register(TinyEnv)

    host = register_plugin(make_plugin("e", register_envs=register_envs))
    assert host.infos["e"].error is None
    assert env_class("test_tiny") is TinyEnv
    with pytest.raises(InterplayError, match=f"^{broken}: unknown key stepz; allowed: "):
        env_class("broken")
    from interplay.cli import _summary

    assert _summary(plugins.get("envs", "broken")).startswith(
        f"(cannot be loaded: {broken}: unknown key stepz")


def test_an_env_file_that_cannot_be_read_fails_its_plugin_naming_the_file(
        register_plugin: RegisterPlugin, tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{not json")
    for path in (missing, garbled):
        def register_envs(register: Register, path: Path = path) -> None:
            register(path)

        host = register_plugin(make_plugin(path.stem, register_envs=register_envs))
        error = host.infos[path.stem].error
        assert error is not None and str(path) in error, error


# -- registration rules ----------------------------------------------------------------------


def test_builtins_are_registered_without_entry_points(plugin_host: plugins.PluginHost) -> None:
    infos = plugin_host.plugin_infos()
    assert [i.name for i in infos] == list(plugins.DEFAULT_PLUGINS)
    assert all(i.builtin and i.package == "interplay" and i.error is None for i in infos)
    assert plugin_host.plugin_infos(include_builtins=False) == []


def test_registering_a_non_subclass_is_refused_with_a_clear_message(
        register_plugin: RegisterPlugin) -> None:
    class NotAVerifier:
        name = "impostor"

    def register_verifiers(register: Register) -> None:
        register(NotAVerifier)

    host = register_plugin(make_plugin("bad", register_verifiers=register_verifiers),
                           package="bad-pkg")
    error = host.infos["bad"].error
    assert error is not None
    assert error.startswith("register_verifiers: InterplayError: bad-pkg: register() for "
                            "verifiers takes a subclass of interplay.Verifier")
    assert "NotAVerifier" in error
    with pytest.raises(InterplayError, match="unknown verifier 'impostor'"):
        plugins.get("verifiers", "impostor")


def test_an_instance_is_refused_too(register_plugin: RegisterPlugin) -> None:
    def register_harnesses(register: Register) -> None:
        register(EchoHarness())

    host = register_plugin(make_plugin("inst", register_harnesses=register_harnesses))
    assert "takes a subclass of interplay.Harness" in (host.infos["inst"].error or "")


def test_a_class_without_a_name_needs_one(register_plugin: RegisterPlugin) -> None:
    class Nameless(Verifier):
        pass

    def register_verifiers(register: Register) -> None:
        register(Nameless)

    host = register_plugin(make_plugin("anon", register_verifiers=register_verifiers))
    assert "has no name; pass name=..." in (host.infos["anon"].error or "")


def test_a_hook_that_raises_is_reported_and_keeps_nothing(
        register_plugin: RegisterPlugin) -> None:
    def register_verifiers(register: Register) -> None:
        register(AlwaysOne)

    def register_envs(register: Register) -> None:
        raise RuntimeError("boom")

    def good_harnesses(register: Register) -> None:
        register(EchoHarness)

    host = register_plugin(make_plugin("half", register_verifiers=register_verifiers,
                                       register_envs=register_envs), package="half-pkg")
    register_plugin(make_plugin("fine", register_harnesses=good_harnesses))
    info = host.infos["half"]
    assert info.error is not None and info.error.startswith("register_envs: RuntimeError: boom")
    assert info.registered == {}
    assert "test_one" not in plugins.registry().names("verifiers")
    assert plugins.get("harnesses", "test_echo") is EchoHarness
    assert all(i.error is None for i in host.plugin_infos() if i.builtin)


def test_a_failed_plugin_does_not_clash_with_a_good_one(register_plugin: RegisterPlugin) -> None:
    def claims_name(register: Register) -> None:
        register(AlwaysOne)

    def then_fails(register: Register) -> None:
        raise RuntimeError("boom")

    class Other(Verifier):
        name = "test_one"

    def good(register: Register) -> None:
        register(Other)

    register_plugin(make_plugin("first", register_verifiers=claims_name,
                                register_envs=then_fails))
    register_plugin(make_plugin("second", register_verifiers=good))
    assert plugins.get("verifiers", "test_one") is Other
    assert plugins.registry().clashes() == {}


def test_a_name_registered_twice_is_an_error_naming_both_packages(
        register_plugin: RegisterPlugin) -> None:
    class Other(Verifier):
        name = "test_one"

    def first(register: Register) -> None:
        register(AlwaysOne)

    def second(register: Register) -> None:
        register(Other)

    register_plugin(make_plugin("one", register_verifiers=first), package="pkg-one")
    register_plugin(make_plugin("two", register_verifiers=second), package="pkg-two")
    with pytest.raises(InterplayError) as info:
        plugins.get("verifiers", "test_one")
    assert str(info.value) == (
        "verifier 'test_one' is registered by both 'pkg-one' and 'pkg-two'; "
        "uninstall one or block it with INTERPLAY_BLOCK_PLUGINS")
    assert plugins.registry().clashes() == {("verifiers", "test_one"): plugins.Clash(
        "verifiers", "test_one", ["pkg-one", "pkg-two"], used=None)}


def test_the_same_class_registered_twice_is_not_a_clash(register_plugin: RegisterPlugin) -> None:
    def register_verifiers(register: Register) -> None:
        register(AlwaysOne)
        register(AlwaysOne)

    register_plugin(make_plugin("twice", register_verifiers=register_verifiers))
    assert plugins.get("verifiers", "test_one") is AlwaysOne


def test_a_misspelt_hook_is_reported(register_plugin: RegisterPlugin) -> None:
    def register_verifier(register: Register) -> None:
        register(AlwaysOne)

    host = register_plugin(make_plugin("typo", register_verifier=register_verifier))
    assert "unknown hook(s) register_verifier" in (host.infos["typo"].error or "")


def test_an_implementation_with_a_wrong_argument_is_reported(
        register_plugin: RegisterPlugin) -> None:
    def register_verifiers(registry: Register) -> None:
        registry(AlwaysOne)

    host = register_plugin(make_plugin("args", register_verifiers=register_verifiers))
    error = host.infos["args"].error or ""
    assert "registry" in error


def test_unregister_forgets_the_plugin(plugin_host: plugins.PluginHost) -> None:
    def register_verifiers(register: Register) -> None:
        register(AlwaysOne)

    plugin_host.register_module(make_plugin("temp", register_verifiers=register_verifiers),
                                "temp")
    assert plugins.get("verifiers", "test_one") is AlwaysOne
    plugin_host.unregister("temp")
    assert "temp" not in plugin_host.infos
    with pytest.raises(InterplayError, match="unknown verifier 'test_one'"):
        plugins.get("verifiers", "test_one")


def test_registrations_do_not_leak_between_tests() -> None:
    assert "test_one" not in plugins.registry().names("verifiers")
    assert "test_echo" not in plugins.registry().names("harnesses")


def test_unknown_kind_and_name_say_what_exists() -> None:
    with pytest.raises(InterplayError, match="unknown kind 'widgets'; expected one of: "):
        plugins.get("widgets", "x")
    with pytest.raises(InterplayError, match=r"`interplay list verifiers`"):
        plugins.get("verifiers", "nope")


def test_an_unknown_name_names_the_plugins_that_failed(register_plugin: RegisterPlugin) -> None:
    def register_user_sims(register: Register) -> None:
        raise RuntimeError("boom")

    register_plugin(make_plugin("broken", register_user_sims=register_user_sims),
                    package="broken-pkg")
    with pytest.raises(InterplayError) as caught:
        plugins.get("user-sims", "my-sim")
    message = str(caught.value)
    assert message.startswith("unknown user sim 'my-sim'; known: ")
    assert "plugin broken (broken-pkg " in message
    assert "failed to load: register_user_sims: RuntimeError: boom (" in message
    assert "test_kernel_plugins.py:" in message  # where the plugin went wrong
    assert "\n" not in message
    # A known name is not held up by another plugin's failure.
    assert plugins.get("user-sims", "llm") is not None


def test_is_kind_follows_subclasses(register_plugin: RegisterPlugin) -> None:
    class Stricter(AlwaysOne):
        name = "test_stricter"

    def register_verifiers(register: Register) -> None:
        register(AlwaysOne)
        register(Stricter)

    register_plugin(make_plugin("k", register_verifiers=register_verifiers))
    assert plugins.is_kind("test_stricter", "verifiers", "test_one")
    assert plugins.is_kind(Stricter(), "verifiers", "test_one")
    assert not plugins.is_kind("test_one", "verifiers", "test_stricter")
    # Stored configs: a row naming its kind, and what a results folder records.
    assert plugins.is_kind({"kind": "test_stricter", "weight": 2}, "verifiers", "test_one")
    stored = plugins.describe_kinds(Stricter(), "verifiers")
    assert stored == {"name": "test_stricter", "is": ["test_stricter", "test_one"]}
    assert plugins.kinds_of(AlwaysOne, "verifiers") == ["test_one"]
    with pytest.raises(InterplayError, match="a stored verifier config needs a kind"):
        plugins.is_kind({"weight": 2}, "verifiers", "test_one")


def test_a_stored_description_answers_without_the_plugin() -> None:
    stored = {"name": "house_judge", "is": ["house_judge", "rubric"]}
    assert "house_judge" not in plugins.registry().names("verifiers")
    assert plugins.is_kind(stored, "verifiers", "rubric")
    assert not plugins.is_kind({"name": "x", "is": ["x"]}, "verifiers", "rubric")


def test_importing_the_kernel_loads_no_plugin() -> None:
    import subprocess
    import sys

    code = ("import interplay, interplay.plugins.host as p, sys\n"
            "assert p._host is None, 'a host was built on import'\n"
            "assert 'interplay.builtin_verifiers.plugin' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# -- a plugin author's mistakes at every hook ---------------------------------------------------


class ZeroExact(Verifier):
    """Wants the builtin's name."""

    name = "exact"

    async def score(self, episode: Episode, ctx: Any) -> Reward:
        return Reward(self.name, 0.0)


def test_a_builtin_name_registered_again_keeps_the_builtin(
        register_plugin: RegisterPlugin) -> None:
    from interplay.builtin_verifiers.match import Exact

    def register_verifiers(register: Register) -> None:
        register(ZeroExact)
        register(AlwaysOne)

    host = register_plugin(make_plugin("shadow", register_verifiers=register_verifiers),
                           package="shadow-pkg")
    assert plugins.get("verifiers", "exact") is Exact
    assert plugins.get("verifiers", "test_one") is AlwaysOne  # the rest of it works
    clash = plugins.Clash("verifiers", "exact", ["interplay", "shadow-pkg"], used="interplay")
    assert plugins.registry().clashes() == {("verifiers", "exact"): clash}
    info = host.infos["shadow"]
    assert info.error is None and info.clashes == [attrs.asdict(clash)]
    assert attrs.asdict(clash) in host.infos["interplay.builtin_verifiers.plugin"].clashes
    # the builtin env that scores with `exact` still loads
    env_class("echo-toml")().check()


def test_clashes_are_forgotten_with_the_plugin(register_plugin: RegisterPlugin,
                                               plugin_host: plugins.PluginHost) -> None:
    plugin_host.register_module(make_plugin(
        "shadow", register_verifiers=lambda register: register(ZeroExact)), "shadow")
    assert plugins.registry().clashes()
    plugin_host.unregister("shadow")
    assert plugins.registry().clashes() == {}
    assert all(not i.clashes for i in plugin_host.plugin_infos())


@pytest.mark.parametrize("leave", [SystemExit(3), GeneratorExit(), type("Stop", (BaseException,),
                                                                         {})("stop")])
def test_a_hook_that_leaves_with_a_base_exception_is_reported(
        register_plugin: RegisterPlugin, leave: BaseException) -> None:
    def register_verifiers(register: Register) -> None:
        raise leave

    host = register_plugin(make_plugin("leaves", register_verifiers=register_verifiers))
    assert (host.infos["leaves"].error or "").startswith(
        f"register_verifiers: {type(leave).__name__}")
    assert plugins.get("verifiers", "exact")  # the builtins are still there


def test_ctrl_c_in_a_hook_is_not_swallowed(plugin_host: plugins.PluginHost) -> None:
    def register_verifiers(register: Register) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        plugin_host.register_module(make_plugin("ctrl_c", register_verifiers=register_verifiers),
                                    "ctrl_c")
    plugin_host.unregister("ctrl_c")


def test_register_kept_for_later_is_refused(register_plugin: RegisterPlugin) -> None:
    kept: list[Register] = []

    def register_verifiers(register: Register) -> None:
        kept.append(register)

    register_plugin(make_plugin("keeps", register_verifiers=register_verifiers),
                    package="keeps-pkg")
    with pytest.raises(InterplayError, match=r"keeps-pkg: register\(\) was called after its "
                                             r"hook returned; call it inside register_verifiers"):
        kept[0](AlwaysOne)
    assert "test_one" not in plugins.registry().names("verifiers")


def test_a_hook_that_returns_its_classes_is_reported(register_plugin: RegisterPlugin) -> None:
    def register_verifiers(register: Register) -> list[type]:
        return [AlwaysOne]

    host = register_plugin(make_plugin("returns", register_verifiers=register_verifiers))
    assert "register_verifiers returned list; hooks return nothing" in (
        host.infos["returns"].error or "")


def test_an_async_hook_is_reported_and_never_left_unawaited(
        register_plugin: RegisterPlugin, recwarn: pytest.WarningsRecorder) -> None:
    async def register_verifiers(register: Register) -> None:
        register(AlwaysOne)

    host = register_plugin(make_plugin("async_hook", register_verifiers=register_verifiers))
    assert "register_verifiers is async; hooks are plain functions" in (
        host.infos["async_hook"].error or "")
    import gc

    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_a_hook_without_the_marker_is_reported(register_plugin: RegisterPlugin) -> None:
    module = types.ModuleType("unmarked")
    module.register_verifiers = lambda register: register(AlwaysOne)  # type: ignore[attr-defined]
    host = register_plugin(module, "unmarked")
    assert host.infos["unmarked"].error == (
        "register_verifiers is not marked as a hook; decorate it with @interplay.hookimpl "
        "(from interplay import hookimpl)")


@pytest.mark.parametrize("config_cls", [dict, {"times": 2}, None, type("Plain", (), {})])
def test_a_config_that_is_not_an_attrs_class_is_refused(register_plugin: RegisterPlugin,
                                                        config_cls: Any) -> None:
    class Loose(SayStep):
        name = "test_loose"
        Config = config_cls

    host = register_plugin(make_plugin("loose", register_steps=lambda register: register(Loose)))
    assert "Loose.Config must be a class made with @attrs.define" in (
        host.infos["loose"].error or "")


@attrs.define
class _Inner:
    times: int = 2


@attrs.define
class _TypoConfig:
    seat: str = "assistant"
    inner: _Inner = attrs.Factory(lambda: _Inner(times="twice"))  # type: ignore[arg-type]


@dataclasses.dataclass
class _TypoData:
    seat: str = "assistant"
    mode: Literal["fast", "slow"] = "quick"  # type: ignore[assignment]


@pytest.mark.parametrize(("config_cls", "problem"), [
    (_TypoConfig, "Typo.Config.inner.times: expected int, got 'twice'"),
    (_TypoData, "Typo.Config.mode: expected one of 'fast', 'slow', got 'quick'")])
def test_a_config_default_that_does_not_fit_its_type_is_refused(
        register_plugin: RegisterPlugin, config_cls: type, problem: str) -> None:
    class Typo(SayStep):
        name = "test_typo"
        Config = config_cls

    host = register_plugin(make_plugin("typo", register_steps=lambda register: register(Typo)))
    error = host.infos["typo"].error or ""
    assert f"{problem} (the field's default); fix the default in the class" in error
    assert "test_typo" not in plugins.registry().names("steps")
    # Where the default is written, not the register() call.
    field = problem.split(".")[2].split(":")[0]
    lines, start = inspect.getsourcelines(config_cls)
    line = start + next(i for i, text in enumerate(lines) if text.strip().startswith(f"{field}:"))
    assert error.endswith(f"({__file__}:{line})"), error


def test_a_dataclass_config_is_accepted(register_plugin: RegisterPlugin) -> None:
    import dataclasses

    @dataclasses.dataclass
    class DataConfig:
        seat: str = "assistant"
        times: int = 3

    class DataStep(SayStep):
        name = "test_data"
        Config = DataConfig

    register_plugin(make_plugin("data", register_steps=lambda register: register(DataStep)))
    step = plugins.get("steps", "test_data")({"times": 5})
    assert step.config == DataConfig(times=5)


def test_what_a_plugin_prints_goes_to_stderr(register_plugin: RegisterPlugin,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    def register_verifiers(register: Register) -> None:
        print("hello from a hook")
        register(AlwaysOne)

    register_plugin(make_plugin("noisy", register_verifiers=register_verifiers))
    captured = capsys.readouterr()
    assert "hello from a hook" not in captured.out
    assert "hello from a hook" in captured.err


# -- one plugin building on another's ----------------------------------------------------------


def _base_plugin() -> types.ModuleType:
    return make_plugin("base_plugin", register_verifiers=lambda register: register(AlwaysOne))


def _subclass_plugin() -> types.ModuleType:
    def register_verifiers(register: Register) -> None:
        base = plugins.get("verifiers", "test_one")  # interplay.lookup's way

        class Stricter(base):  # type: ignore[valid-type, misc]
            name = "test_stricter_of_lookup"

        register(Stricter)

    return make_plugin("sub_plugin", register_verifiers=register_verifiers)


@pytest.mark.parametrize("order", ["base first", "subclass first"])
def test_a_hook_subclasses_what_another_plugin_registers_in_either_load_order(
        register_plugin: RegisterPlugin, order: str) -> None:
    modules = [_base_plugin(), _subclass_plugin()]
    for module in modules if order == "base first" else modules[::-1]:
        host = register_plugin(module, package=f"{module.__name__}-pkg")
    assert {i.name: i.error for i in host.plugin_infos(include_builtins=False)} == {
        "base_plugin": None, "sub_plugin": None}
    cls = plugins.get("verifiers", "test_stricter_of_lookup")
    assert issubclass(cls, AlwaysOne)
    assert plugins.kinds_of(cls, "verifiers") == ["test_stricter_of_lookup", "test_one"]


def test_an_unknown_name_looked_up_inside_a_hook_lists_what_is_registered(
        register_plugin: RegisterPlugin) -> None:
    def register_verifiers(register: Register) -> None:
        plugins.get("verifiers", "not_installed")

    host = register_plugin(make_plugin("wants", register_verifiers=register_verifiers))
    error = host.infos["wants"].error or ""
    assert "unknown verifier 'not_installed'; known: " in error
    assert "known: none" not in error and "exact" in error and "rubric" in error


def test_an_envs_settings_may_not_take_a_name_every_env_takes(
        register_plugin: RegisterPlugin) -> None:
    @attrs.define
    class Shadowing:
        rounds: int = 3
        verifiers: list[str] = attrs.Factory(list)

    class Shadow(TinyEnv):
        name = "test_shadow"
        Config = Shadowing

    host = register_plugin(make_plugin("shadow", register_envs=lambda register: register(Shadow)))
    error = host.infos["shadow"].error or ""
    assert "Shadow.Config has the setting verifiers, which every env takes from the run" in error
    lines, start = inspect.getsourcelines(Shadowing)
    line = start + next(i for i, text in enumerate(lines) if "verifiers:" in text)
    assert error.endswith(f"({__file__}:{line})"), error
