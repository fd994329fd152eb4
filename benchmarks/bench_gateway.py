"""What a tool call costs through the tool gateway (MCP), beside the same call in-process.

Run by hand: ``.venv/bin/python benchmarks/bench_gateway.py [--quick]``.

The gateway runs in a process of its own (as in a run: the run process's event loop, uvloop),
serving one trace's tools: ``user-sim-tools``' shop (``find_order``, a sync tool run in a worker
thread, as every ``@tool`` function is) and ``get_time`` of an always_on world (async). The load
comes from this process, as plain JSON-RPC over aiohttp (a client as cheap as codex's), one
call at a time (latency p50/p99) and from 16 at once, and the gateway process's CPU per call is
read from ``/proc``. Then the same call through the ``mcp`` SDK's Python client (what an agent
program written in Python uses): its latency and the client's own CPU. Last, the call
in-process, as the ``chat`` harness's tool loop makes it (``SegmentContext.call_tool``): CPU per
call. Target: under 2 ms of the gateway's CPU per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

import aiohttp

CALLS = {
    "find_order": {"order_id": "1042"},
    "get_time": {},
}


def spawn() -> tuple[subprocess.Popen[bytes], str, str]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    first = proc.stdout.readline().decode().split()
    if len(first) != 2:
        proc.kill()
        raise SystemExit("could not start the gateway")
    return proc, first[0], first[1]


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def session_tools() -> tuple[Any, Any]:
    """A chat session of an agent whose seat has the shop's tools and an always_on world's
    ``get_time``; its SegmentContext (and what to close)."""
    import random

    from interplay import Task
    from interplay.builtin_envs.shop import shop_tools
    from interplay.builtin_harnesses.chat import NullHarness
    from interplay.config.endpoint import Endpoint
    from interplay.model.client import Models
    from interplay.run import Agent
    from interplay.values import Clock
    from interplay.world.world import World

    world = World(clock=Clock(1_748_844_000.0, rate=0.0), timezone="Europe/Berlin",
                  start=1_748_844_000.0, rng=random.Random(0))
    orders = {"orders": {"1042": {"status": "pending", "items": ["lamp"], "address": "x"}}}
    tools = [*shop_tools(orders), *(t for t in world.tools_for("assistant")
                                    if t.name == "get_time")]
    models = Models()
    agent = Agent(name="assistant", harness=NullHarness(), tools=tools,
                  client=models.client(Endpoint(base_url="http://127.0.0.1:9/v1", model="m")))
    session = agent.chat(Task(idx=0, prompt="x"))
    return session, (agent, models)


def serve() -> None:
    import uvloop

    async def run() -> None:
        session, _ = await session_tools()
        route = await session.ctx.tool_route()
        print(route.url, route.token, flush=True)
        await asyncio.Event().wait()  # served until the benchmark ends this process

    uvloop.run(run())


async def raw_load(url: str, token: str, tool: str, concurrency: int, total: int,
                   pid: int) -> tuple[list[float], float, float]:
    """Latencies, wall time and the gateway's CPU seconds for ``total`` calls of ``tool``."""
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json",
               "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2025-06-18"}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": CALLS[tool]}}).encode()
    lat: list[float] = []
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as http:
        left = [0]

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                t0 = time.perf_counter()
                async with http.post(url, data=body, headers=headers) as r:
                    answer = await r.json()
                assert r.status == 200 and answer["result"]["isError"] is False, answer
                lat.append(time.perf_counter() - t0)

        left[0] = min(total, 200)  # warm up connections and code paths
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        lat.clear()
        left[0] = total
        c0 = cpu_s(pid)
        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        wall = time.perf_counter() - t0
        used = cpu_s(pid) - c0
    return lat, wall, used


async def sdk_client(url: str, token: str, tool: str, total: int,
                     pid: int) -> tuple[list[float], float, float]:
    """The mcp SDK's client, one call at a time: latencies, its own CPU and the gateway's,
    per call (seconds)."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    lat: list[float] = []
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
                streamable_http_client(url, http_client=http) as (read, write, *_),
                ClientSession(read, write) as s):
        await s.initialize()
        for _ in range(50):
            await s.call_tool(tool, CALLS[tool])
        c0, g0 = time.process_time(), cpu_s(pid)
        for _ in range(total):
            t0 = time.perf_counter()
            result = await s.call_tool(tool, CALLS[tool])
            lat.append(time.perf_counter() - t0)
            assert not result.is_error
        own, gateway = time.process_time() - c0, cpu_s(pid) - g0
    return lat, own / total, gateway / total


async def in_process(tool: str, total: int) -> float:
    """CPU seconds per call through SegmentContext.call_tool (the chat harness's path)."""
    session, (_, models) = await session_tools()
    ctx = session.ctx
    arguments = json.dumps(CALLS[tool])
    by_name = {t.name: t for t in ctx.tools}
    for i in range(200):
        await ctx.call_tool(tool, arguments, call_id=f"w{i}", tools=by_name, timeout_s=30)
    c0 = time.process_time()
    for i in range(total):
        outcome = await ctx.call_tool(tool, arguments, call_id=f"c{i}", tools=by_name,
                                      timeout_s=30)
        assert outcome.error_type is None
    used = time.process_time() - c0
    await session.close()
    await models.aclose()
    return used / total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    import uvloop

    n = 500 if args.quick else 3000
    proc, url, token = spawn()
    try:
        print(f"{'tool':>11} {'way':>22} {'p50':>8} {'p99':>8} {'calls/s':>8} "
              f"{'gateway CPU/call':>17}")
        for tool in CALLS:
            for conc in (1, 16):
                lat, wall, used = uvloop.run(raw_load(url, token, tool, conc, n, proc.pid))
                print(f"{tool:>11} {f'JSON-RPC, {conc} at once':>22} "
                      f"{pct(lat, .5) * 1e3:>6.2f}ms {pct(lat, .99) * 1e3:>6.2f}ms "
                      f"{n / wall:>8.0f} {used / n * 1e3:>15.3f}ms")
        print()
        local = {tool: uvloop.run(in_process(tool, n)) for tool in CALLS}
        for tool in CALLS:
            lat, own, gateway = uvloop.run(sdk_client(url, token, tool, max(200, n // 5),
                                                      proc.pid))
            print(f"{tool}: mcp SDK client, one at a time: p50 {pct(lat, .5) * 1e3:.2f} ms, "
                  f"p99 {pct(lat, .99) * 1e3:.2f} ms; the client's CPU {own * 1e3:.3f} ms, "
                  f"the gateway's {gateway * 1e3:.3f} ms per call")
            print(f"{tool}: in-process (SegmentContext.call_tool): {local[tool] * 1e3:.3f} ms "
                  f"CPU per call; the gateway's CPU is {gateway / local[tool]:.1f}x that")
    finally:
        proc.terminate()
        proc.wait(5)


if __name__ == "__main__":
    main()
