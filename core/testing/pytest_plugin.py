"""pytest fixtures for plugin authors (registered through the ``pytest11`` entry point).

It registers the markers interplay's test helpers put on tests (``local_model``, from
:data:`~interplay.testing.needs_local_model`, and ``slow``), so a plugin's own test run does not
warn of them, and two for tests that take minutes, which run only when ``-m`` asks for them:
``sweep`` (a whole set of a kind: every task against a benchmark's own runner) and
``training`` (a model trained on the CPU). ``scripted_model(script)`` starts a
:class:`~interplay.testing.ScriptedModel` and stops it after the test.
``scripted_episode(env, task, script)`` runs one episode against one from a plain (not async)
test, so a plugin's tests need no async test runner. ``docker_sandbox`` skips a test, saying
why, where the docker sandbox cannot run (no daemon, no base image:
:func:`~interplay.testing.docker_problem`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from interplay.testing.scripted import ScriptedModel

#: The markers interplay's helpers put on tests, and what each means.
MARKERS = (
    "local_model: runs on the embedded llama.cpp model (interplay.testing.needs_local_model)",
    "slow: takes a second or more (real subprocesses, a browser, the embedded model)",
)
#: Markers of tests that take minutes: skipped unless ``-m`` names them.
ASKED_FOR = {
    "sweep": "a whole set of a kind (every task, every week; minutes)",
    "training": "trains a model on the CPU (minutes)",
}


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    for name, what in ASKED_FOR.items():
        config.addinivalue_line("markers", f"{name}: {what}; skipped unless asked for: "
                                           f"`pytest -m {name}`")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``sweep`` or ``training`` is skipped, saying how to run it, unless the
    run's ``-m`` names its marker."""
    chosen = config.getoption("-m") or ""
    for name, what in ASKED_FOR.items():
        if name in chosen:
            continue
        skip = pytest.mark.skip(reason=f"{what}: run with -m {name}")
        for item in items:
            if name in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def scripted_model() -> Iterator[Callable[..., ScriptedModel]]:
    """A factory: ``scripted_model(script, **kwargs) -> ScriptedModel`` (already started)."""
    started: list[ScriptedModel] = []

    def make(script: Any = None, **kwargs: Any) -> ScriptedModel:
        model = ScriptedModel(script, **kwargs).start()
        started.append(model)
        return model

    yield make
    for model in started:
        model.stop()


@pytest.fixture
def scripted_episode() -> Callable[..., Any]:
    """``scripted_episode(env, task, script, **kwargs) -> ScriptedRun``: what
    :func:`interplay.testing.run_scripted` returns, from a plain test (it runs an event loop of
    its own, so an ``async def`` test awaits ``run_scripted`` instead)."""
    from interplay._plumbing import aio as _aio
    from interplay.testing.episodes import run_scripted

    def run(env: Any, task: Any, script: Any = None, **kwargs: Any) -> Any:
        return _aio.run(run_scripted(env, task, script, **kwargs))

    return run


@pytest.fixture
def docker_sandbox() -> None:
    """For a test that runs episodes in the docker sandbox: skipped, saying why, where it
    cannot run here (:func:`interplay.testing.docker_problem`)."""
    from interplay.testing.sandbox import docker_problem

    problem = docker_problem()
    if problem is not None:
        pytest.skip(f"the docker sandbox cannot run here: {problem}")
