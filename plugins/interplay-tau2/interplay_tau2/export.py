"""``interplay export RUN --format tau2``: a run of a tau2 env as tau2's own results file, which
tau2 loads (``Results.model_validate_json``, ``Results.load``), shows in its viewer and scores
again (``tau2 evaluate-trajs``) to the same rewards.

Each scored episode is one of tau2's simulations (its trajectory, termination reason, seed,
trial and reward info); an episode that ended in an error (an infrastructure fault, never
scored) is left out and counted. The file's ``info`` says which model played each side with the
sampling its requests carried (the run's seats as config.json records them: the env's
defaults, the run's model and seat settings) and which user sim played the user, never a
credential: no API key, header or key variable of the run is written (tau2's own runner
writes the ``api_key`` it was given). interplay knows no model's price: each simulation's
``agent_cost`` and ``user_cost`` are 0, which tau2's tools add up, rather than null.

The simulations are streamed to the file as they are read; the tasks (tau2's own, by id) are
written after them.
"""

from __future__ import annotations

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
        with output.open("w") as out:
            stamp = json.dumps(tau.simulation.get_now())
            info = _info(tau, run_config, env).model_dump_json()
            out.write(f'{{"timestamp": {stamp}, "info": {info}, "simulations": [')
            for record in episodes:
                trajectory = (record.get("results") or {}).get(RESULTS_KEY)
                if record.get("error_type") is not None or not isinstance(trajectory, dict) \
                        or "reward_info" not in trajectory:
                    why = "error episodes" if record.get("error_type") else "unscored episodes"
                    skipped[why] = skipped.get(why, 0) + 1
                    continue
                sim = simulation(trajectory, record["info"]["episode_id"])
                out.write(("," if written else "") + sim.model_dump_json())
                written += 1
                if trajectory["task_id"] not in task_ids:
                    task_ids.append(trajectory["task_id"])
            tasks = [domains.task(domain, i, task_set=env.get("task_set", "")) for i in task_ids]
            out.write('], "tasks": [' + ",".join(t.model_dump_json() for t in tasks) + "]}")
        return Written(episodes=written, skipped=skipped)


def _info(tau: Any, stored: Mapping[str, Any], env: Mapping[str, Any]) -> Any:
    """tau2's Info of the run: models and the sampling each side's requests carried, limits,
    seed, who played the user; no credential."""
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

    agent_llm, agent_args = llm(env.get("seat", "assistant"))
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
        agent_info=tau.simulation.AgentInfo(implementation="interplay", llm=agent_llm,
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
