"""interplay: run, score and record multi-turn episodes between LLM agents, simulated users
and simulated worlds.

This module is the public API a plugin (a harness, a user sim, a step, a verifier, an env, a
sandbox, an export format) is written against: the contracts, what they are handed (the
contexts: ``EpisodeContext``, ``SegmentContext``, ``SeatAgent``, ``ChatSession``,
``SegmentClient``, protocols the run implements and a plugin annotates with), the records they
speak in, tools, the error type and the error types a record names, logging and loading an
env. The rest of the public API is in the subpackages, each re-exporting what it holds
(docs/api.md lists every name):

- :mod:`interplay.contracts`: the contracts' other values (a user sim's reads and lines, a
  sandbox's plan, needs and mounts);
- :mod:`interplay.values`: the rest of the records, JSON, tools' outcomes and tasksets;
- :mod:`interplay.processes`: programs started so that they end with the run;
- :mod:`interplay.builtin_harnesses`, :mod:`interplay.builtin_envs`,
  :mod:`interplay.builtin_verifiers`: the builtins a plugin builds on (the program harness
  base, the relay step and the LLM-played user sim, the rubric judge);
- :mod:`interplay.model`: the wire helpers, the retry policy and the embedded model's
  tokenizer; :mod:`interplay.world`: the always_on world's apps and schedules;
  :mod:`interplay.run`: agents, episodes and rollouts for a trainer; :mod:`interplay.plugins`
  and :mod:`interplay.config`: the kinds of plugin and config structuring;
- :mod:`interplay.testing`: test helpers.

Other modules are the implementation and may move; those whose names start with ``_`` are
internal to the kernel.

Stable: the names in ``__all__`` here, in those subpackages and in :mod:`interplay.testing`;
their documented fields, parameters and behaviour change only after a release that warns of it.

Importing the package has no side effects: plugins load lazily, once, on the first lookup.
"""

from __future__ import annotations

from interplay._version import __version__
from interplay.config.endpoint import Endpoint
from interplay.contracts.contexts import (
    ChatSession,
    EpisodeContext,
    Reply,
    SeatAgent,
    SeatSpec,
    SegmentClient,
    SegmentContext,
)
from interplay.contracts.env import Env, EnvOptions
from interplay.contracts.exporter import ExportFormat, Written
from interplay.contracts.harness import Harness, NoConfig, Segment, text_prompt
from interplay.contracts.sandbox import ExecResult, Sandbox, SandboxError
from interplay.contracts.scenario import ScenarioKind
from interplay.contracts.step import Step
from interplay.contracts.usersim import Answer, Opening, Person, UserSim, UserSimError
from interplay.contracts.verifier import Verifier
from interplay.errors import ErrorType, InterplayError
from interplay.log import get_logger
from interplay.plugins.hookspecs import Register, hookimpl
from interplay.run.loader import load_env, lookup
from interplay.values.clock import Clock
from interplay.values.records import (
    Episode,
    Message,
    ModelCall,
    Repo,
    Reward,
    Task,
    Tokens,
    ToolCall,
    ToolRun,
    Trace,
    Usage,
    Workspace,
)
from interplay.values.tools import Tool, tool

__all__ = [
    "Answer",
    "ChatSession",
    "Clock",
    "Endpoint",
    "Env",
    "EnvOptions",
    "Episode",
    "EpisodeContext",
    "ErrorType",
    "ExecResult",
    "ExportFormat",
    "Harness",
    "InterplayError",
    "Message",
    "ModelCall",
    "NoConfig",
    "Opening",
    "Person",
    "Register",
    "Reply",
    "Repo",
    "Reward",
    "Sandbox",
    "SandboxError",
    "ScenarioKind",
    "SeatAgent",
    "SeatSpec",
    "Segment",
    "SegmentClient",
    "SegmentContext",
    "Step",
    "Task",
    "Tokens",
    "Tool",
    "ToolCall",
    "ToolRun",
    "Trace",
    "Usage",
    "UserSim",
    "UserSimError",
    "Verifier",
    "Workspace",
    "Written",
    "__version__",
    "get_logger",
    "hookimpl",
    "load_env",
    "lookup",
    "text_prompt",
    "tool",
]
