"""The kernel's hook specifications: how a plugin registers what it brings.

Every hook receives a ``register`` callable (and nothing else) and returns nothing. The kernel
calls each plugin's implementation on its own, so an implementation that raises is attributed to
its package and skipped while every other plugin keeps working; the registry remembers which
plugin registered which name. A name two installed packages register is an error naming both;
a builtin's name registered again keeps the builtin, and the clash is reported.

A plugin module implements hooks with ``@interplay.hookimpl`` and is found through the
``interplay`` entry-point group::

    [project.entry-points.interplay]
    my_plugin = "my_package.plugin"
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

#: The project name: the pluggy marker and the entry-point group.
PROJECT = "interplay"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""The decorator of a hook implementation: ``@hookimpl`` over ``def register_harnesses(register)``
and the other ``register_*`` hooks of a plugin module."""

Register = Callable[..., None]
"""The type of the ``register`` callable each ``register_*`` hook receives:
``register(obj, name=None)``, where ``obj`` is a class of the hook's kind and ``name`` defaults
to ``obj.name``. Returns None; raises InterplayError for an object of the wrong kind."""


@hookspec
def register_harnesses(register: Register) -> None:
    """Register harnesses: programs that run an agent for one segment.

    Fires once per process, the first time anything looks up a harness (or lists plugins).

    :param register: ``register(harness_class, name=None)``. ``harness_class`` is a subclass of
        :class:`interplay.Harness`; ``name`` defaults to its ``name`` attribute. Its
        ``launch(task, ctx)`` runs the first segment and ``resume(messages, ctx)`` every
        continuation.
    """


@hookspec
def register_user_sims(register: Register) -> None:
    """Register user simulators: who a simulated user is and how they answer.

    Fires once per process, the first time anything looks up a user sim (or lists plugins).

    :param register: ``register(user_sim_class, name=None)``. ``user_sim_class`` is a subclass
        of :class:`interplay.UserSim` with ``configure(settings)``, ``setup(person, ctx)``
        and ``answer(read) -> Answer``; ``name`` defaults to its ``name`` attribute.
    """


@hookspec
def register_steps(register: Register) -> None:
    """Register steps: the pieces an env's program is made of.

    Fires once per process, the first time anything looks up a step (or lists plugins).

    :param register: ``register(step_class, name=None)``. ``step_class`` is a subclass of
        :class:`interplay.Step` with ``check(steps) -> problems`` (run when a task loads)
        and ``async run(ctx)``; ``name`` defaults to its ``name`` attribute.
    """


@hookspec
def register_verifiers(register: Register) -> None:
    """Register verifiers: what scores an episode.

    Fires once per process, the first time anything looks up a verifier (or lists plugins).

    :param register: ``register(verifier_class, name=None)``. ``verifier_class`` is a subclass
        of :class:`interplay.Verifier` with ``check(steps) -> problems`` (run when a
        task loads) and ``async score(episode, ctx)``; ``name`` defaults to its ``name`` attribute.
    """


@hookspec
def register_sandboxes(register: Register) -> None:
    """Register sandbox backends: where an agent works, one sandbox per episode.

    Fires once per process, the first time anything looks up a sandbox backend (or lists
    plugins).

    :param register: ``register(sandbox_class, name=None)``. ``sandbox_class`` is a subclass
        of :class:`interplay.Sandbox` with ``start(plan)``, ``exec(argv, ...)``,
        ``read_file``/``write_file``, ``put``/``get``, ``reach(url)`` and ``stop()``;
        ``name`` defaults to its ``name`` attribute (what a run's ``sandbox.kind`` takes).
    """


@hookspec
def register_envs(register: Register) -> None:
    """Register envs: a taskset, steps, verifiers and seats, bundled under one name.

    Fires once per process, the first time anything looks up an env (or lists plugins).

    :param register: ``register(env, name=None)``. ``env`` is a subclass of
        :class:`interplay.Env` (written in Python) or a path to a TOML file of steps;
        ``name`` defaults to its ``name`` attribute (the file's stem for a path).
    """


@hookspec
def register_export_formats(register: Register) -> None:
    """Register export formats: files ``interplay export RUN --format NAME`` writes.

    Fires once per process, the first time anything looks up an export format (or lists
    plugins).

    :param register: ``register(format_class, name=None)``. ``format_class`` is a subclass of
        :class:`interplay.ExportFormat` with ``write(episodes, output, run_config=...) ->
        Written``; ``name`` defaults to its ``name`` attribute (what ``--format`` takes).
    """


@hookspec
def register_scenario_kinds(register: Register) -> None:
    """Register scenario kinds: what makes always_on tasks (a world, a user, goals) from a
    seed and a few knobs.

    Fires once per process, the first time anything looks up a scenario kind (or lists
    plugins).

    :param register: ``register(kind_class, name=None)``. ``kind_class`` is a subclass of
        :class:`interplay.ScenarioKind` with ``generate(seed) -> Task`` (its ``Config`` holds
        the knobs); ``name`` defaults to its ``name`` attribute (what ``interplay generate``
        and an env's ``kind`` take).
    """


HOOK_KINDS: dict[str, str] = {
    "register_harnesses": "harnesses",
    "register_user_sims": "user-sims",
    "register_steps": "steps",
    "register_verifiers": "verifiers",
    "register_sandboxes": "sandboxes",
    "register_envs": "envs",
    "register_export_formats": "export-formats",
    "register_scenario_kinds": "scenario-kinds",
}

__all__ = ["HOOK_KINDS", "PROJECT", "Register", "hookimpl", "hookspec"]
