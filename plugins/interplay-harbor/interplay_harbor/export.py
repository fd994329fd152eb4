"""``interplay export RUN --format harbor``: a run of the harbor env as a Harbor job folder,
in the layout ``harbor run`` writes and Harbor's own tools read (its ``JobResult`` and
``TrialResult`` models, ``harbor view``)::

    JOB/result.json                      the job: trial counts, per agent and dataset the mean
                                         of each reward key, reward and exception stats
    JOB/config.json                      the job's config (its name, the run's folder)
    JOB/<task>__<id>/result.json         one trial: task, agent, rewards, exception, timings
    JOB/<task>__<id>/config.json         the trial's config
    JOB/<task>__<id>/agent/oracle.txt    what the oracle's solve.sh printed (oracle only)
    JOB/<task>__<id>/verifier/...        /logs/verifier as the tests left it: test-stdout.txt,
                                         reward.txt or reward.json

An episode is a trial; one that ended in an error is a trial with its ``exception_info`` and
no reward (Harbor counts it errored), and one of another env is left out and counted. The
agent is the assistant seat's harness (``oracle`` and ``nop`` under Harbor's names), its model
the seat's; the dataset is the task folder's parent folder, as Harbor names a ``-p`` folder.
A job's metrics follow Harbor's ``Mean``: over the trials with a valid reward, each key's mean
with a key a trial lacks counted 0 (one key: its mean under ``mean``). ``task_checksum`` is a
SHA-256 of the task folder's files (paths and bytes), not Harbor's dirhash. pass@k is left
empty. Timestamps are the run's own.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from interplay import ErrorType, ExportFormat, InterplayError, Written, __version__
from interplay_harbor.env import RESULTS_KEY

#: Harbor's name of a trial's verifier error, by what interplay recorded.
_EXCEPTIONS = {"RewardError": "RewardFileNotFoundError"}


class HarborJob(ExportFormat):
    """A Harbor job folder (result.json, one folder per trial), which Harbor's tools read."""

    name = "harbor"
    description = "a Harbor job folder (job and trial result.json, verifier/ files)"
    default_output = "harbor-job"
    writes_folder = True

    def write(self, episodes: Iterable[dict[str, Any]], output: Path, *,
              run_config: Mapping[str, Any]) -> Written:
        config = run_config.get("config") or {}
        env_name = (config.get("env") or {}).get("name")
        if env_name not in (None, "harbor"):
            raise InterplayError(f"{output.parent}: not a run of the harbor env (its env is "
                                 f"{env_name!r}); export --format harbor takes harbor runs")
        job_name = Path(str(config.get("output") or output.parent)).name or "interplay"
        job_id = uuid.uuid5(uuid.NAMESPACE_URL, f"interplay-job:{job_name}:{output.name}")
        trials: list[dict[str, Any]] = []
        skipped: dict[str, int] = {}
        started: list[str] = []
        for record in episodes:
            harbor = (record.get("task") or {}).get("info", {}).get(RESULTS_KEY)
            if not isinstance(harbor, dict):
                skipped["episodes of another env"] = skipped.get("episodes of another env",
                                                                 0) + 1
                continue
            trial = _trial(record, harbor, output, job_id)
            folder = output / trial["trial_name"]
            (folder / "verifier").mkdir(parents=True)
            _write_files(folder, record)
            (folder / "config.json").write_text(json.dumps(trial["config"], indent=4))
            (folder / "result.json").write_text(json.dumps(trial, indent=4))
            trials.append(_summary(trial))
            if trial["started_at"]:
                started.append(trial["started_at"])
        if not trials:
            raise InterplayError(f"{output.parent}: no episode of the harbor env to export")
        (output / "config.json").write_text(json.dumps(
            {"schema_version": 1, "job_name": job_name, "jobs_dir": str(output.parent),
             "n_attempts": 1, "n_concurrent_trials": config.get("concurrency", 1)}, indent=4))
        finished = max(t["finished_at"] or "" for t in trials) or None
        (output / "result.json").write_text(json.dumps(
            {"schema_version": 1, "id": str(job_id),
             "started_at": min(started) if started else None, "updated_at": finished,
             "finished_at": finished, "n_total_trials": len(trials),
             "stats": job_stats(trials)}, indent=4))
        return Written(episodes=len(trials), skipped=skipped)


def _trial(record: dict[str, Any], harbor: dict[str, Any], output: Path,
           job_id: uuid.UUID) -> dict[str, Any]:
    """One episode as Harbor's TrialResult."""
    info = record["info"]
    results = (record.get("results") or {}).get(RESULTS_KEY) or {}
    timing = results.get("timing") or {}
    task_path = Path(harbor["path"])
    trial_name = f"{harbor['name']}__{info['episode_id'][:7]}"
    traces = record.get("traces") or []
    agent = next((t for t in traces if t.get("seat") == "assistant"), traces[0] if traces else {})
    harness = agent.get("harness") or "unknown"
    model = agent.get("model") or None
    if harness in ("oracle", "nop"):
        model = None
    usage = _usage(agent)
    verifier = results.get("verifier") or {}
    rewards = verifier.get("rewards") if record.get("error_type") is None else None
    source = task_path.parent.name or "adhoc"
    config = {
        "schema_version": 1,
        "task": {"path": str(task_path), "source": source},
        "trial_name": trial_name, "trials_dir": str(output),
        "agent": {"name": harness, "model_name": model},
        "environment": {"type": "docker"},
        "job_id": str(job_id),
    }
    started = _iso(record.get("started_at"))
    wall = record.get("wall_s")
    finished = _iso((record.get("started_at") or 0) + wall) if started and wall else None
    agent_run = timing.get("agent_execution")
    return {
        "schema_version": 1,
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"interplay-episode:{info['episode_id']}")),
        "task_name": harbor["name"], "trial_name": trial_name,
        "trial_uri": (output / trial_name).as_uri(),
        "task_id": {"path": str(task_path)}, "source": source,
        "task_checksum": checksum(task_path),
        "config": config,
        "agent_info": {"name": harness, "version": f"interplay {__version__}",
                       "model_info": {"name": model, "provider": None} if model else None},
        "agent_result": {"n_input_tokens": usage[0], "n_cache_tokens": None,
                         "n_output_tokens": usage[1], "cost_usd": None, "model_usage": None,
                         "rollout_details": None,
                         "metadata": {"interplay_episode_id": info["episode_id"]}},
        "verifier_result": {"rewards": rewards} if rewards is not None else None,
        "verifier_environment_mode": "shared",
        "exception_info": _exception(record, results),
        "started_at": started, "finished_at": finished,
        "environment_setup": _timing(timing.get("environment_setup")),
        # Nothing to install: the program is brought in when the sandbox starts.
        "agent_setup": ({"started_at": agent_run["started_at"],
                         "finished_at": agent_run["started_at"]} if agent_run else None),
        "agent_execution": _timing(agent_run),
        "verifier": _timing(timing.get("verifier")),
        "step_results": None,
    }


def _exception(record: dict[str, Any], results: dict[str, Any]) -> dict[str, Any] | None:
    """The trial's exception as Harbor records one: the agent's timeout, or why the episode
    ended without a reward."""
    error = record.get("error")
    if error:
        kept = (results.get("verifier") or {}).get("exception")
        kind = _EXCEPTIONS.get(kept or "", kept) if record.get("error_type") == \
            ErrorType.VERIFIER_ERROR and kept else (record.get("error_type") or "Error")
        return {"exception_type": kind, "exception_message": error,
                "exception_traceback": "", "occurred_at": _iso(
                    (record.get("started_at") or 0) + (record.get("wall_s") or 0))}
    timeout = results.get("exception_info")
    if timeout:
        return {**timeout, "exception_traceback": ""}
    return None


def _write_files(folder: Path, record: dict[str, Any]) -> None:
    results = (record.get("results") or {}).get(RESULTS_KEY) or {}
    for name, text in ((results.get("verifier") or {}).get("files") or {}).items():
        path = folder / "verifier" / name
        if ".." in Path(name).parts:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for trace in record.get("traces") or []:
        oracle = (trace.get("info") or {}).get("oracle")
        if isinstance(oracle, dict):
            (folder / "agent").mkdir(exist_ok=True)
            (folder / "agent" / "oracle.txt").write_text(oracle.get("output", ""))
            if oracle.get("exit_code") not in (0, None):
                (folder / "agent" / "exit-code.txt").write_text(str(oracle["exit_code"]))


def _summary(trial: dict[str, Any]) -> dict[str, Any]:
    """What the job's stats read of a trial."""
    model = (trial["agent_info"]["model_info"] or {}).get("name")
    return {"trial_name": trial["trial_name"], "agent": trial["agent_info"]["name"],
            "model": model, "source": trial["source"],
            "rewards": (trial["verifier_result"] or {}).get("rewards"),
            "exception": (trial["exception_info"] or {}).get("exception_type"),
            "tokens": (trial["agent_result"]["n_input_tokens"],
                       trial["agent_result"]["n_output_tokens"]),
            "finished_at": trial["finished_at"]}


def evals_key(agent: str, model: str | None, dataset: str) -> str:
    """Harbor's key of one agent (and model) on one dataset."""
    return f"{agent}__{model}__{dataset}" if model else f"{agent}__{dataset}"


#: Exceptions after which Harbor still counts the reward valid (its error policy's graded ones).
_GRADED = {"AgentTimeoutError", "NonZeroAgentExitCodeError"}


def job_stats(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Harbor's JobStats of the trials (``JobStats.from_trial_results`` and the Mean metric)."""
    evals: dict[str, dict[str, Any]] = {}
    valid_rewards: dict[str, list[dict[str, float]]] = {}
    errored = 0
    tokens_in = tokens_out = None
    for t in trials:
        key = evals_key(t["agent"], t["model"], t["source"])
        stats = evals.setdefault(key, {"n_trials": 0, "n_errors": 0, "metrics": [],
                                       "pass_at_k": {}, "reward_stats": {},
                                       "exception_stats": {}})
        valid = t["rewards"] is not None and bool(t["rewards"]) and (
            t["exception"] is None or t["exception"] in _GRADED)
        if valid:
            stats["n_trials"] += 1
            valid_rewards.setdefault(key, []).append(t["rewards"])
            for name, value in t["rewards"].items():
                stats["reward_stats"].setdefault(name, {}).setdefault(
                    str(value), []).append(t["trial_name"])
        if t["exception"] is not None:
            stats["exception_stats"].setdefault(t["exception"], []).append(t["trial_name"])
            stats["n_errors"] += 1
            errored += 1
        if t["tokens"][0] is not None:
            tokens_in = (tokens_in or 0) + t["tokens"][0]
        if t["tokens"][1] is not None:
            tokens_out = (tokens_out or 0) + t["tokens"][1]
    for key, rewards in valid_rewards.items():
        evals[key]["metrics"] = [mean_metric(rewards)]
    return {"n_completed_trials": len(trials), "n_errored_trials": errored,
            "n_running_trials": 0, "n_pending_trials": 0, "n_cancelled_trials": 0,
            "n_retries": 0, "evals": evals, "n_input_tokens": tokens_in,
            "n_cache_tokens": None, "n_output_tokens": tokens_out, "cost_usd": None}


def mean_metric(rewards: list[dict[str, float]]) -> dict[str, float]:
    """Harbor's Mean: each key's mean over the trials, a key a trial lacks counted 0; with one
    key at most, the mean of each trial's one value under ``mean``."""
    keys = sorted({k for r in rewards for k in r})
    if len(keys) <= 1:
        values = [next(iter(r.values()), 0) for r in rewards]
        return {"mean": sum(values) / len(values)}
    return {k: sum(r.get(k, 0) for r in rewards) / len(rewards) for k in keys}


def checksum(folder: Path) -> str:
    """SHA-256 of a task folder's files: each one's relative path and bytes, in path order."""
    h = hashlib.sha256()
    if folder.is_dir():
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            h.update(path.relative_to(folder).as_posix().encode() + b"\0")
            h.update(path.read_bytes())
    return h.hexdigest()


def _usage(trace: dict[str, Any]) -> tuple[int | None, int | None]:
    calls = trace.get("model_calls") or []
    if not calls:
        return None, None
    prompt = sum(((c.get("usage") or {}).get("prompt_tokens") or 0) for c in calls)
    completion = sum(((c.get("usage") or {}).get("completion_tokens") or 0) for c in calls)
    return prompt, completion


def _timing(kept: Any) -> dict[str, Any] | None:
    if not isinstance(kept, dict):
        return None
    return {"started_at": kept.get("started_at"), "finished_at": kept.get("finished_at")}


def _iso(epoch: float | None) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch else None
