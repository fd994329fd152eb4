"""The ExportFormat contract: a file format ``interplay export RUN --format NAME`` writes, added
by a plugin (a benchmark's own results file, a trainer's format) beside the builtin sft, rl and
hf.

The export command finds the results folder, refuses an output it cannot write, and hands the
format the run's episodes one at a time (whole records, as plain JSON data, in the order they
finished, the latest line of each task and rollout) with the run's ``config.json``; the format
writes ``output`` and says how many episodes it wrote. Nothing is kept in memory by the
command; a format that must see every episode before writing keeps what it needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay.config.loading import settle
from interplay.contracts.harness import NoConfig


@attrs.frozen
class Written:
    """What a format wrote: how many episodes, and how many it left out, by reason (an
    episode that ended in an error, one of another env)."""

    episodes: int
    skipped: Mapping[str, int] = attrs.Factory(dict)


class ExportFormat:
    """Base class of an export format. Subclass it and register it with
    ``register_export_formats``; its ``name`` is what ``--format`` takes."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig
    #: One line for ``interplay export --help`` and ``interplay plugins``.
    description: ClassVar[str] = ""
    #: The file written inside the results folder when no ``-o`` is given.
    default_output: ClassVar[str] = ""
    #: Whether ``output`` is a folder the format fills (a benchmark's job folder) rather than
    #: a file: the command hands it an empty folder, and puts it in place only once whole.
    writes_folder: ClassVar[bool] = False

    def __init__(self, config: Any = None) -> None:
        self.config = settle(config, self, "export format")

    def output_name(self, run_config: Mapping[str, Any]) -> str:
        """The file written inside the results folder when no ``-o`` is given, for a run
        whose ``config.json`` is ``run_config``: ``default_output`` unless a format names
        its files after the run."""
        return self.default_output or f"{self.name}.json"

    def write(self, episodes: Iterable[dict[str, Any]], output: Path, *,
              run_config: Mapping[str, Any]) -> Written:
        """Write ``episodes`` (whole records) of a run whose ``config.json`` is ``run_config``
        to ``output`` (an empty folder when :attr:`writes_folder`); raise InterplayError,
        with one line saying what to change, for a run the format cannot hold."""
        raise NotImplementedError(f"export format {self.name!r} does not implement write()")
