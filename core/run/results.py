"""The results folder: ``config.json``, ``episodes.jsonl`` (appended and fsync'd as each
episode finishes), ``episodes/`` (the side files of long episodes) and ``summary.json``;
making a new folder or checking one to resume, and reading its episode records back. Nothing
here runs an episode or computes the summary.

This module is the folder's API (``__all__``): it owns the folder and its files (making it,
appending to episodes.jsonl, config.json and what it records of the verifiers, JSON files
written whole) and names the rest from its parts: an episode's line and a long one's side file
(:mod:`~interplay.run.side_files`), reading episodes.jsonl back
(:mod:`~interplay.run.reading`) and what the summary reads of a record
(:mod:`~interplay.run.slim`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import socket
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from interplay.config import loading as config_mod
from interplay.contracts.env import Env
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.run.config import (
    RunConfig,
    check_harnesses,
    config_differences,
    give_again,
    masked_credentials,
    reach_changed,
    resolve,
    resolved_seats,
    without_credentials,
)
from interplay.run.executor import executor_for
from interplay.run.reading import iter_episodes, read_episodes
from interplay.run.side_files import (
    LINE_BOUND,
    SIDE_DIR,
    episode_line,
    episode_parts,
    side_path,
    side_ref,
    split_record,
    whole_record,
    write_side,
)
from interplay.run.slim import (
    criteria_scores,
    finite_number,
    pair_of,
    record_usage,
    slim_episode,
    slim_record,
)
from interplay.values.records import Episode, Task, converter

__all__ = [
    "CONFIG_FILE",
    "EPISODES_FILE",
    "LINE_BOUND",
    "RUNNING_FILE",
    "SIDE_DIR",
    "SUMMARY_FILE",
    "EpisodeLog",
    "criteria_scores",
    "default_output",
    "episode_line",
    "episode_parts",
    "finite",
    "finite_number",
    "iter_episodes",
    "judged_in",
    "judged_names",
    "mark_running",
    "pair_of",
    "prepare",
    "read_episodes",
    "record_usage",
    "recorded_verifiers",
    "side_path",
    "side_ref",
    "slim_episode",
    "slim_record",
    "split_record",
    "stored_episode",
    "stored_verifiers",
    "unmark_running",
    "whole_record",
    "write_json",
    "write_side",
]

log = get_logger("interplay.run")

CONFIG_FILE = "config.json"
EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"
#: Present while a run writes the folder: which process, since when, how many episodes the
#: run expects. Removed when the run ends, however it ends (a killed process leaves it, and
#: its process id then names no live process).
RUNNING_FILE = "running.json"


class EpisodeLog:
    """``episodes.jsonl``: one JSON line per finished episode.

    Each line is written unbuffered the moment its episode finishes, so it is in the kernel
    at once and a crash, Ctrl-C or SIGKILL of the process loses no finished episode. fsync (for
    an OS crash or power loss) runs in a thread, coalescing lines that finish meanwhile, so
    the event loop never waits for the disk; closing waits for the last one.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None
        self._dirty = False
        self._syncing: asyncio.Task[None] | None = None

    def open(self) -> None:
        try:
            self._fh = self.path.open("ab", buffering=0)
        except OSError as exc:
            raise InterplayError(f"{self.path}: cannot append to it "
                                 f"({exc.strerror or type(exc).__name__})") from None

    def append_episode(self, episode: Episode) -> None:
        """Append a finished episode: its line, and first its side file when its whole line
        would be too long (:func:`episode_parts`)."""
        line, side = episode_parts(episode)
        self.append(line, side, episode_id=episode.info.episode_id)

    def append(self, line: bytes, side: bytes | None = None, *, episode_id: str = "") -> None:
        """Append an episode's line made elsewhere (:func:`episode_parts`, in a worker): its
        side file, if it has one, is written and made durable first, since the line names it."""
        if side is not None:
            write_side(self.path.parent, episode_id, side)
        self.append_line(line)

    def append_line(self, data: bytes) -> None:
        """Append one episode's JSON line (without its newline)."""
        line = memoryview(data + b"\n")
        try:
            while line:
                # A raw file may take fewer bytes than given (a full disk, a signal).
                line = line[self._fh.write(line) or 0:]
        except OSError as exc:
            # What was cut short has no newline: a resume takes it for the torn line it is.
            raise InterplayError(
                f"{self.path}: cannot write the next episode ({exc.strerror or exc}); the "
                f"episodes before it are kept: make room, then continue with "
                f"--resume {self.path.parent}") from None
        self._dirty = True
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.get_running_loop().create_task(self._sync())

    async def _sync(self) -> None:
        while self._dirty:
            self._dirty = False
            await asyncio.to_thread(os.fsync, self._fh.fileno())

    async def aclose(self) -> None:
        if self._fh is None:
            return
        if self._syncing is not None:
            # Shielded: a Ctrl-C must not close the file under a running fsync.
            await asyncio.shield(asyncio.gather(self._syncing, return_exceptions=True))
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None


def stored_episode(record: Mapping[str, Any], folder: Path) -> Episode:
    """The :class:`~interplay.values.records.Episode` one line of ``folder``'s episodes.jsonl holds,
    rebuilt as the run had it when its verifiers scored it: traces, results, rewards and all.

    Every reader that needs the episode itself rather than its JSON (``interplay regrade``)
    rebuilds it here, with what a long episode keeps in its side file put back
    (:func:`whole_record`). A line that does not structure as an episode is refused with its
    pair."""
    try:
        return converter().structure(whole_record(record, folder), Episode)
    except InterplayError:
        raise
    except Exception as exc:  # cattrs' structuring errors are exception groups of any kind
        info = _map(record.get("info"))
        detail = "; ".join(_messages(exc))[:300]
        raise InterplayError(
            f"{folder / EPISODES_FILE}: the episode of task {info.get('task_idx')}, rollout "
            f"{info.get('rollout') or 0} does not read back as an episode ({detail}); "
            f"mend or remove its line") from None


def _messages(exc: BaseException) -> list[str]:
    if isinstance(exc, BaseExceptionGroup):
        return [m for sub in exc.exceptions for m in _messages(sub)]
    return [f"{type(exc).__name__}: {exc}"]


def default_output(env_name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(env_name).stem)
    return str(Path("results") / f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}")


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON in ``path``, replaced whole (a reader never sees half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    data = finite(data)
    try:
        text = json.dumps(data, indent=2, ensure_ascii=False, default=repr, allow_nan=False)
        tmp.write_bytes(text.encode() + b"\n")
    except UnicodeEncodeError:  # a lone surrogate: escaped, JSON reads it back as it was
        tmp.write_bytes(json.dumps(data, indent=2, default=repr, allow_nan=False).encode()
                        + b"\n")
    os.replace(tmp, path)


def mark_running(output: Path, *, expected: int) -> None:
    """Say in ``output`` that a run is writing it (:data:`RUNNING_FILE`): this process, the
    time, and the episodes the run expects in all (those held before it included). What a
    reader (``interplay view``) tells a run in progress from one that stopped by."""
    try:
        write_json(output / RUNNING_FILE, {"pid": os.getpid(), "host": socket.gethostname(),
                                           "started_at": time.time(), "expected": expected,
                                           "interplay": _version()})
    except OSError as exc:  # the episodes are the record; a reader falls back on them
        log.warning("runner.running_not_marked", exception_type=type(exc).__name__)


def unmark_running(output: Path) -> None:
    """Take :func:`mark_running`'s file away: the run has ended."""
    with contextlib.suppress(OSError):
        (output / RUNNING_FILE).unlink()


def finite(data: Any) -> Any:
    """``data`` with every non-finite float replaced by None: NaN and the infinities are not
    JSON, and ``JSON.parse`` (the report's page) rejects them."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [finite(value) for value in data]
    return data


def prepare(data: dict[str, Any],
            resume: str | None) -> tuple[RunConfig, Env, dict[str, Any], Path, list[Task]]:
    """Resolve the config, load the env and its tasks, and make (or check, when resuming) the
    results folder with its config.json: a config that cannot run is refused before anything
    is written. A folder that holds no episode (a run that never finished one) may be used
    again by a new run; a resumed one whose config no longer loads is refused, saying so."""
    if resume:
        output = Path(resume)
        stored_path = output / CONFIG_FILE
        if not stored_path.is_file():
            raise InterplayError(f"--resume {resume}: no {CONFIG_FILE} there; "
                                 f"point it at a results folder of `interplay eval`")
        try:
            stored = json.loads(stored_path.read_text())["config"]
            if not isinstance(stored, dict):
                raise TypeError("config is not an object")
        except (ValueError, KeyError, TypeError, OSError):
            raise InterplayError(f"{stored_path}: not a results config; "
                                 f"start a new run with -o") from None
        regraded = _map(json.loads(stored_path.read_text())).get("regrade")
        if isinstance(regraded, Mapping):
            raise InterplayError(f"--resume {resume}: it holds a regrade of "
                                 f"{regraded.get('from')}, not a run to continue; regrade "
                                 f"that run again with `interplay regrade` and another -o")
        given = (data.get("env") or {}).get("name")
        if given is not None and given != (stored.get("env") or {}).get("name"):
            # Another env's settings would not even structure: name the real difference.
            raise InterplayError(f"--resume {resume}: the config changed (env.name); "
                                 f"resume with the same settings or start a new run with -o")
        merged = config_mod.merge(stored, data)
        merged["output"] = str(output)
        for key in masked_credentials(merged):
            raise InterplayError(f"--resume {resume}: {give_again(key)}")
        try:
            cfg, env, resolved = resolve(merged)
            tasks = list(env.tasks())
        except InterplayError as exc:
            raise _unloadable(resume, output, stored, exc) from None
        executor_for(cfg)  # its settings checked before anything is written
        _check_harnesses(cfg, env, tasks)
        changed = config_differences(without_credentials(stored),
                                     without_credentials(resolved))
        if changed:
            raise InterplayError(
                f"--resume {resume}: the config changed ({', '.join(changed[:8])}"
                f"{', ...' if len(changed) > 8 else ''}); resume with the same settings "
                f"or start a new run with -o")
        if reach_changed(without_credentials(stored), without_credentials(resolved)):
            # How an endpoint is reached changed (a timeout raised, a CA bundle given):
            # config.json says what the run now uses.
            record = json.loads(stored_path.read_text())
            write_json(stored_path, {**record, "config": without_credentials(resolved),
                                     "seats": resolved_seats(env, cfg)})
        return cfg, env, resolved, output, tasks
    if "output" not in data:
        name = str((data.get("env") or {}).get("name") or "")
        data["output"] = default_output(name)
    cfg, env, resolved = resolve(data)
    tasks = list(env.tasks())  # a taskset that cannot be read is refused before the folder
    executor_for(cfg)  # its settings checked before the folder is made
    _check_harnesses(cfg, env, tasks)
    output = Path(str(cfg.output))
    if holds_episodes(output) or _is_regrade(output):
        raise InterplayError(f"{output} already holds a run; continue it with --resume {output} "
                             f"or choose another -o")
    if output.exists() and not output.is_dir():
        raise InterplayError(f"-o {output}: not a folder; choose another -o")
    try:
        output.mkdir(parents=True, exist_ok=True)
        write_json(output / CONFIG_FILE, {"config": without_credentials(resolved),
                                          "interplay": _version(),
                                          "verifiers": stored_verifiers(env),
                                          "seats": resolved_seats(env, cfg)})
    except OSError as exc:
        raise InterplayError(f"-o {output}: cannot write a results folder there "
                             f"({exc.strerror or type(exc).__name__}); choose another -o") from None
    return cfg, env, resolved, output, tasks


def holds_episodes(output: Path) -> bool:
    """Whether the results folder ``output`` has recorded an episode: a run that never
    finished one leaves a folder the next run may use."""
    try:
        return (output / EPISODES_FILE).stat().st_size > 0
    except OSError:
        return False


def _is_regrade(output: Path) -> bool:
    try:
        return isinstance(_map(json.loads((output / CONFIG_FILE).read_text())).get("regrade"),
                          Mapping)
    except (OSError, ValueError):
        return False


def discard_unstarted(output: Path) -> None:
    """Take back what a run that failed before recording any episode wrote in ``output``
    (its config.json, summary and empty episodes file), and the folder itself once empty:
    the next run with the same ``-o`` starts clean."""
    if holds_episodes(output):
        return
    for name in (CONFIG_FILE, SUMMARY_FILE, EPISODES_FILE):
        with contextlib.suppress(OSError):
            (output / name).unlink()
    with contextlib.suppress(OSError):
        (output / SIDE_DIR).rmdir()  # only the run's own, empty folder: never a user's file
    with contextlib.suppress(OSError):
        output.rmdir()  # only if empty


def _check_harnesses(cfg: RunConfig, env: Env, tasks: list[Task]) -> None:
    """The seats' harnesses asked whether they can run on this machine, when the episodes
    run on it (a Ray cluster's nodes are asked by their actors)."""
    if cfg.executor == "ray":
        return
    from interplay.run.episode import RunResources

    check_harnesses(env, RunResources(endpoint=cfg.model, seats=cfg.seats,
                                      sandbox=cfg.sandbox), tasks)


def _unloadable(resume: str, output: Path, stored: Mapping[str, Any],
                exc: InterplayError) -> InterplayError:
    """The one line for a resumed run that cannot load: the config the folder holds no
    longer loads (a taskset changed, a plugin gone), or the settings given over it."""
    try:
        list(resolve({**stored, "output": str(output)})[1].tasks())
    except InterplayError:
        again = (f"start it again with -o {output} and the setting mended (it holds no "
                 f"episode)" if not holds_episodes(output) else
                 "start a new run with the setting mended and another -o")
        return InterplayError(f"--resume {resume}: the config it holds no longer loads "
                              f"({exc.message}); {again}")
    return exc


def stored_verifiers(env: Env) -> list[dict[str, Any]]:
    """What config.json keeps of the env's verifiers: each one's name and the registered
    names of its class and bases (:func:`interplay.plugins.host.describe_kinds`), so a report
    tells a judge's rewards apart without the plugin that registered it."""
    from interplay.plugins import host as plugins

    return [plugins.describe_kinds(v, "verifiers") for v in env.run_verifiers()]


def recorded_verifiers(stored: Mapping[str, Any]) -> list[Any]:
    """The verifiers a results folder's config.json records: its ``verifiers``, or for a
    folder written before it kept them, the rows of ``env.verifiers`` if the run set them."""
    rows = stored.get("verifiers")
    if not isinstance(rows, list):
        rows = _map(_map(stored.get("config")).get("env")).get("verifiers")
    return rows if isinstance(rows, list) else []


def judged_in(folder: Path) -> set[str]:
    """:func:`judged_names` of the verifiers a results folder's config.json records (none
    when it cannot be read)."""
    try:
        stored = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return set()
    return judged_names(recorded_verifiers(_map(stored)))


def judged_names(rows: Iterable[Any]) -> set[str]:
    """The names of the rubric verifiers (judges) among stored verifier rows
    (:func:`stored_verifiers`' or config rows naming a kind); a kind no installed plugin
    registers is not counted."""
    from interplay.plugins import host as plugins

    out = set()
    for row in rows:
        name = _map(row).get("name") or _map(row).get("kind")
        try:
            if isinstance(name, str) and plugins.is_kind(row, "verifiers", "rubric"):
                out.add(name)
        except InterplayError:
            continue
    return out


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _version() -> str:
    from interplay._version import __version__

    return __version__
