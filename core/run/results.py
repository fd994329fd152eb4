"""The results folder: ``config.json``, ``episodes.jsonl`` (appended and fsync'd as each
episode finishes) and ``summary.json``; making a new folder or checking one to resume, and
reading its episode records back. Nothing here runs an episode or computes the summary.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from interplay import config as config_mod
from interplay.env import Env
from interplay.errors import InterplayError
from interplay.records import Episode, converter, to_json_bytes
from interplay.run.config import RunConfig, config_differences, resolve

log = structlog.get_logger("interplay.run")

CONFIG_FILE = "config.json"
EPISODES_FILE = "episodes.jsonl"
SUMMARY_FILE = "summary.json"



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
        self._fh = self.path.open("ab", buffering=0)

    def append_line(self, data: bytes) -> None:
        """Append one episode's JSON line (without its newline)."""
        line = memoryview(data + b"\n")
        while line:
            # A raw file may take fewer bytes than given (a full disk, a signal).
            line = line[self._fh.write(line) or 0:]
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


def episode_line(episode: Episode) -> bytes:
    """The episode's line in episodes.jsonl (without the newline)."""
    try:
        return to_json_bytes(episode)
    except (TypeError, ValueError):
        # An env put something JSON cannot hold in its results: keep the episode, as text.
        return json.dumps(converter().unstructure(episode), ensure_ascii=False,
                          separators=(",", ":"), default=repr).encode()


def read_episodes(path: Path, *, repair: bool = False,
                  slim: bool = False) -> list[dict[str, Any]]:
    """The episodes in a results file, as dicts (``slim``: only what the summary needs, so a
    large file never sits in memory whole), one per (task, rollout): a later line supersedes
    an earlier one (an episode run again with ``--retry-errors``). Read line by line. A torn
    last line (a write cut by a kill) is skipped, and with ``repair`` cut off the file so
    appends start on a clean line; a broken line before the last is an error."""
    if not path.exists():
        return []
    out: dict[tuple[int, int], dict[str, Any]] = {}
    pos = 0
    bad: tuple[int, int] | None = None  # (line number, offset) of an unparsable line
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if bad is not None:
                if raw.strip():
                    raise InterplayError(f"{path}: line {bad[0]} is not an episode record; "
                                         f"remove it, then resume")
                continue
            if raw.strip():
                try:
                    record = json.loads(raw)
                    if not isinstance(record, dict) or "info" not in record:
                        raise ValueError("not an episode")
                except ValueError:
                    bad = (number, pos)
                    continue
                try:
                    pair = pair_of(record)
                except (KeyError, TypeError, ValueError):
                    # A whole JSON line, so not torn by a kill: something else wrote it.
                    raise InterplayError(f"{path}: line {number} is not an episode record "
                                         "(its info has no task_idx); remove it, then "
                                         "resume") from None
                out[pair] = slim_record(record) if slim else record
                if repair and not raw.endswith(b"\n"):
                    # A complete record without its newline: end the line before appending.
                    with path.open("ab") as tail:
                        tail.write(b"\n")
            pos += len(raw)
    if bad is not None:
        log.warning("runner.torn_line_skipped", output_path=str(path))
        if repair:
            with path.open("r+b") as fh:
                fh.truncate(bad[1])
    return list(out.values())


def pair_of(record: Mapping[str, Any]) -> tuple[int, int]:
    """The (task idx, rollout) an episode record is for."""
    info = record["info"]
    return int(info["task_idx"]), int(info.get("rollout") or 0)


def slim_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`summarize` reads of an episode record."""
    return {"info": record["info"], "reward": record.get("reward"),
            "error_type": record.get("error_type"), "metrics": record.get("metrics") or {},
            "wall_s": record.get("wall_s"),
            "traces": [{"seat": t.get("seat"), "agent": t.get("agent"),
                        "stop_condition": t.get("stop_condition"), "reward": t.get("reward")}
                       for t in record.get("traces") or ()],
            "usage": dict(record_usage(record))}


def slim_episode(episode: Episode) -> dict[str, Any]:
    """:func:`slim_record` of an episode that has just finished."""
    # Summed here rather than through Episode.usage, which makes a Usage per call it adds.
    prompt = completion = total = calls = 0
    for call_list in [*(t.model_calls for t in episode.traces), episode.judge_calls]:
        calls += len(call_list)
        for call in call_list:
            usage = call.usage
            if usage is not None:
                prompt += usage.prompt_tokens
                completion += usage.completion_tokens
                total += usage.total_tokens
    info = episode.info
    return {"info": {"task_idx": info.task_idx, "rollout": info.rollout,
                     "episode_id": info.episode_id},
            "reward": episode.reward, "error_type": episode.error_type,
            "metrics": dict(episode.metrics), "wall_s": episode.wall_s,
            "traces": [{"seat": t.seat, "agent": t.agent, "stop_condition": t.stop_condition,
                        "reward": t.reward}
                       for t in episode.traces],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": total, "model_calls": calls}}


def default_output(env_name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(env_name).stem)
    return str(Path("results") / f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}")



def record_usage(record: Mapping[str, Any]) -> Counter[str]:
    total: Counter[str] = Counter()
    calls = [c for t in record.get("traces") or () for c in t.get("model_calls") or ()]
    calls += list(record.get("judge_calls") or ())
    for call in calls:
        usage = call.get("usage") or {}
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            total[key] += int(usage.get(key) or 0)
    total["model_calls"] += len(calls)
    return total



def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=repr) + "\n")
    os.replace(tmp, path)



def prepare(data: dict[str, Any],
            resume: str | None) -> tuple[RunConfig, Env, dict[str, Any], Path]:
    """Resolve the config, load the env, and make (or check, when resuming) the results
    folder with its config.json."""
    if resume:
        output = Path(resume)
        stored_path = output / CONFIG_FILE
        if not stored_path.is_file():
            raise InterplayError(f"--resume {resume}: no {CONFIG_FILE} there; "
                                 f"point it at a results folder of `interplay eval`")
        try:
            stored = json.loads(stored_path.read_text())["config"]
        except (ValueError, KeyError, TypeError):
            raise InterplayError(f"{stored_path}: not a results config; "
                                 f"start a new run with -o") from None
        given = (data.get("env") or {}).get("name")
        if given is not None and given != (stored.get("env") or {}).get("name"):
            # Another env's settings would not even structure: name the real difference.
            raise InterplayError(f"--resume {resume}: the config changed (env.name); "
                                 f"resume with the same settings or start a new run with -o")
        merged = config_mod.merge(stored, data)
        merged["output"] = str(output)
        cfg, env, resolved = resolve(merged)
        changed = config_differences(stored, resolved)
        if changed:
            raise InterplayError(
                f"--resume {resume}: the config changed ({', '.join(changed[:8])}"
                f"{', ...' if len(changed) > 8 else ''}); resume with the same settings "
                f"or start a new run with -o")
        return cfg, env, resolved, output
    if "output" not in data:
        name = str((data.get("env") or {}).get("name") or "")
        data["output"] = default_output(name)
    cfg, env, resolved = resolve(data)
    output = Path(str(cfg.output))
    if (output / EPISODES_FILE).exists() or (output / CONFIG_FILE).exists():
        raise InterplayError(f"{output} already holds a run; continue it with --resume {output} "
                             f"or choose another -o")
    output.mkdir(parents=True, exist_ok=True)
    write_json(output / CONFIG_FILE, {"config": resolved, "interplay": _version()})
    return cfg, env, resolved, output


def _version() -> str:
    from interplay import __version__

    return __version__


