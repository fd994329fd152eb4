"""Meta-tests that keep the catalogue honest: every hook is documented with its exact
signature in docs/plugins.md, and every hook has a test that exercises it."""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path
from typing import Any

import pytest

from interplay import InterplayError
from interplay.plugins import hookspecs
from interplay.plugins import host as plugins
from interplay.run.loader import env_class

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


@pytest.mark.parametrize("hook", list(hookspecs.HOOK_KINDS))
def test_a_hook_spec_names_its_contracts_methods_as_they_are(hook: str) -> None:
    """What a hook's docstring says a class brings (``score(episode, ctx)``, ``setup(person,
    ctx)``) is that contract's method with those parameters, in order: a docstring cannot drift
    from the contract it describes. ``...`` stands for the parameters it does not list."""
    import re

    import interplay

    doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
    [contract] = {getattr(interplay, name) for name in re.findall(r":class:`interplay\.(\w+)`",
                                                                   doc)}
    named = re.findall(r"``(?:async )?(\w+)\(([^)]*)\)", doc)
    checked = [(method, args) for method, args in named if method != "register"]
    for method, args in checked:
        assert hasattr(contract, method), f"{hook}: {contract.__name__} has no {method}()"
        # Positional parameters; ``name=...`` is a keyword the docstring shows on the side.
        listed = [a.strip() for a in args.split(",") if a.strip() and "=" not in a]
        params = [p.name for p in inspect.signature(getattr(contract, method)).parameters.values()
                  if p.name != "self" and p.kind is not p.KEYWORD_ONLY]
        if listed and listed[-1] == "...":
            listed, params = listed[:-1], params[:len(listed) - 1]
        assert listed == params, f"{hook}: {contract.__name__}.{method}({', '.join(params)})"


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
                                   "sandboxes": ["scratch"],
                                   "envs": ["greetings", "quiz"],
                                   "export-formats": ["rewards"],
                                   "scenario-kinds": ["plants"]}
        env = env_class("greetings")()
        env.check()
        assert [t.answer for t in env.tasks()] == ["HELLO!"]
        assert [t.answer for t in env_class("quiz")().tasks()] == ["4"]
        plants = env_class("always-on-generated")({"kind": "plants", "count": 2})
        plants.check()
        assert [t.info["goals"][0]["id"] for t in plants.tasks()] == ["fern", "fern"]
    finally:
        host.unregister("docs_examples")


def _python_blocks() -> list[str]:
    import re

    return re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)


def _block(marker: str) -> str:
    (block,) = [b for b in _python_blocks() if marker in b]
    return block


def test_the_docs_import_only_the_public_api() -> None:
    """A plugin author copies the imports: every name comes from the public API (`interplay`,
    a subpackage that re-exports what it holds, `interplay.testing`) or the plugin's own
    package, never from a module behind them."""
    from interplay.testing import PUBLIC_API as PUBLIC

    for block in _python_blocks():
        if "import" not in block:  # a hook's signature, not code
            continue
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("interplay"):
                assert node.module in PUBLIC or node.module.startswith("interplay_"), \
                    node.module
            if isinstance(node, ast.ImportFrom) and node.module in PUBLIC:
                target = __import__(node.module, fromlist=["_"])
                for alias in node.names:
                    assert hasattr(target, alias.name), f"{node.module}.{alias.name}"


def test_the_docs_env_config_example_merges_overrides(
        register_plugin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from interplay import hookimpl
    from interplay.config import loading as config
    from interplay.run.loader import load_env
    from interplay.values import load_taskset

    # As in a plugin's package: its module, and its taskset beside it.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "help_desk.jsonl").write_text('{"prompt": "printer?", "answer": "3"}\n')
    (tmp_path / "mine.jsonl").write_text('{"prompt": "mine", "answer": "1"}\n')
    namespace: dict[str, Any] = {"__file__": str(tmp_path / "pkg" / "plugin.py")}
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
    # "" is the env's own file, wherever the working folder is; a path the user sets is read
    # from the working folder, or from base= when given.
    monkeypatch.chdir(tmp_path)
    assert [t.answer for t in load_env("help-desk", {}).tasks()] == ["3"]
    assert [t.answer for t in load_env("help-desk", {"taskset": "mine.jsonl"}).tasks()] == ["1"]
    assert [t.answer for t in load_taskset("mine.jsonl", base=tmp_path)] == ["1"]


async def test_the_docs_rubric_example_subclasses_the_judge(tmp_path: Path) -> None:
    from interplay import Episode, Message, Task, Trace
    from interplay.plugins import is_kind
    from interplay.testing import ScriptedModel
    from interplay.values import EpisodeInfo

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
    from interplay.run import RunResources
    from interplay.run.episode import LiveEpisodeContext

    for verdict, expected in zip(verdicts, (0.0, 0.9), strict=True):
        with ScriptedModel([verdict]) as model:
            resources = RunResources(endpoint=model.endpoint)
            ctx = LiveEpisodeContext(env=None, task=episode.task, info=info,  # type: ignore[arg-type]
                                 resources=resources)
            try:
                reward = await judge.score(episode, ctx)
            finally:
                await resources.aclose()
        assert reward.value == expected


# -- the public API ------------------------------------------------------------------------------

API_DOC = ROOT / "docs" / "api.md"


def _public() -> list[tuple[str, str]]:
    import importlib

    from interplay.testing import PUBLIC_API

    modules = [importlib.import_module(m) for m in sorted(PUBLIC_API)]
    for m in modules:  # interplay.testing imports its names on first use
        for name in m.__all__:
            getattr(m, name)
    return [(m.__name__, name) for m in modules for name in m.__all__]


@functools.cache
def _reference() -> Any:
    """The package as the API reference reads it: griffe, which mkdocstrings renders the
    reference with, over the installed sources (no import)."""
    import griffe

    return griffe.load("interplay", resolve_aliases=True, resolve_external=False)


def _docstring(module: str, name: str) -> str:
    """A public name's docstring as the API reference shows it: a class's or function's own, or
    a variable's (the string under its assignment) from the module that defines it."""
    found = _reference()
    for part in module.split(".")[1:]:
        found = found[part]
    docstring = found[name].docstring
    return docstring.value.strip() if docstring else ""


@pytest.mark.parametrize(("module", "name"), [p for p in _public() if p[1] != "__version__"])
def test_every_public_name_has_a_docstring(module: str, name: str) -> None:
    assert _docstring(module, name), f"{module}.{name} has no docstring"


def test_every_public_name_has_a_line_in_the_api_page() -> None:
    import re

    text = API_DOC.read_text()
    missing = [f"{module}.{name}" for module, name in _public()
               if not re.search(rf"`{re.escape(name)}`", text)]
    assert missing == [], f"docs/api.md lacks {missing}"


def test_the_docs_task_table_names_every_task_field() -> None:
    import re

    import attrs

    from interplay import Task

    table = DOCS.read_text().split("these are all its fields:", 1)[1].split("\n\n", 2)[1]
    documented = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert documented == [f.name for f in attrs.fields(Task) if f.init]


def test_the_docs_rubric_with_its_own_criteria_needs_none_in_the_env() -> None:
    from interplay import Criterion
    from interplay.plugins import is_kind

    namespace: dict[str, Any] = {}
    exec(compile(_block("class PolitenessRubric(Rubric)"), str(DOCS), "exec",
                 dont_inherit=True), namespace)
    judge = namespace["PolitenessRubric"]()
    assert is_kind(judge, "verifiers", "rubric")
    assert [c.name for c in judge.config.criteria] == ["polite", "resolved"]
    from interplay import Relay

    assert judge.check([Relay()]) == []
    other = namespace["PolitenessRubric"]({"criteria": [{"name": "brief", "description": "b"}]})
    assert other.config.criteria == [Criterion("brief", "b")]


def test_the_docs_scripted_request_example_answers_by_request() -> None:
    import httpx

    namespace: dict[str, Any] = {}
    exec(compile(_block("def answer(request: ScriptedRequest)"), str(DOCS), "exec",
                 dont_inherit=True), namespace)
    from interplay.testing import ScriptedModel

    with ScriptedModel(namespace["answer"]) as model:
        for text, expect_tool in (("where is my order?", True), ("hello", False)):
            body = {"model": "m", "messages": [{"role": "user", "content": text}]}
            reply = httpx.post(f"{model.base_url}/chat/completions", json=body).json()
            message = reply["choices"][0]["message"]
            assert bool(message.get("tool_calls")) is expect_tool
        assert [r.api for r in model.requests] == ["chat.completions"] * 2


def test_the_docs_env_from_a_settings_mapping() -> None:
    from interplay import lookup

    env = lookup("envs", "user-sim")({"relay": {"max_turns": 2}})
    assert env.config.relay.max_turns == 2
    env.check()
    with pytest.raises(InterplayError, match=r"relay\.max_turns: expected int"):
        lookup("envs", "user-sim")({"relay": {"max_turns": "two"}})
