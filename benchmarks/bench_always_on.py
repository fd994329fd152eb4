"""The always_on loop's fidelity and cost over a simulated month.

Runs the builtin ``always-on-month`` scenario (30 days, 500 events from a fixed seed) with an
instant scripted agent (the scripted model, over real HTTP: it answers the user's lines with
``message_user`` and everything else with ``stay_quiet``) and an instant scripted user, and
prints:

* events delivered late or early (target 0), recounted here from the timeline rather than
  taken from the run's own counts: an event is late when the wake that brings it starts in a
  later minute than the one it fell due in (or than the end of the agent's previous turn, when
  it fell due while the agent was busy), early when the wake starts before it is due;
* real sleeps waiting for simulated time (target 0): waits on the clock that slept in real time,
  plus every ``asyncio.sleep`` with a delay called on the episode's event loop while it ran;
* wall time for the simulated month (target <= 10 s on this 2-core machine), and per wake;
* memory of the timeline: its entries, its JSON size, its objects (a recursive sizeof), and the
  peak traced allocation of the whole episode;
* the agent's largest request, and with ``--max-context-tokens N`` (its history folded within
  N estimated tokens) the wakes in the digest at the end.

Run by hand (it prints figures; nothing is asserted):

    .venv/bin/python benchmarks/bench_always_on.py            # three runs
    .venv/bin/python benchmarks/bench_always_on.py --runs 1 --trace-memory
    .venv/bin/python benchmarks/bench_always_on.py --runs 1 --max-context-tokens 6000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
import tracemalloc
from typing import Any

from interplay import _aio as aio
from interplay import log, plugins
from interplay.records import Episode
from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted


def agent(request: ScriptedRequest) -> ScriptedReply:
    msgs = request.messages
    system = str(msgs[0].get("content")) if msgs and msgs[0]["role"] == "system" else ""
    if "role-playing a user" in system:
        return ScriptedReply.text("ok, thanks")
    last = msgs[-1]
    if last["role"] == "tool":
        return ScriptedReply.text("")
    text = str(last.get("content"))
    if text.startswith("[always_on] Earlier in this run"):
        text = text.split("\n\n", 1)[1]  # the digest of folded wakes opens the message
    if "(the user) wrote:" in text:
        return ScriptedReply.tool_call("message_user", {"text": "On it; I will report back."})
    return ScriptedReply.tool_call("stay_quiet", {})


def recount(timeline: list[dict[str, Any]]) -> dict[str, int]:
    """Late and early deliveries, from the timeline alone."""
    late = early = delivered = 0
    free_t = -math.inf
    for entry in timeline:
        if entry["kind"] != "wake":
            continue
        for source in entry["sources"]:
            if "due_t" not in source:
                continue
            delivered += 1
            due = source["due_t"]
            if entry["t"] < due - 1e-6:
                early += 1
            elif math.floor(entry["t"] / 60) > math.floor(max(due, free_t) / 60):
                late += 1
        free_t = entry["end_t"]
    return {"delivered": delivered, "late": late, "early": early}


def sizeof(value: Any, seen: set[int] | None = None) -> int:
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(sizeof(k, seen) + sizeof(v, seen) for k, v in value.items())
    elif isinstance(value, list | tuple):
        size += sum(sizeof(v, seen) for v in value)
    return size


async def one_run(trace_memory: bool, max_context_tokens: int | None = None) -> dict[str, Any]:
    history = {} if max_context_tokens is None else {"max_context_tokens": max_context_tokens}
    env = plugins.get("envs", "always-on-month")({"always_on": {"history": history}})
    env.check()
    task = next(iter(env.tasks()))
    sleeps = 0
    real_sleep = asyncio.sleep
    loop = asyncio.get_running_loop()

    async def counting_sleep(delay: float, *args: Any, **kwargs: Any) -> Any:
        nonlocal sleeps
        # The episode's loop only: the scripted model's server ticks on a loop of its own.
        if delay > 0 and asyncio.get_running_loop() is loop:
            sleeps += 1
        return await real_sleep(delay, *args, **kwargs)

    asyncio.sleep = counting_sleep  # type: ignore[assignment]
    if trace_memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    try:
        result = await run_scripted(env, task, agent, seed=0)
    finally:
        asyncio.sleep = real_sleep  # type: ignore[assignment]
    wall = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] if trace_memory else None
    if trace_memory:
        tracemalloc.stop()
    episode: Episode = result.episode
    if episode.error:
        raise SystemExit(f"the month ended in an error: {episode.error}")
    record = episode.results["always_on"]
    counts = record["summary"]["counts"]
    timeline = record["timeline"]
    return {
        "wall_s": round(wall, 3),
        "wakes": counts["wakes"],
        "ms_per_wake": round(1000 * wall / max(1, counts["wakes"]), 2),
        "model_calls": len(result.requests),
        "largest_agent_request_kb": round(max(
            len(json.dumps(c.request)) for c in episode.trace("assistant").model_calls) / 1024,
            1),
        "folded_wakes": counts["folded_wakes"],
        **recount(timeline),
        "late_by_the_run": counts["late_events"],
        "real_sleeps": sleeps + counts["real_waits"],
        "timeline_entries": len(timeline),
        "timeline_json_kb": round(len(json.dumps(timeline).encode()) / 1024, 1),
        "timeline_objects_kb": round(sizeof(timeline) / 1024, 1),
        "episode_peak_traced_mb": None if peak is None else round(peak / 2**20, 1),
        "end_reason": record["end_reason"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trace-memory", action="store_true",
                        help="trace allocations (slows the run; wall time is then not comparable)")
    parser.add_argument("--max-context-tokens", type=int, default=None,
                        help="fold the agent's earlier wakes within this budget "
                             "(env.always_on.history.max_context_tokens)")
    args = parser.parse_args(argv)
    log.configure(fmt="console", level="warning")
    walls = []
    for i in range(args.runs):
        figures = aio.run(one_run(args.trace_memory, args.max_context_tokens))
        walls.append(figures["wall_s"])
        print(json.dumps({"run": i + 1, **figures}), flush=True)
    print(json.dumps({"runs": args.runs, "wall_s_min": min(walls),
                      "wall_s_median": statistics.median(walls), "target_wall_s": 10.0,
                      "target_late_early": 0, "target_real_sleeps": 0}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
