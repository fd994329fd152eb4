"""Test doubles shipped for plugin authors: a scripted OpenAI-compatible model over real HTTP
(:class:`ScriptedModel`, whose script :func:`read_script` reads from a file),
:func:`run_scripted` (one episode of an env against it),
:func:`isolated_plugins` (the builtins plus the plugins a test names, nothing else installed) and
a pytest plugin with fixtures (``interplay.testing.pytest_plugin``), and :func:`descendants`,
:func:`survivors` and :func:`mentioning` to check that what a run started is gone once it ends;
:func:`run_interplay` (the ``interplay`` command in a subprocess, as a user runs it),
:func:`npm_program` (an agent program from npm, installed for the tests that run it),
:func:`eval_with_harness` (a one-episode run with a harness in the assistant seat),
:data:`needs_local_model` and :func:`captured_log` (the process log of a block, to search for
what must never be logged), and :func:`docker_problem` (why the docker sandbox cannot run
here, if it cannot).

The names are imported on first use, so that ``python -m interplay.testing.scripted`` runs the
module once, as ``__main__``, rather than after this package has already imported it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interplay.testing.cli import (
        command_env,
        eval_with_harness,
        interplay_command,
        needs_local_model,
        npm_program,
        run_interplay,
    )
    from interplay.testing.episodes import ScriptedRun, isolated_plugins, run_scripted
    from interplay.testing.logs import captured_log
    from interplay.testing.processes import descendants, mentioning, survivors
    from interplay.testing.sandbox import calc_fix_env, docker_problem, run_sandboxed
    from interplay.testing.script import (
        ScriptedReply,
        ScriptedRequest,
        ScriptedTokenizer,
        ScriptedToolCall,
    )
    from interplay.testing.script_file import read_script
    from interplay.testing.scripted import ScriptedModel

PUBLIC_API = frozenset({
    "interplay", "interplay.testing", "interplay.contracts", "interplay.values",
    "interplay.processes", "interplay.run", "interplay.model", "interplay.world",
    "interplay.plugins", "interplay.config"})
"""The modules a plugin imports from (the public API): the root, the subpackages that re-export
what they hold, and this test kit. Every other module of interplay is the implementation."""

_MODULES = {"ScriptedModel": "scripted", "ScriptedReply": "script",
            "ScriptedRequest": "script", "ScriptedToolCall": "script",
            "ScriptedTokenizer": "script",
            "ScriptedRun": "episodes", "run_scripted": "episodes",
            "isolated_plugins": "episodes", "descendants": "processes",
            "survivors": "processes", "mentioning": "processes",
            "read_script": "script_file", "npm_program": "cli",
            "run_interplay": "cli", "interplay_command": "cli", "command_env": "cli",
            "eval_with_harness": "cli",
            "needs_local_model": "cli", "captured_log": "logs",
            "docker_problem": "sandbox", "calc_fix_env": "sandbox",
            "run_sandboxed": "sandbox"}
__all__ = ["PUBLIC_API", "ScriptedModel", "ScriptedReply", "ScriptedRequest", "ScriptedRun",
           "ScriptedTokenizer", "ScriptedToolCall", "calc_fix_env", "captured_log",
           "command_env", "descendants", "docker_problem",
           "eval_with_harness",
           "interplay_command", "isolated_plugins", "mentioning", "needs_local_model",
           "npm_program", "read_script", "run_interplay", "run_sandboxed", "run_scripted",
           "survivors"]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value = getattr(importlib.import_module(f"interplay.testing.{_MODULES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
