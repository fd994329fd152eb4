"""interplay: run, score and record multi-turn episodes between LLM agents, simulated users
and simulated worlds.

This module is the public API a plugin (a harness, a user sim, a step, a verifier, an env, a
sandbox, an export format) is written against: the contracts, what they are handed (the
contexts: ``EpisodeContext``, ``SegmentContext``, ``SeatAgent``, ``ChatSession``, protocols the
run implements and a plugin annotates with), the records they speak in, tools, the error type
and the error types a record names, logging and loading an env, and the builtins a plugin
builds on: the program harness base (``ProgramHarness``, ``ProgramConfig``, ``Turn``,
``Launch``, ``Ran``, ``Heard``, ``ProgramState``), the relay step (``Relay``, ``RelayConfig``),
the LLM-played user sim (``LlmUserSim``, ``LlmUserConfig``, ``reply_target_of``,
``fill_placeholders``) and the rubric judge (``Rubric``, ``RubricConfig``, ``Criterion``,
``always_on_seats``). The rest of the public API is in the subpackages, each re-exporting what
it holds (docs/api.md lists every name):

- :mod:`interplay.contracts`: the contracts' other values (a user sim's reads and lines, a
  sandbox's plan, needs, mounts and results, the model client a segment is handed, an env's
  run options, the per-episode store);
- :mod:`interplay.values`: the rest of the records, JSON, tools' outcomes, tasksets and the
  virtual clock;
- :mod:`interplay.processes`: programs started so that they end with the run;
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
from interplay.builtin_envs.llm_user import (
    LlmUserConfig,
    LlmUserSim,
    fill_placeholders,
    reply_target_of,
)
from interplay.builtin_envs.steps import Relay, RelayConfig
from interplay.builtin_harnesses.program import (
    Heard,
    Launch,
    ProgramConfig,
    ProgramHarness,
    ProgramState,
    Ran,
    Turn,
)
from interplay.builtin_verifiers.rubric import Criterion, Rubric, RubricConfig, always_on_seats
from interplay.config.endpoint import Endpoint
from interplay.contracts.contexts import (
    ChatSession,
    EpisodeContext,
    Reply,
    SeatAgent,
    SeatSpec,
    SegmentContext,
)
from interplay.contracts.env import Env
from interplay.contracts.exporter import ExportFormat, Written
from interplay.contracts.harness import Harness, NoConfig, Segment
from interplay.contracts.sandbox import Sandbox, SandboxError
from interplay.contracts.scenario import ScenarioKind
from interplay.contracts.step import Step
from interplay.contracts.usersim import Answer, Opening, Person, UserSim, UserSimError
from interplay.contracts.verifier import Verifier
from interplay.errors import ErrorType, InterplayError
from interplay.log import get_logger
from interplay.plugins.hookspecs import Register, hookimpl
from interplay.run.loader import load_env, lookup
from interplay.values.records import (
    Episode,
    Message,
    ModelCall,
    Reward,
    Task,
    Tokens,
    ToolCall,
    ToolRun,
    Trace,
    Workspace,
)
from interplay.values.tools import Tool, tool

__all__ = [
    "Answer",
    "ChatSession",
    "Criterion",
    "Endpoint",
    "Env",
    "Episode",
    "EpisodeContext",
    "ErrorType",
    "ExportFormat",
    "Harness",
    "Heard",
    "InterplayError",
    "Launch",
    "LlmUserConfig",
    "LlmUserSim",
    "Message",
    "ModelCall",
    "NoConfig",
    "Opening",
    "Person",
    "ProgramConfig",
    "ProgramHarness",
    "ProgramState",
    "Ran",
    "Register",
    "Relay",
    "RelayConfig",
    "Reply",
    "Reward",
    "Rubric",
    "RubricConfig",
    "Sandbox",
    "SandboxError",
    "ScenarioKind",
    "SeatAgent",
    "SeatSpec",
    "Segment",
    "SegmentContext",
    "Step",
    "Task",
    "Tokens",
    "Tool",
    "ToolCall",
    "ToolRun",
    "Trace",
    "Turn",
    "UserSim",
    "UserSimError",
    "Verifier",
    "Workspace",
    "Written",
    "__version__",
    "always_on_seats",
    "fill_placeholders",
    "get_logger",
    "hookimpl",
    "load_env",
    "lookup",
    "reply_target_of",
    "tool",
]
