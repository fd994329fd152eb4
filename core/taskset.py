"""Tasksets: where tasks come from (a JSONL file, a Python iterable, a Hugging Face dataset).

A JSONL row holds the Task fields (``idx`` optional: the row number); unknown fields go to
``info``. A bad row is one error naming the file, the line and what to change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from interplay.config import explain
from interplay.errors import InterplayError
from interplay.records import Task, converter

TASK_FIELDS = ("idx", "prompt", "system_prompt", "answer", "info")


def task_from_row(row: Mapping[str, Any], default_idx: int) -> Task:
    data = {k: row[k] for k in TASK_FIELDS if k in row}
    extra = {k: v for k, v in row.items() if k not in TASK_FIELDS}
    data.setdefault("idx", default_idx)
    data["info"] = {**extra, **dict(data.get("info") or {})}
    return converter().structure(data, Task)


def load_jsonl(path: str | Path) -> list[Task]:
    """The tasks of a JSON Lines file, one object per line (blank lines skipped): the Task
    fields (``idx``, ``prompt``, ``system_prompt``, ``answer``, ``info``) taken by name, any
    other key kept in ``info``; ``idx`` defaults to the line's position among the tasks.
    A missing file or a line that is not a task raises a one-line InterplayError."""
    p = Path(path)
    if not p.exists():
        raise InterplayError(f"taskset {str(p)!r} does not exist")
    tasks = []
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InterplayError(f"{p}:{lineno}: not valid JSON ({exc.msg}); "
                                     f"each line must be one JSON object") from None
            try:
                if not isinstance(row, dict):
                    raise ValueError("a row must be a JSON object")
                tasks.append(task_from_row(row, len(tasks)))
            except InterplayError as exc:
                raise InterplayError(f"{p}:{lineno}: {exc.message}") from None
            except Exception as exc:
                why = explain(exc, "task")
                raise InterplayError(f"{p}:{lineno}: bad task row: {why}") from None
    return tasks


def from_iterable(rows: Iterable[Task | Mapping[str, Any]]) -> Iterator[Task]:
    for i, row in enumerate(rows):
        yield row if isinstance(row, Task) else task_from_row(row, i)


def load_hf(name: str, split: str = "test", *, mapping: Callable[[dict[str, Any]], dict[str, Any]]
            | None = None) -> list[Task]:
    """Load a Hugging Face dataset (needs the ``datasets`` package: ``pip install datasets``)."""
    try:
        import datasets  # type: ignore[import-not-found]
    except ModuleNotFoundError:
        raise InterplayError("Hugging Face tasksets need the datasets package: "
                             "pip install datasets") from None
    ds = datasets.load_dataset(name, split=split)
    return [task_from_row(mapping(dict(r)) if mapping else dict(r), i) for i, r in enumerate(ds)]
