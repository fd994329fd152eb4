"""pytest fixtures for plugin authors (registered through the ``pytest11`` entry point).

``scripted_model(script)`` starts a :class:`~interplay.testing.ScriptedModel` and stops it after
the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from interplay.testing.scripted import ScriptedModel


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
