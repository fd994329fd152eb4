"""interplay: run, score and record multi-turn episodes between LLM agents, simulated users
and simulated worlds.

This module is the public API: everything a plugin (a harness, a user sim, a step, a verifier,
an env) needs is importable from here, and test helpers from :mod:`interplay.testing`. So are
the builtins a plugin builds on: the relay step (``Relay``, ``RelayConfig``,
``person_from_task``) for an env with a modeled user, the LLM-played user sim (``LlmUserSim``,
``LlmUserConfig``, ``reply_target_of``, ``fill_placeholders``) to subclass, and the rubric
judge (``Rubric``, ``RubricConfig``, ``Criterion``, ``always_on_seats``) to subclass. What a
plugin is handed (``EpisodeContext``, ``SegmentContext``, ``SeatAgent``, ``ChatSession``,
``SegmentClient``) are protocols (:mod:`interplay.contracts.contexts`) the run implements: a plugin
annotates with them. The subpackages (``interplay.model``, ``interplay.run``,
``interplay.interception``, ...) are the implementation and may move; modules whose names start
with ``_`` are internal to the kernel.

Stable: the names in ``__all__`` here and in :mod:`interplay.testing`; their documented fields,
parameters and behaviour change only after a release that warns of it. docs/api.md lists them
by what they are for.

Importing the package has no side effects: plugins load lazily, once, on the first lookup.
"""

from __future__ import annotations

from interplay._version import __version__
from interplay.builtin_envs.shop import InitState, InitStateConfig
from interplay.builtin_envs.steps import Relay, RelayConfig
from interplay.builtin_envs.usersims import (
    LlmUserConfig,
    LlmUserSim,
    fill_placeholders,
    person_from_task,
    reply_target_of,
)
from interplay.builtin_harnesses.program import (
    Heard,
    Launch,
    Place,
    ProgramConfig,
    ProgramHarness,
    ProgramState,
    Ran,
    Routes,
    Turn,
    segment_messages,
)
from interplay.builtin_verifiers.rubric import Criterion, Rubric, RubricConfig, always_on_seats
from interplay.builtin_verifiers.state import StateMatch, StateMatchConfig
from interplay.config.endpoint import Endpoint
from interplay.config.loading import structure as structure_config
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
from interplay.contracts.sandbox import (
    BoundedOutput,
    ExecResult,
    Mount,
    NotReachable,
    Sandbox,
    SandboxError,
    SandboxNeeds,
    SandboxPlan,
)
from interplay.contracts.scenario import ScenarioKind, generate_tasks
from interplay.contracts.step import Step
from interplay.contracts.usersim import (
    Answer,
    Opening,
    Person,
    PhoneNote,
    Read,
    ReadMessage,
    SentLine,
    UserSim,
    UserSimError,
    answer_or_error,
    chosen_user_sim,
)
from interplay.contracts.usersim import set_up as set_up_user_sim
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.model.local import LocalTokenizer, local_tokenizer
from interplay.model.retries import Failure as AttemptFailure
from interplay.model.retries import Policy as RetryPolicy
from interplay.model.wire import assistant_message, request_messages, request_tool_names
from interplay.plugins.hookspecs import Register, hookimpl
from interplay.plugins.host import describe_kinds, is_kind
from interplay.processes import (
    ProgramDirs,
    ProgramRun,
    find_program,
    not_runnable,
    other_version,
    owner_tag,
    popen,
    refusal_reason,
    run_program,
    start_process,
)
from interplay.run.agent import Agent
from interplay.run.episode import RunResources, run_episode
from interplay.run.loader import env_from_toml, load_env, lookup
from interplay.run.results import whole_record
from interplay.run.rollouts import RolloutGroup, Rollouts
from interplay.values.clock import Clock
from interplay.values.records import (
    CommandRecord,
    Episode,
    EpisodeInfo,
    FileChange,
    Message,
    ModelCall,
    Repo,
    Reward,
    SandboxRecord,
    Task,
    Tokens,
    ToolCall,
    ToolRun,
    Trace,
    Usage,
    Workspace,
    WorkspaceChanges,
    from_json,
    to_json,
)
from interplay.values.taskset import DatasetTaskset, TasksetSource, load_jsonl
from interplay.values.taskset import load as load_taskset
from interplay.values.tools import CallOutcome, Tool, tool, tool_call_id
from interplay.world import App, BusyBlock, Schedule, app_tool
from interplay.world.times import parse_duration

__all__ = [
    "Agent",
    "Answer",
    "App",
    "AttemptFailure",
    "BoundedOutput",
    "BusyBlock",
    "CallOutcome",
    "ChatSession",
    "Clock",
    "CommandRecord",
    "Criterion",
    "DatasetTaskset",
    "Endpoint",
    "Env",
    "EnvOptions",
    "Episode",
    "EpisodeContext",
    "EpisodeInfo",
    "ExecResult",
    "ExportFormat",
    "FileChange",
    "Harness",
    "Heard",
    "InitState",
    "InitStateConfig",
    "InterplayError",
    "Launch",
    "LlmUserConfig",
    "LlmUserSim",
    "LocalTokenizer",
    "Message",
    "ModelCall",
    "Mount",
    "NoConfig",
    "NotReachable",
    "Opening",
    "Person",
    "PhoneNote",
    "Place",
    "ProgramConfig",
    "ProgramDirs",
    "ProgramHarness",
    "ProgramRun",
    "ProgramState",
    "Ran",
    "Read",
    "ReadMessage",
    "Register",
    "Relay",
    "RelayConfig",
    "Reply",
    "Repo",
    "RetryPolicy",
    "Reward",
    "RolloutGroup",
    "Rollouts",
    "Routes",
    "Rubric",
    "RubricConfig",
    "RunResources",
    "Sandbox",
    "SandboxError",
    "SandboxNeeds",
    "SandboxPlan",
    "SandboxRecord",
    "ScenarioKind",
    "Schedule",
    "SeatAgent",
    "SeatSpec",
    "Segment",
    "SegmentClient",
    "SegmentContext",
    "SentLine",
    "StateMatch",
    "StateMatchConfig",
    "Step",
    "Task",
    "TasksetSource",
    "Tokens",
    "Tool",
    "ToolCall",
    "ToolRun",
    "Trace",
    "Turn",
    "Usage",
    "UserSim",
    "UserSimError",
    "Verifier",
    "Workspace",
    "WorkspaceChanges",
    "Written",
    "__version__",
    "always_on_seats",
    "answer_or_error",
    "app_tool",
    "assistant_message",
    "chosen_user_sim",
    "describe_kinds",
    "env_from_toml",
    "fill_placeholders",
    "find_program",
    "from_json",
    "generate_tasks",
    "get_logger",
    "hookimpl",
    "is_kind",
    "load_env",
    "load_jsonl",
    "load_taskset",
    "local_tokenizer",
    "lookup",
    "not_runnable",
    "other_version",
    "owner_tag",
    "parse_duration",
    "person_from_task",
    "popen",
    "refusal_reason",
    "reply_target_of",
    "request_messages",
    "request_tool_names",
    "run_episode",
    "run_program",
    "segment_messages",
    "set_up_user_sim",
    "start_process",
    "structure_config",
    "text_prompt",
    "to_json",
    "tool",
    "tool_call_id",
    "whole_record",
]
