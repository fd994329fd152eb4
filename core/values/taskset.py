"""Tasksets: where tasks come from (a JSONL file, a Python iterable, or a dataset the
``datasets`` library opens: a local folder or data file, or the Hugging Face Hub).

A JSONL row holds the Task fields (``idx`` optional: the row number); unknown fields go to
``info``. A dataset's columns are mapped to the Task fields (:class:`DatasetTaskset`). A bad
row is one error naming the file (or dataset), the row and what to change; a dataset that
cannot be opened is one line saying what to install or where to put its files.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from interplay.config.loading import explain, structure
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.values.records import Task, Workspace, converter

log = get_logger("interplay.values.taskset")

TASK_FIELDS = ("idx", "prompt", "system_prompt", "answer", "info", "workspace")


def task_from_row(row: Mapping[str, Any], default_idx: int, *,
                  base: Path | None = None) -> Task:
    """A task from a row of its fields (any other key kept in ``info``); the relative paths
    of its workspace are read from ``base`` (the taskset's folder)."""
    data = {k: row[k] for k in TASK_FIELDS if k in row}
    extra = {k: v for k, v in row.items() if k not in TASK_FIELDS}
    data.setdefault("idx", default_idx)
    data["info"] = {**extra, **dict(data.get("info") or {})}
    workspace = data.pop("workspace", None)
    if isinstance(workspace, str):  # a dataset's column of JSON text
        try:
            workspace = json.loads(workspace)
        except ValueError:
            raise InterplayError("workspace: not a JSON object") from None
    task = converter().structure(data, Task)
    if workspace is None:
        return task
    if not isinstance(workspace, Mapping):
        raise InterplayError(f"workspace: expected a table (an object), got "
                             f"{type(workspace).__name__}")
    # Checked as a config table is: a string where a list of commands belongs is refused,
    # not taken letter by letter.
    made = structure(workspace, Workspace, path="workspace")
    return attrs.evolve(task, workspace=made.resolved(None if base is None else str(base)))


def load_jsonl(path: str | Path) -> list[Task]:
    """The tasks of a JSON Lines file, one object per line (blank lines skipped): the Task
    fields (``idx``, ``prompt``, ``system_prompt``, ``answer``, ``info``, ``workspace``)
    taken by name, any other key kept in ``info``; ``idx`` defaults to the line's position
    among the tasks; a workspace's relative paths are read from the file's folder.
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
                tasks.append(task_from_row(row, len(tasks), base=p.parent.resolve()))
            except InterplayError as exc:
                raise InterplayError(f"{p}:{lineno}: {exc.message}") from None
            except Exception as exc:
                why = explain(exc, "task")
                raise InterplayError(f"{p}:{lineno}: bad task row: {why}") from None
    return tasks


def from_iterable(rows: Iterable[Task | Mapping[str, Any]]) -> Iterator[Task]:
    for i, row in enumerate(rows):
        yield row if isinstance(row, Task) else task_from_row(row, i)


# -- tasksets the datasets library reads ---------------------------------------------------------

DATASETS_HINT = ("tasksets from datasets need the datasets library: "
                 "pip install 'interplay[datasets]'")
#: How long the Hub gets to answer one request before a Hub dataset is looked up in this
#: machine's datasets cache alone (the library's offline mode): without it, a lookup with no
#: route to the Hub took 23 s of the library's retries (longer where packets are dropped).
HUB_TIMEOUT_S = 5.0
#: Data files the datasets library reads, by suffix, and the builder that reads them.
_BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv",
             ".tsv": "csv", ".arrow": "arrow", ".txt": "text"}


@attrs.define
class DatasetTaskset:
    """A taskset the ``datasets`` library opens (``[env.taskset]`` in a config, ``--set
    env.taskset.dataset=...``).

    ``dataset`` is a folder (one ``save_to_disk`` wrote, or one holding data files), a data
    file or a glob of them (parquet, JSON or JSON lines, CSV), or a dataset on the Hugging
    Face Hub (``config`` names its configuration), read from the local cache when offline.
    ``split`` may be left out when there is one. Columns map to a task's fields: ``prompt``
    (text, or a list of messages), and, when the dataset has them, ``answer``,
    ``system_prompt`` and ``workspace``; ``info`` lists the columns kept in the task's info
    (default: every other column). A task's idx is its row's number in the split (or the
    dataset's own ``idx`` column), so a row keeps its idx whatever ``shuffle`` (seeded by
    ``seed``) and ``limit`` (the first rows after shuffling) take.
    """

    dataset: str
    config: str | None = None
    split: str | None = None
    prompt: str = "prompt"
    answer: str | None = None
    system_prompt: str | None = None
    #: The column of each task's workspace (an object, or its JSON text); None: the
    #: ``workspace`` column when there is one.
    workspace: str | None = None
    info: list[str] | None = None
    limit: int | None = attrs.field(default=None, validator=attrs.validators.optional(
        attrs.validators.ge(1)))
    shuffle: bool = False
    seed: int = 0

    def load(self, base: Path | None = None) -> list[Task]:
        """The tasks (``base``: the folder a relative ``dataset`` path is read from)."""
        data = _open_split(self, base)
        columns = list(data.column_names)
        fields = {"prompt": self._column(self.prompt, "prompt", columns),
                  "answer": self._column(self.answer, "answer", columns),
                  "system_prompt": self._column(self.system_prompt, "system_prompt", columns),
                  "workspace": self._column(self.workspace, "workspace", columns)}
        taken = {c for c in fields.values() if c is not None}
        kept = self.info if self.info is not None else [
            c for c in columns if c not in taken and c != "idx"]
        for column in kept:
            if column not in columns:
                raise InterplayError(f"taskset {self.dataset!r}: no column {column!r} for "
                                     f"info; its columns: {', '.join(columns)}")
        order = list(range(len(data)))
        if self.shuffle:
            random.Random(self.seed).shuffle(order)
        if self.limit is not None:
            order = order[: self.limit]
        tasks = []
        for n in order:
            row = data[n]
            own = row.get("idx")
            values = {field: row[column] for field, column in fields.items()
                      if column is not None}
            info = {c: row[c] for c in kept if c != "info"}
            if isinstance(row.get("info"), Mapping) and "info" in kept:
                info.update(row["info"])
            if isinstance(own, int) and not isinstance(own, bool):
                values["idx"] = own
            else:  # an id of another kind is the row's to keep, not the task's idx
                values["idx"] = n
                if own is not None and self.info is None:
                    info["idx"] = own
            values["info"] = info
            try:
                where = Path(self.dataset).expanduser()
                folder = where if where.is_dir() else where.parent
                if base is not None and not folder.is_absolute():
                    folder = base / folder
                tasks.append(task_from_row(values, n, base=folder.resolve()))
            except Exception as exc:
                why = explain(exc, "task")
                raise InterplayError(f"taskset {self.dataset!r} row {n}: bad task row: "
                                     f"{why}") from None
        return tasks

    def _column(self, name: str | None, field: str, columns: list[str]) -> str | None:
        if name is None:  # the field's own name, if the dataset has such a column
            return field if field in columns else None
        if name not in columns:
            raise InterplayError(
                f"taskset {self.dataset!r} has no column {name!r} for the {field}; name "
                f"its column with env.taskset.{field} (columns: {', '.join(columns)})")
        return name


TasksetSource = str | DatasetTaskset
"""The type of an env's ``taskset`` setting: a JSON Lines path, or a :class:`DatasetTaskset`
(a config's ``[env.taskset]`` table is structured into one)."""


def load(source: TasksetSource | Mapping[str, Any] | None, default: str | Path | None = None,
         *, base: Path | None = None) -> list[Task]:
    """The tasks of an env's ``taskset`` setting: a JSONL file, a :class:`DatasetTaskset` (or
    its settings as a table), a path the datasets library reads (a folder or a parquet, JSON
    or CSV file), or, when empty, ``default``. ``base`` is the folder relative paths are read
    from (an env file's)."""
    if isinstance(source, Mapping):
        from interplay.config import loading as config

        source = config.structure(source, DatasetTaskset, path="taskset")
    if isinstance(source, DatasetTaskset):
        return source.load(base)
    if not source:
        if default is None:
            raise InterplayError("no taskset given; set env.taskset")
        return load_jsonl(default)
    path = Path(source).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    if path.suffix == ".jsonl":
        return load_jsonl(path)
    if not path.exists():
        raise InterplayError(
            f"taskset {source!r} does not exist; name a JSONL file, a folder or data file "
            f"the datasets library reads, or a Hub dataset with "
            f"--set env.taskset.dataset={source}")
    return DatasetTaskset(dataset=str(path)).load()


def _datasets() -> Any:
    try:
        import datasets
    except ModuleNotFoundError:
        raise InterplayError(DATASETS_HINT) from None
    return datasets


def _open_split(spec: DatasetTaskset, base: Path | None) -> Any:
    """The split of the dataset ``spec`` names, opened."""
    datasets = _datasets()
    where = Path(spec.dataset).expanduser()
    if base is not None and not where.is_absolute():
        where = base / where
    local = where.exists() or any(ch in spec.dataset for ch in "*?[")
    offline = False
    # Its progress bars would write over the run's display.
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        if where.is_dir() and any((where / f).is_file() for f in (
                "dataset_info.json", "state.json", "dataset_dict.json")):
            opened = datasets.load_from_disk(str(where))
        elif where.is_dir():
            opened = datasets.load_dataset(str(where), spec.config)
        elif local:
            builder = _BUILDERS.get(where.suffix.lower())
            if builder is None:
                raise InterplayError(
                    f"taskset {spec.dataset!r}: not a data file the datasets library reads "
                    f"(name a folder, or a {', '.join(sorted(_BUILDERS))} file)")
            opened = datasets.load_dataset(builder, data_files=str(where))
        else:
            with _hub_or_cache(datasets) as offline:
                opened = datasets.load_dataset(spec.dataset, spec.config)
    except InterplayError:
        raise
    except Exception as exc:
        raise InterplayError(_why_not(spec, exc, local, offline)) from None
    finally:
        if bars:
            datasets.enable_progress_bars()
    if not isinstance(opened, datasets.DatasetDict):
        return opened
    splits = list(opened)
    if spec.split is None:
        if len(splits) == 1:
            return opened[splits[0]]
        raise InterplayError(f"taskset {spec.dataset!r} has splits {', '.join(splits)}; "
                             f"choose one with env.taskset.split")
    if spec.split not in opened:
        raise InterplayError(f"taskset {spec.dataset!r} has no split {spec.split!r}; its "
                             f"splits: {', '.join(splits)}")
    return opened[spec.split]


def _hub_unreachable(timeout_s: float = HUB_TIMEOUT_S) -> str | None:
    """Why the Hub (``HF_ENDPOINT``, through the environment's proxy) cannot be reached from
    here, as the failure's class name; None when it answers, with any status, or when what
    failed is for the library to say (a TLS error: something answered)."""
    from huggingface_hub import constants

    url = f"{constants.ENDPOINT.rstrip('/')}/api/datasets"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"),
                                    timeout=timeout_s):
            return None
    except (urllib.error.HTTPError, http.client.HTTPException):  # an answer, of any kind
        return None
    except ValueError:  # not a URL urllib takes: the library says what is wrong with it
        return None
    except OSError as exc:  # URLError, a timeout, a refused or unroutable connection
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, ssl.SSLError):
            return None
        return type(reason).__name__


@contextlib.contextmanager
def _hub_or_cache(datasets: Any) -> Iterator[bool]:
    """A Hub dataset's lookup: as the library makes it when the Hub answers one request
    within :data:`HUB_TIMEOUT_S`, else in the library's own offline mode for its duration,
    so a dataset in the cache still opens and one that is not fails at once rather than
    after the library's retries. Yields whether the lookup is offline (already, by
    ``HF_HUB_OFFLINE``, or made so)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or datasets.config.HF_HUB_OFFLINE:
        yield True
        return
    why = _hub_unreachable()
    if why is None:
        yield False
        return
    log.info("taskset.hub_unreachable", exception_type=why, timeout_s=HUB_TIMEOUT_S)
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield True
    finally:
        constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = False


def _why_not(spec: DatasetTaskset, exc: Exception, local: bool, offline: bool = False) -> str:
    """One line for a dataset that could not be opened, saying where to put it."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    name = spec.dataset
    if local:
        return f"taskset {name!r}: the datasets library cannot read it ({reason})"
    if offline or _offline(exc):
        return (f"taskset {name!r} is not a file or folder here, nor in this machine's "
                f"datasets cache, and the Hub cannot be reached (offline): where there is a "
                f"network, run datasets.load_dataset({name!r}).save_to_disk(DIR), copy DIR "
                f"here and set env.taskset.dataset=DIR (or put its parquet, JSON or CSV files "
                f"in a folder and name that)")
    return (f"taskset {name!r} is not a file or folder here, nor a dataset the Hub has "
            f"({reason}); name a local folder or data file, or a Hub dataset "
            f"(env.taskset.config for its configuration)")


def _offline(exc: BaseException) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or \
            os.environ.get("HF_DATASETS_OFFLINE", "").lower() in ("1", "true", "yes"):
        return True
    chain: list[BaseException] = [exc]
    while chain[-1].__cause__ or chain[-1].__context__:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)  # type: ignore[arg-type]
        if len(chain) > 10:
            break
    names = " ".join(type(e).__name__ for e in chain)
    return any(word in names for word in ("Connection", "Offline", "Timeout", "LocalEntry"))
