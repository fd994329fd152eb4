"""The records and values every layer speaks in: the records of a run and their JSON form
(``records``, with ``splicing``), the tools a seat can call (``tools``), where tasks come from
(``taskset``) and the virtual clock (``clock``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interplay._plumbing.facade import lazy_names

if TYPE_CHECKING:
    from interplay.values.clock import Clock
    from interplay.values.records import (
        CommandRecord,
        EpisodeInfo,
        FileChange,
        Repo,
        SandboxRecord,
        Usage,
        WorkspaceChanges,
        from_json,
        to_json,
    )
    from interplay.values.taskset import DatasetTaskset, TasksetSource, load_jsonl
    from interplay.values.taskset import load as load_taskset
    from interplay.values.tools import CallOutcome, tool_call_id

_NAMES = {
    "CallOutcome": "interplay.values.tools:CallOutcome",
    "Clock": "interplay.values.clock:Clock",
    "CommandRecord": "interplay.values.records:CommandRecord",
    "DatasetTaskset": "interplay.values.taskset:DatasetTaskset",
    "EpisodeInfo": "interplay.values.records:EpisodeInfo",
    "FileChange": "interplay.values.records:FileChange",
    "Repo": "interplay.values.records:Repo",
    "SandboxRecord": "interplay.values.records:SandboxRecord",
    "TasksetSource": "interplay.values.taskset:TasksetSource",
    "Usage": "interplay.values.records:Usage",
    "WorkspaceChanges": "interplay.values.records:WorkspaceChanges",
    "from_json": "interplay.values.records:from_json",
    "load_jsonl": "interplay.values.taskset:load_jsonl",
    "load_taskset": "interplay.values.taskset:load",
    "to_json": "interplay.values.records:to_json",
    "tool_call_id": "interplay.values.tools:tool_call_id",
}
__all__ = [
    "CallOutcome",
    "Clock",
    "CommandRecord",
    "DatasetTaskset",
    "EpisodeInfo",
    "FileChange",
    "Repo",
    "SandboxRecord",
    "TasksetSource",
    "Usage",
    "WorkspaceChanges",
    "from_json",
    "load_jsonl",
    "load_taskset",
    "to_json",
    "tool_call_id",
]
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
