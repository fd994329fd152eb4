"""Set-up every plugin test repeats: one episode of an env against the scripted model
(:func:`run_scripted`: start a :class:`ScriptedModel`, run the episode through the real runner
pieces, close them, and hand back the episode with the requests the model received), and a
plugin host holding the builtins and the plugins a test names (:func:`isolated_plugins`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

import attrs

from interplay.contracts.env import Env
from interplay.plugins import host as plugins
from interplay.run.episode import RunResources, run_episode
from interplay.testing.scripted import Script, ScriptedModel, ScriptedRequest
from interplay.values.records import Episode, Task


@attrs.define
class ScriptedRun:
    """What :func:`run_scripted` returns: the finished, scored ``episode``, the requests the
    scripted model kept (``requests``, in order: the first of them, within its bounds) and how
    many it received (``received``)."""

    episode: Episode
    requests: list[ScriptedRequest]
    received: int = 0


async def run_scripted(env: Env, task: Task, script: Script, *, seed: int | None = 0,
                       rollout: int = 0,
                       seats: Mapping[str, Mapping[str, Any]] | None = None,
                       sampling: Mapping[str, Any] | None = None,
                       keep_requests: int | None = ScriptedModel.KEEP_REQUESTS,
                       keep_bytes: int | None = ScriptedModel.KEEP_BYTES) -> ScriptedRun:
    """Run ``task`` through ``env`` with every seat answered by ``script`` (a list of replies
    or a handler, as for :class:`ScriptedModel`); ``seats`` overrides seat settings as
    ``--set seats.<seat>...`` does, and ``sampling`` is the run's ``model.sampling``;
    ``keep_requests`` and ``keep_bytes`` bound the requests kept, as the model's do."""
    async with ScriptedModel(script, keep_requests=keep_requests,
                             keep_bytes=keep_bytes) as model:
        endpoint = model.endpoint if sampling is None else attrs.evolve(
            model.endpoint, sampling=dict(sampling))
        resources = RunResources(endpoint=endpoint, seats=seats)
        try:
            episode = await run_episode(env, task, resources=resources, seed=seed,
                                        rollout=rollout)
        finally:
            await resources.aclose()
        return ScriptedRun(episode, list(model.requests), model.received)


@contextlib.contextmanager
def isolated_plugins(*named: tuple[str, ModuleType] | tuple[str, ModuleType, str],
                     ) -> Iterator[plugins.PluginHost]:
    """The builtins plus the plugin modules given as ``(name, module)`` or ``(name, module,
    package)``, and nothing that happens to be installed; the host is reset on leaving::

        with isolated_plugins(("kuhn_poker", interplay_kuhn_poker.plugin, "interplay-kuhn-poker")):
            ...
    """
    host = plugins.reset(load_entry_points=False)
    try:
        for item in named:
            name, module = item[0], item[1]
            package = item[2] if len(item) > 2 else "local"
            host.register_module(module, name, package=package)
        yield host
    finally:
        plugins.reset(load_entry_points=False)
