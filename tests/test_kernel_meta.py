"""Meta-tests that keep the catalogue honest: every hook is documented with its exact
signature in docs/plugins.md, and every hook has a test that exercises it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from interplay import hookspecs, plugins

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "plugins.md"


def hook_specs() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(getattr(hookspecs, name)) for name in hookspecs.HOOK_KINDS}


def test_every_hook_spec_is_listed_in_hook_kinds() -> None:
    marker = f"{hookspecs.PROJECT}_spec"
    marked = {name for name, obj in vars(hookspecs).items()
              if callable(obj) and hasattr(obj, marker)}
    assert marked == set(hookspecs.HOOK_KINDS)
    assert set(hookspecs.HOOK_KINDS.values()) == set(plugins.KINDS)


@pytest.mark.parametrize("hook", list(hookspecs.HOOK_KINDS))
def test_hook_signature_is_documented(hook: str) -> None:
    params = ", ".join(hook_specs()[hook].parameters)
    assert f"{hook}({params})" in DOCS.read_text(), f"docs/plugins.md lacks {hook}({params})"


@pytest.mark.parametrize("hook", list(hookspecs.HOOK_KINDS))
def test_hook_spec_has_a_docstring_saying_when_it_fires(hook: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
    assert "Fires" in doc and ":param register:" in doc


def _test_names() -> set[str]:
    names: set[str] = set()
    for path in Path(__file__).parent.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
    return names


@pytest.mark.parametrize("hook", list(hookspecs.HOOK_KINDS))
def test_every_hook_has_a_test(hook: str) -> None:
    assert f"test_hook_{hook}" in _test_names()


def test_the_docs_examples_register_what_they_say(tmp_path: Path) -> None:
    """The per-hook examples in docs/plugins.md, run together as one plugin module."""
    import re
    import types

    module = types.ModuleType("docs_examples")
    module.__file__ = str(tmp_path / "plugin.py")
    (tmp_path / "quiz.jsonl").write_text('{"prompt": "2+2?", "answer": "4"}\n')
    (tmp_path / "quiz.toml").write_text(
        'name = "quiz"\ntaskset = "quiz.jsonl"\n[[steps]]\nkind = "repeat"\n')
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    examples = [b for b in blocks if "@hookimpl" in b and "import" in b.split("\n")[0]]
    assert len(examples) == len(hookspecs.HOOK_KINDS)
    for block in examples:
        exec(compile(block, str(DOCS), "exec"), module.__dict__)
    host = plugins.host()
    host.register_module(module, "docs_examples")
    try:
        info = host.infos["docs_examples"]
        assert info.error is None
        assert info.registered == {"harnesses": ["shout"], "user-sims": ["impatient"],
                                   "steps": ["repeat"], "verifiers": ["brief"],
                                   "envs": ["greetings", "quiz"]}
        env = plugins.get("envs", "greetings")()
        env.check()
        assert [t.answer for t in env.tasks()] == ["HELLO!"]
        assert [t.answer for t in plugins.get("envs", "quiz")().tasks()] == ["4"]
    finally:
        host.unregister("docs_examples")


def _python_blocks() -> list[str]:
    import re

    return re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)


def _block(marker: str) -> str:
    (block,) = [b for b in _python_blocks() if marker in b]
    return block


def test_the_docs_import_only_the_public_api() -> None:
    """A plugin author copies the imports: every name comes from `interplay` or
    `interplay.testing` (or the plugin's own package), never from a module behind them."""
    for block in _python_blocks():
        if "import" not in block:  # a hook's signature, not code
            continue
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("interplay"):
                assert node.module in ("interplay", "interplay.testing") or (
                    node.module.startswith("interplay_")), node.module
            if isinstance(node, ast.ImportFrom) and node.module in ("interplay",
                                                                    "interplay.testing"):
                target = __import__(node.module, fromlist=["_"])
                for alias in node.names:
                    assert hasattr(target, alias.name), f"{node.module}.{alias.name}"


def test_the_docs_env_config_example_merges_overrides(register_plugin: Any) -> None:
    import types

    from interplay import config, hookimpl
    from interplay.run.config import load_env

    namespace: dict[str, Any] = {}
    exec(compile(_block("class HelpDesk(Env)"), str(DOCS), "exec", dont_inherit=True), namespace)
    help_desk = namespace["HelpDesk"]
    register_plugin(types.SimpleNamespace(
        register_envs=hookimpl(lambda register: register(help_desk))), "help_desk")
    settings = config.apply_overrides({}, ["relay.max_turns=2", "taskset=other.jsonl"])
    env = load_env("help-desk", settings)
    assert env.config.relay.max_turns == 2
    assert env.config.relay.persona == "a hurried nurse"
    assert env.config.taskset == "other.jsonl"
    env.check()


async def test_the_docs_rubric_example_subclasses_the_judge(tmp_path: Path) -> None:
    from interplay import Episode, EpisodeInfo, Message, Task, Trace, is_kind
    from interplay.testing import ScriptedModel

    namespace: dict[str, Any] = {}
    exec(compile(_block("class StrictRubric(Rubric)"), str(DOCS), "exec", dont_inherit=True),
         namespace)
    judge = namespace["judge"]
    assert is_kind(judge, "verifiers", "rubric")
    info = EpisodeInfo(episode_id="e", env="x", task_idx=0)
    episode = Episode(info=info, task=Task(0, prompt="p"), traces=[Trace(
        agent="assistant", episode=info, seat="assistant",
        messages=[Message("user", "cancel it"), Message("assistant", "done")])])
    assert judge.prompt(episode)[1].text.endswith("Be strict.")
    verdicts = ['{"criteria": [{"name": "resolved", "score": 0.5, "reason": "half"}]}',
                '{"criteria": [{"name": "resolved", "score": 0.9, "reason": "yes"}]}']
    from interplay import RunResources
    from interplay.run.episode import EpisodeContext

    for verdict, expected in zip(verdicts, (0.0, 0.9), strict=True):
        with ScriptedModel([verdict]) as model:
            resources = RunResources(endpoint=model.endpoint)
            ctx = EpisodeContext(env=None, task=episode.task, info=info,  # type: ignore[arg-type]
                                 resources=resources)
            try:
                reward = await judge.score(episode, ctx)
            finally:
                await resources.aclose()
        assert reward.value == expected
