"""The ``tau2`` verifier: an episode's trajectory becomes tau2's own simulation record and is
scored by tau2's evaluator (``evaluate_simulation``), with the task's reward basis.

A conversation tau2 would not score (any end but ``user_stop`` or ``agent_stop``: max steps,
too many errors) gets tau2's reward for it, 0. The reward is the episode's; each basis of the
breakdown (DB, COMMUNICATE, ACTION, ...) is a weight-0 reward of its own, so the report and the
summary show it without changing the episode's reward; the action checks, the communicate
checks and the database check are in the reward's ``info``. Natural-language assertions (no
shipped task has them in its basis) are judged with tau2's prompt by ``judge``, the run's
endpoint by default, through interplay's client: never tau2's hosted default, never litellm.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs

from interplay import Endpoint, Episode, EpisodeContext, InterplayError, Reward, Step, Verifier
from interplay.model import assistant_message
from interplay_tau2 import domains
from interplay_tau2.exchange import RESULTS_KEY

#: tau2 calls its natural-language judge through a module global (``generate``), replaced for
#: the length of one evaluation: one evaluation that needs it at a time.
_NL_LOCK = threading.Lock()


@attrs.define
class Tau2RewardConfig:
    #: The judge of natural-language assertions (any OpenAI-compatible endpoint, called through
    #: interplay's client with tau2's judge prompt), laid over the run's endpoint key by key
    #: as a seat's model table is; None: the run's endpoint (the embedded model when the run
    #: has none).
    judge: Endpoint | None = None


def simulation(record: dict[str, Any], episode_id: str) -> Any:
    """tau2's SimulationRun of one episode's ``results["tau2"]``."""
    tau = domains.tau2()
    return tau.simulation.SimulationRun.model_validate({
        "id": episode_id, "task_id": record["task_id"], "start_time": record["start_time"],
        "end_time": record["end_time"], "duration": record["duration"],
        "termination_reason": record["termination_reason"], "messages": record["messages"],
        "trial": record.get("trial", 0), "seed": record.get("seed"),
        "reward_info": record.get("reward_info"),
        # No price is known here: 0, which tau2's metrics add up (null prints as $nan).
        "agent_cost": 0.0, "user_cost": 0.0})


#: Asks the judge one chat (a list of role/content dicts) and gives its reply's text.
Judge = Callable[[list[dict[str, Any]]], str]


def evaluate(record: dict[str, Any], episode_id: str, judge: Judge | None = None) -> Any:
    """tau2's RewardInfo of one episode (blocking: tau2 replays the database). A task whose
    reward basis holds natural-language assertions has them judged by ``judge``."""
    tau = domains.tau2()
    task = domains.task(record["domain"], record["task_id"],
                        task_set=record.get("task_set", ""))
    sim = simulation(record, episode_id)
    sim.reward_info = None
    ev = tau.evaluator
    basis = set(task.evaluation_criteria.reward_basis) if task.evaluation_criteria else set()
    kwargs = {"simulation": sim, "task": task, "solo_mode": bool(record.get("solo")),
              "domain": domains.env_name(record["domain"], record.get("policy", ""))}
    if tau.tasks.RewardType.NL_ASSERTION not in basis:
        return ev.evaluate_simulation(evaluation_type=ev.EvaluationType.ALL, **kwargs)
    if judge is None:
        raise InterplayError(f"task {task.id!r} has natural-language assertions in its "
                             f"reward basis, and no judge was given to score them")
    nl = tau.nl_assertions

    def generate(model: str, messages: list[Any], **_: Any) -> Any:
        # tau2's judge prompt, answered by the run's judge instead of tau2's hosted model.
        text = judge([{"role": m.role, "content": m.content} for m in messages])
        return tau.message.AssistantMessage(role="assistant", content=text)

    with _NL_LOCK:
        saved = nl.generate
        nl.generate = generate
        try:
            return ev.evaluate_simulation(
                evaluation_type=ev.EvaluationType.ALL_WITH_NL_ASSERTIONS, **kwargs)
        finally:
            nl.generate = saved


def breakdown(info: dict[str, Any]) -> dict[str, Any]:
    """What the report shows of tau2's RewardInfo: each basis, each check, matched or not."""
    db = info.get("db_check") or {}
    return {
        "reward_basis": info.get("reward_basis"),
        "reward_breakdown": info.get("reward_breakdown"),
        "db_match": db.get("db_match") if db else None,
        "actions": [{"name": (c.get("action") or {}).get("name"),
                     "requestor": (c.get("action") or {}).get("requestor"),
                     "matched": c.get("action_match")}
                    for c in info.get("action_checks") or []],
        "communicate": [{"info": c.get("info"), "met": c.get("met")}
                        for c in info.get("communicate_checks") or []],
        "nl_assertions": [{"assertion": c.get("nl_assertion"), "met": c.get("met")}
                          for c in info.get("nl_assertions") or []],
        "env_assertions": [{"met": c.get("met")} for c in info.get("env_assertions") or []],
        "note": (info.get("info") or {}).get("note"),
    }


def reason(parts: dict[str, Any], termination: str) -> str:
    """The breakdown in one line."""
    if parts["reward_breakdown"] is None:
        return parts["note"] or f"not evaluated ({termination})"
    bits = [f"{k} {v:g}" for k, v in sorted(parts["reward_breakdown"].items())]
    if parts["actions"]:
        matched = sum(1 for a in parts["actions"] if a["matched"])
        missed = [a["name"] for a in parts["actions"] if not a["matched"]]
        bits.append(f"actions {matched}/{len(parts['actions'])} matched"
                    + (f" (missed: {', '.join(missed)})" if missed else ""))
    return f"{termination}: " + ", ".join(bits)


class Tau2Reward(Verifier):
    """tau2's own evaluator on the episode's trajectory: its reward and its breakdown."""

    name = "tau2"
    Config: ClassVar[type] = Tau2RewardConfig

    def check(self, steps: Sequence[Step]) -> list[str]:
        if not any(RESULTS_KEY in s.writes for s in steps):
            return ["needs the tau2 step, which writes the trajectory it scores"]
        return []

    async def score(self, episode: Episode, ctx: EpisodeContext) -> list[Reward]:
        record = episode.results.get(RESULTS_KEY)
        if not isinstance(record, dict) or "messages" not in record:
            raise InterplayError("the episode has no tau2 trajectory (results['tau2'])")
        client = ctx.resources.client(self.config.judge)
        loop = asyncio.get_running_loop()

        def judge(messages: list[dict[str, Any]]) -> str:
            # Called from evaluate's worker thread: the call itself runs on the run's loop.
            call = asyncio.run_coroutine_threadsafe(
                client.chat(messages, temperature=0.0), loop).result()
            episode.judge_calls.append(call)
            reply = assistant_message(call) if call.error_type is None else None
            if reply is None:
                raise InterplayError(f"the natural-language judge failed: "
                                     f"{call.error or 'no message in its response'}")
            return reply.content if isinstance(reply.content, str) else ""

        info = await asyncio.to_thread(evaluate, record, episode.info.episode_id, judge)
        plain = info.model_dump(mode="json")
        record["reward_info"] = plain
        parts = breakdown(plain)
        termination = record["termination_reason"]
        rewards = [Reward("tau2", float(info.reward), reason=reason(parts, termination),
                          info=parts)]
        for basis, value in sorted((parts["reward_breakdown"] or {}).items()):
            rewards.append(Reward(f"tau2_{basis.lower()}", float(value), weight=0.0))
        return rewards
