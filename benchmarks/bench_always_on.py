"""The always_on loop's fidelity and cost over a simulated month.

Runs the builtin ``always-on-month`` scenario (30 days, 500 events from a fixed seed) with an
instant scripted agent (the scripted model, over real HTTP: it answers the user's lines with
``message_user`` and everything else with ``stay_quiet``) and an instant scripted user, and
prints:

* events fired late (target 0 at every rate), recounted here from the timeline against the
  scenario: every time trigger's fire at its scheduled mark, to the microsecond, and every read
  of hers at the moment her schedule says (when the message reached her, or when she was next
  free);
* events delivered late or early, recounted from the timeline: an event reached the agent late
  when the wake that brings it starts in a later minute than the one it fell due in (target 0
  at rate 0; at a rate where turns take simulated minutes, what falls due during a turn reaches
  the agent at the next wake: counted, not a fault), early when the wake starts before it is
  due (target 0);
* real sleeps waiting for simulated time (target 0): waits on the clock that slept in real time,
  plus every ``asyncio.sleep`` with a delay called on the episode's event loop while it ran;
* wall time for the simulated month (target <= 10 s on this 2-core machine), and per wake;
* memory of the timeline: its entries, its JSON size, its objects (a recursive sizeof), and the
  peak traced allocation of the whole episode;
* the agent's largest request, and with ``--max-context-tokens N`` (its history folded within
  N estimated tokens) the wakes in the digest at the end;
* the episode's record on disk: its whole line, the line episodes.jsonl gets (target under
  64 KB: the bulk goes to the episode's side file) and the side file.

``--rate R --latency-s S`` runs the month with the clock running during the agent's turns: each
of the agent's model calls takes S real seconds, R x S simulated seconds (``--rate 600
--latency-s 0.1``: a minute a call, two minutes or so a turn).

Run by hand (it prints figures; nothing is asserted):

    .venv/bin/python benchmarks/bench_always_on.py            # three runs
    .venv/bin/python benchmarks/bench_always_on.py --runs 1 --trace-memory
    .venv/bin/python benchmarks/bench_always_on.py --runs 1 --max-context-tokens 6000
    .venv/bin/python benchmarks/bench_always_on.py --runs 1 --rate 600 --latency-s 0.1
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

from interplay import log
from interplay._plumbing import aio
from interplay.run.loader import env_class
from interplay.run.results import LINE_BOUND, episode_line, episode_parts
from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted
from interplay.values.records import Episode
from interplay.world import Schedule, load_scenario, times


def make_agent(latency_s: float = 0.0) -> Any:
    def agent(request: ScriptedRequest) -> ScriptedReply:
        msgs = request.messages
        system = str(msgs[0].get("content")) if msgs and msgs[0]["role"] == "system" else ""
        if "role-playing a user" in system:
            return ScriptedReply.text("ok, thanks")  # her reads take no time of the agent's
        last = msgs[-1]
        if last["role"] == "tool":
            return ScriptedReply.text("", latency_s=latency_s)
        text = str(last.get("content"))
        if text.startswith("[always_on] Earlier in this run"):
            text = text.split("\n\n", 1)[1]  # the digest of folded wakes opens the message
        if "(the user) wrote:" in text:
            return ScriptedReply.tool_call("message_user", {"text": "On it; I will report back."},
                                           latency_s=latency_s)
        return ScriptedReply.tool_call("stay_quiet", {}, latency_s=latency_s)

    return agent


def recount(timeline: list[dict[str, Any]]) -> dict[str, int]:
    """Late and early deliveries, from the timeline alone."""
    late = early = delivered = 0
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
            elif math.floor(entry["t"] / 60) > math.floor(due / 60):
                late += 1
    return {"delivered": delivered, "reached_late": late, "early": early}


def fired_late(record: dict[str, Any], scenario_path: str) -> dict[str, int]:
    """What the world did after its time, against the scenario: each time trigger's fires at
    their scheduled marks, and each of her reads when her schedule says."""
    scenario = load_scenario(scenario_path)
    tz, start = scenario.timezone, scenario.start_time
    scheduled: dict[tuple[str, int], float] = {}
    for trigger in scenario.triggers:
        if not trigger.timed:
            continue
        first = times.parse_instant(trigger.at, tz) if trigger.at else start + (
            times.parse_duration(trigger.after) if trigger.after else
            times.parse_duration(trigger.every))
        for n in range(1, (trigger.count or 1) + 1):
            step = times.parse_duration(trigger.every) if trigger.every else 0.0
            scheduled[(trigger.name, n)] = first + (n - 1) * step - start
    timeline = record["timeline"]
    fires = late_fires = 0
    for entry in timeline:
        key = (entry.get("trigger"), entry.get("fire"))
        if entry["kind"] == "fire" and key in scheduled:
            fires += 1
            late_fires += entry["t"] > scheduled[key] + 1e-6
    schedule = Schedule.from_plain(record_user(record))
    sent = {m["n"]: m["t"] for m in record["response"]}
    reads = late_reads = 0
    for entry in timeline:
        if entry["kind"] != "read" or entry["last_read"] or not entry["messages"]:
            continue
        reads += 1
        reached = start + sent.get(entry["messages"][0], entry["t"])
        due = schedule.next_free(reached)
        late_reads += due is None or entry["t"] > due - start + 1e-6
    return {"timed_fires": fires, "fired_late": late_fires, "reads": reads,
            "read_late": late_reads}


def record_user(record: dict[str, Any]) -> dict[str, Any]:
    return record["_user"]


def sizes(episode: Episode) -> dict[str, float]:
    """The episode's line whole (as it was written before side files), the line
    episodes.jsonl gets, and its side file (KB), with the seconds to make the parts."""
    whole = episode_line(episode)
    t0 = time.perf_counter()
    line, side = episode_parts(episode)
    made = time.perf_counter() - t0
    side_len = len(side or b"")
    return {"line_whole_kb": round(len(whole) / 1024, 1),
            "line_kb": round(len(line) / 1024, 1), "line_target_kb": LINE_BOUND // 1024,
            "side_file_kb": round(side_len / 1024, 1),
            "files_kb": round((len(line) + 1 + side_len) / 1024, 1),
            "parts_s": round(made, 3)}


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


async def one_run(trace_memory: bool, max_context_tokens: int | None = None,
                  rate: float = 0.0, latency_s: float = 0.0) -> dict[str, Any]:
    history = {} if max_context_tokens is None else {"max_context_tokens": max_context_tokens}
    env = env_class("always-on-month")({"always_on": {"history": history,
                                                                "rate": rate}})
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
        result = await run_scripted(env, task, make_agent(latency_s), seed=0)
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
    world = fired_late({**record, "_user": episode.results["user"]}, env.source)
    return {
        "rate": rate,
        "latency_s": latency_s,
        "wall_s": round(wall, 3),
        "wakes": counts["wakes"],
        "ms_per_wake": round(1000 * wall / max(1, counts["wakes"]), 2),
        "model_calls": len(result.requests),
        "largest_agent_request_kb": round(max(
            len(json.dumps(c.request)) for c in episode.trace("assistant").model_calls) / 1024,
            1),
        "folded_wakes": counts["folded_wakes"],
        **world,
        **recount(timeline),
        "late_events_by_the_run": counts["late_events"],
        "turn_sim_s_mean": round(statistics.mean(
            w["end_t"] - w["t"] for w in timeline if w["kind"] == "wake"), 1),
        "real_sleeps": sleeps + counts["real_waits"],
        "timeline_entries": len(timeline),
        "timeline_json_kb": round(len(json.dumps(timeline).encode()) / 1024, 1),
        "timeline_objects_kb": round(sizeof(timeline) / 1024, 1),
        "episode_peak_traced_mb": None if peak is None else round(peak / 2**20, 1),
        **sizes(episode),
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
    parser.add_argument("--rate", type=float, default=0.0,
                        help="simulated seconds per real second during the agent's turns")
    parser.add_argument("--latency-s", type=float, default=0.0,
                        help="real seconds each of the agent's model calls takes")
    args = parser.parse_args(argv)
    log.configure(fmt="console", level="warning")
    walls = []
    for i in range(args.runs):
        figures = aio.run(one_run(args.trace_memory, args.max_context_tokens, args.rate,
                                  args.latency_s))
        walls.append(figures["wall_s"])
        print(json.dumps({"run": i + 1, **figures}), flush=True)
    print(json.dumps({"runs": args.runs, "wall_s_min": min(walls),
                      "wall_s_median": statistics.median(walls),
                      "target_wall_s": 10.0 if args.rate == 0 else None,
                      "target_fired_late": 0, "target_early": 0,
                      "target_reached_late": 0 if args.rate == 0 else None,
                      "target_real_sleeps": 0 if args.rate == 0 else None,
                      "target_line_kb": LINE_BOUND // 1024}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
