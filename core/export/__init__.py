"""``interplay export``: episodes as training data. A results folder streamed, in constant
memory, into SFT lines (a trace's conversation and tools, for a chat template), RL lines
(token ids, logprobs, a loss mask, the reward and a group-normalized advantage, per model call
or per trace) or a dataset folder ``datasets.load_from_disk`` opens.

What a trace becomes is :mod:`interplay.export.rows`, the groups and advantages
:mod:`interplay.export.groups`, the passes over the files :mod:`interplay.export.files`, the
command :mod:`interplay.export.command`. It reads results; it never runs an episode.
"""

from __future__ import annotations

from interplay.export.command import add_export
from interplay.export.files import ExportOptions, ExportResult, default_output, export

__all__ = ["ExportOptions", "ExportResult", "add_export", "default_output", "export"]
