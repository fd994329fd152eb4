"""``interplay export RUN --format tau2``: a run of a tau2 env as tau2's own results file, which
tau2 loads (``Results.model_validate_json``, ``Results.load``), shows in its viewer and scores
again (``tau2 evaluate-trajs``) to the same rewards.

Each scored episode is one of tau2's simulations (its trajectory, termination reason, seed,
trial and reward info); an episode that ended in an error (an infrastructure fault, never
scored) is left out and counted. The file's ``info`` says which model played each side with the
sampling its requests carried (the run's seats as config.json records them: the env's
defaults, the run's model and seat settings), which harness played the agent
(``agent_info.implementation``: ``interplay harness NAME``) and which user sim played the
user, never a credential: no API key, header or key variable of the run is written (tau2's
own runner writes the ``api_key`` it was given). interplay knows no model's price: each simulation's
``agent_cost`` and ``user_cost`` are 0, which tau2's tools add up, rather than null.

The simulations are streamed to the file as they are read; the tasks (tau2's own, by id), the
info and the timestamp are written after them. Every time in the file is the run's: each
simulation is stamped when its episode ended and the file with its first episode's start, so
two exports of a run are the same bytes.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from interplay import ExportFormat, InterplayError, Written, lookup
from interplay_tau2 import domains
from interplay_tau2.env import Tau2Env
from interplay_tau2.exchange import RESULTS_KEY
from interplay_tau2.scoring import simulation


class Tau2Results(ExportFormat):
    """tau2-bench's results file (Results JSON), for tau2's viewer, tools and leaderboard."""

    name = "tau2"
    description = "tau2-bench's results file (tau2 loads it and scores it again)"
    default_output = "tau2-results.json"

    def write(self, episodes: Iterable[dict[str, Any]], output: Path, *,
              run_config: Mapping[str, Any]) -> Written:
        tau = domains.tau2()
        config = run_config.get("config") or {}
        env = config.get("env") or {}
        domain = env.get("domain")
        if domain not in domains.DOMAINS:
            raise InterplayError(f"{output.parent}: not a run of a tau2 env (its env is "
                                 f"{env.get('name')!r}); export --format tau2 takes runs of "
                                 f"tau2-mock, tau2-airline, tau2-retail or tau2-telecom")
        skipped: dict[str, int] = {}
        task_ids: list[str] = []
        written = 0
        seat = env.get("seat", "assistant")
        harnesses: list[str] = []
        first: float | None = None
        with output.open("w") as out:
            out.write('{"simulations": [')
            for record in episodes:
                started = record.get("started_at")
                if isinstance(started, int | float) and started > 0:
                    first = started if first is None else min(first, started)
                harness = _harness_of(record, seat)
                if harness and harness not in harnesses:
                    harnesses.append(harness)
                trajectory = (record.get("results") or {}).get(RESULTS_KEY)
                if record.get("error_type") is not None or not isinstance(trajectory, dict) \
                        or "reward_info" not in trajectory:
                    why = "error episodes" if record.get("error_type") else "unscored episodes"
                    skipped[why] = skipped.get(why, 0) + 1
                    continue
                sim = simulation(trajectory, record["info"]["episode_id"])
                # Stamped when its episode ended, as tau2's runner stamps a simulation as it
                # finishes: never the export's time, so a run exports the same bytes again.
                sim.timestamp = trajectory["end_time"]
                out.write(("," if written else "") + sim.model_dump_json())
                written += 1
                if trajectory["task_id"] not in task_ids:
                    task_ids.append(trajectory["task_id"])
            tasks = [domains.task(domain, i, task_set=env.get("task_set", "")) for i in task_ids]
            info = _info(tau, run_config, env, harnesses).model_dump_json()
            # The run's time: its first episode's start (tau2's runner stamps its results file
            # when the run starts).
            stamp = json.dumps(_stamp(first))
            out.write('], "tasks": [' + ",".join(t.model_dump_json() for t in tasks)
                      + f'], "info": {info}, "timestamp": {stamp}}}')
        return Written(episodes=written, skipped=skipped)


def _harness_of(record: Mapping[str, Any], seat: str) -> str:
    """The harness that played ``seat`` in an episode, as its trace records it."""
    for trace in record.get("traces") or ():
        if isinstance(trace, Mapping) and (trace.get("seat") or trace.get("agent")) == seat:
            return str(trace.get("harness") or "")
    return ""


def _stamp(epoch: float | None) -> str:
    """An epoch time in tau2's format (``get_now``'s: local ISO time), or "" when no episode
    says when it started."""
    if epoch is None:
        return ""
    return datetime.datetime.fromtimestamp(epoch).isoformat()


def _info(tau: Any, stored: Mapping[str, Any], env: Mapping[str, Any],
          harnesses: list[str] | None = None) -> Any:
    """tau2's Info of the run: models and the sampling each side's requests carried, limits,
    seed, the harness that played the agent (``harnesses``: as the episodes' traces record
    it, else as config.json's seats say), who played the user; no credential."""
    config = stored.get("config") or {}
    model = config.get("model") or {}
    environment = tau.registry.get_env_constructor(
        domains.env_name(env["domain"], env.get("policy", "")))()
    sim = env.get("user_sim") or "tau2"
    # tau2's guidelines are what its own simulator is prompted with; another user sim's
    # prompt is its own, which the file does not claim to know.
    guidelines = tau.user_simulator.get_global_user_sim_guidelines(
        use_tools=environment.user_tools is not None) if sim == "tau2" else None

    def llm(seat: str) -> tuple[str, dict[str, Any]]:
        filled = (stored.get("seats") or {}).get(seat)
        if isinstance(filled, Mapping):
            # The seat as the run filled it (config.json's seats): the sampling sent.
            endpoint = filled.get("model") or model
            args: dict[str, Any] = dict(filled.get("sampling") or {})
        else:  # a run recorded before config.json kept its seats: their layers again
            spec = (config.get("seats") or {}).get(seat) or {}
            endpoint = spec.get("model") or model
            own = Tau2Env.seats[seat].sampling if seat in Tau2Env.seats else {}
            args = {**own, **(endpoint.get("sampling") or {}), **(spec.get("sampling") or {})}
        if endpoint.get("base_url"):
            args["api_base"] = _without_userinfo(str(endpoint["base_url"]))
        return str(endpoint.get("model") or "embedded"), args

    seat = env.get("seat", "assistant")
    agent_llm, agent_args = llm(seat)
    if not harnesses:
        filled = (stored.get("seats") or {}).get(seat)
        spec = filled if isinstance(filled, Mapping) else \
            (config.get("seats") or {}).get(seat) or {}
        default = Tau2Env.seats[seat].harness if seat in Tau2Env.seats else "chat"
        harnesses = [str(spec.get("harness") or default)]
    user_llm: str | None
    user_args: dict[str, Any] | None
    if _plays_with_a_model(sim, env.get("user_sim_settings") or {}):
        user_llm, user_args = llm(env.get("user_seat", "user"))
    else:  # her words are the sim's own: no model, no sampling
        user_llm, user_args = None, None
    return tau.simulation.Info(
        git_commit="", num_trials=int(config.get("rollouts") or 1),
        max_steps=int(env.get("max_steps", 100)), max_errors=int(env.get("max_errors", 10)),
        user_info=tau.simulation.UserInfo(implementation=f"interplay user sim {sim}",
                                          llm=user_llm, llm_args=user_args,
                                          global_simulation_guidelines=guidelines),
        agent_info=tau.simulation.AgentInfo(
            implementation=f"interplay harness {', '.join(harnesses)}", llm=agent_llm,
            llm_args=agent_args),
        environment_info=environment.get_info(), seed=config.get("seed"))


def _plays_with_a_model(sim: str, settings: Mapping[str, Any]) -> bool:
    """Whether the user sim ``sim`` with ``settings`` plays her on a seat's model (its
    ``seats()``); True when that cannot be told here (the sim's plugin is not installed)."""
    try:
        made = lookup("user-sims", sim)()
        made.configure(dict(settings))
    except InterplayError:
        return True
    return bool(made.seats())


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
