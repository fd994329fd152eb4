"""What one model call's HTTP costs this process: interplay.model.http.HttpPool against aiohttp.

Sends the model client's request (a small chat-completion JSON POST, JSON reply read whole)
N times at concurrency 1 and 64 to the scripted model kit served from a separate process, on
uvloop (``interplay._aio.run``), through an :class:`interplay.model.http.HttpPool` and through an
``aiohttp.ClientSession`` set up as core/model.py sets it up. Reports this process's CPU ms
per request (``getrusage``, so the server's CPU is not counted) and the aiohttp/HttpPool
ratio. Target: well under 0.1 ms per request for HttpPool.

Run by hand (it prints JSON lines; nothing is asserted):

    .venv/bin/python benchmarks/bench_http_client.py
    .venv/bin/python benchmarks/bench_http_client.py -n 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench_run import Server, cpu_seconds  # the model servers and CPU, as bench_run has them

from interplay import _aio as aio
from interplay.model.http import HttpPool

HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench-not-a-key"}
BODY = json.dumps({"model": "scripted", "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say something short."}], "temperature": 0.0}).encode()


async def drive(call: Callable[[], Awaitable[int]], n: int, concurrency: int) -> dict[str, Any]:
    """``n`` calls, ``concurrency`` at a time; CPU and wall time of the lot."""
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            if await call() != 200:
                raise RuntimeError("the scripted model did not answer 200")

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = cpu_seconds() - cpu0, time.perf_counter() - t0
    return {"cpu_ms_per_request": round(cpu * 1000 / n, 4),
            "requests_per_s": round(n / wall, 1)}


async def bench_pool(url: str, n: int, concurrency: int) -> dict[str, Any]:
    pool = HttpPool(url, max_connections=64)

    async def call() -> int:
        resp = await pool.request("POST", "/chat/completions", headers=HEADERS, body=BODY)
        json.loads(await resp.read())
        return resp.status

    try:
        await drive(call, min(n, 500), concurrency)  # warm-up: connections, caches
        return await drive(call, n, concurrency)
    finally:
        await pool.aclose()


async def bench_aiohttp(url: str, n: int, concurrency: int) -> dict[str, Any]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=64, limit_per_host=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=600.0)
    session = aiohttp.ClientSession(connector=connector, timeout=timeout,
                                    auto_decompress=True, skip_auto_headers=("User-Agent",))
    target = url + "/chat/completions"

    async def call() -> int:
        resp = await session.post(target, data=BODY, headers=HEADERS)
        json.loads(await resp.read())
        resp.release()
        return resp.status

    try:
        await drive(call, min(n, 500), concurrency)
        return await drive(call, n, concurrency)
    finally:
        await session.close()


async def run(args: argparse.Namespace) -> None:
    server = Server(0.0, "scripted")
    try:
        for concurrency in (1, 64):
            best: dict[str, dict[str, Any]] = {}
            for _ in range(args.repeat):
                # Interleaved, best of --repeat: the machine is shared and noisy.
                for name, bench in (("interplay.http", bench_pool), ("aiohttp", bench_aiohttp)):
                    row = await bench(server.base_url, args.n, concurrency)
                    if (name not in best or row["cpu_ms_per_request"]
                            < best[name]["cpu_ms_per_request"]):
                        best[name] = row
            for name, row in best.items():
                print(json.dumps({"client": name, "concurrency": concurrency, "n": args.n,
                                  **row}), flush=True)
            ratio = (best["aiohttp"]["cpu_ms_per_request"]
                     / max(best["interplay.model.http"]["cpu_ms_per_request"], 1e-9))
            print(json.dumps({"concurrency": concurrency,
                              "aiohttp_over_interplay_http_cpu": round(ratio, 2)}), flush=True)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="requests per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    aio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
