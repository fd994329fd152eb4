"""What the interception server adds to a model call, and what the client transport costs.

Run by hand: ``.venv/bin/python benchmarks/bench_interception.py [--quick]``.

The scripted model and the interception server each run in their own process, so the load
generator (aiohttp, in this process) does not share a core's event loop with either. For 1, 64
and 256 concurrent streamed Chat Completions it prints p50/p99 latency straight to the scripted
model and through the interception server, the added latency, the throughput ratio, and the
interception process's CPU per request. Then the ModelClient's own CPU per request through
each transport (``Endpoint.transport``: aiohttp, and the openai SDK's client over httpx2).

``--bodies MB [MB ...]``: instead, how long large request bodies stall the server for others:
one client posts a body of each size three times while another asks ``GET /v1/models`` every
5 ms; it prints the worst latency the prober saw (and the status the bodies got).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp

BODY = {"model": "m", "stream": True,
        "messages": [{"role": "user", "content": "a short question of seven words"}]}


def spawn(args: list[str]) -> tuple[subprocess.Popen[bytes], list[str]]:
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    first = proc.stdout.readline().decode().split()
    if not first:
        proc.kill()
        raise SystemExit(f"could not start {args}")
    return proc, first


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(url: str, key: str, concurrency: int, total: int,
               pid: int | None = None) -> tuple[list[float], float, float]:
    """Latencies, wall time, and the CPU seconds process ``pid`` used during the timed part."""
    payload = json.dumps(BODY).encode()
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    lat: list[float] = []
    conn = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:
        remaining = [total]

        async def worker() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                t0 = time.perf_counter()
                async with session.post(url, data=payload, headers=headers) as r:
                    body = await r.read()
                    assert r.status == 200 and body.endswith(b"[DONE]\n\n"), body[:200]
                lat.append(time.perf_counter() - t0)

        remaining[0] = min(total, 4 * concurrency + 50)  # warm up connections and code paths
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        lat.clear()
        remaining[0] = total
        c0 = cpu_s(pid) if pid else 0.0
        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        wall = time.perf_counter() - t0
        used = (cpu_s(pid) - c0) if pid else 0.0
    return lat, wall, used


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def client_cpu(url: str, transport: str, concurrency: int, total: int) -> float:
    from interplay.endpoint import Endpoint
    from interplay.model.client import ModelClient

    client = ModelClient(Endpoint(base_url=url, model="m", transport=transport),  # type: ignore[arg-type]
                         max_connections=concurrency)
    msgs = BODY["messages"]
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            call = await client.chat(msgs, stream=True)
            assert call.error_type is None, call.error

    await asyncio.gather(*[one() for _ in range(min(total, 64))])  # warm up
    c0 = time.process_time()
    await asyncio.gather(*[one() for _ in range(total)])
    used = time.process_time() - c0
    await client.aclose()
    return used / total * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--bodies", nargs="+", type=float, metavar="MB",
                        help="measure the stall large bodies cause instead")
    parser.add_argument("--serve-proxy", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_proxy:
        serve_proxy(args.serve_proxy)
        return
    import uvloop

    if args.bodies:
        uvloop.run(stalls(args.bodies))
        return

    scale = 0.25 if args.quick else 1.0
    model, (model_url,) = spawn(["-c", "from interplay.testing.scripted import main; main()"])
    proxy, (proxy_url, secret) = spawn([__file__, "--serve-proxy", model_url])
    try:
        print(f"{'streams':>8} {'direct p50':>11} {'p99':>8} {'proxy p50':>10} {'p99':>8} "
              f"{'added p50':>10} {'p99':>8} {'thru ratio':>10} {'proxy CPU/req':>14}")
        for conc, n in ((1, 1000), (64, 4000), (256, 4000)):
            n = max(conc * 4, int(n * scale))
            d_lat, d_wall, _ = uvloop.run(load(model_url + "/chat/completions", "x", conc, n))
            p_lat, p_wall, used = uvloop.run(load(proxy_url + "/chat/completions", secret, conc,
                                                  n, proxy.pid))
            proxy_cpu = used / n * 1000
            d50, d99, p50, p99 = (pct(d_lat, .5), pct(d_lat, .99), pct(p_lat, .5),
                                  pct(p_lat, .99))
            ratio = (n / p_wall) / (n / d_wall)
            print(f"{conc:>8} {d50 * 1e3:>9.2f}ms {d99 * 1e3:>6.2f}ms {p50 * 1e3:>8.2f}ms "
                  f"{p99 * 1e3:>6.2f}ms {(p50 - d50) * 1e3:>8.2f}ms {(p99 - d99) * 1e3:>6.2f}ms"
                  f" {ratio:>10.2f} {proxy_cpu:>12.3f}ms")
        print(f"  (direct throughput at 256 streams: {n / d_wall:.0f} req/s; "
              f"mean direct latency {statistics.mean(d_lat) * 1e3:.2f} ms)")
        print("\nModelClient CPU per streamed call (client process only, ms):")
        for conc in (1, 64):
            n = max(200, int(2000 * scale))
            a = uvloop.run(client_cpu(model_url, "aiohttp", conc, n))
            o = uvloop.run(client_cpu(model_url, "openai", conc, n))
            print(f"  {conc:>3} at once: aiohttp {a:.3f} ms   openai {o:.3f} ms   "
                  f"(openai/aiohttp {o / a:.1f}x)")
    finally:
        for p in (proxy, model):
            p.terminate()
            p.wait(5)


def large_body(mb: float) -> bytes:
    """A Chat Completions body of about ``mb`` MB, shaped like an agent's long history."""
    output = "line of tool output with some text in it\n" * 40
    messages: list[dict[str, Any]] = []
    size = 0
    while size < mb * (1 << 20):
        messages += [{"role": "tool", "tool_call_id": f"c{len(messages)}", "content": output},
                     {"role": "user", "content": "do the thing"}]
        size += len(output) + 80
    return json.dumps({"model": "m", "messages": messages}).encode()


async def stalls(sizes: list[float]) -> None:
    model, (model_url,) = spawn(["-c", "from interplay.testing.scripted import main; main()"])
    proxy, (proxy_url, secret) = spawn([__file__, "--serve-proxy", model_url])
    headers = {"authorization": f"Bearer {secret}", "content-type": "application/json"}
    try:
        async with aiohttp.ClientSession() as session:
            for mb in sizes:
                await stall(session, proxy_url, headers, large_body(mb))
    finally:
        for p in (proxy, model):
            p.terminate()
            p.wait(5)


async def stall(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                raw: bytes) -> None:
    lat: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            async with session.get(url + "/models", headers=headers) as r:
                await r.read()
            lat.append(time.perf_counter() - t0)
            await asyncio.sleep(0.005)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.3)
    idle = max(lat)
    statuses = []
    for _ in range(3):
        async with session.post(url + "/chat/completions", data=raw, headers=headers) as r:
            await r.read()
            statuses.append(r.status)
    done.set()
    await prober
    print(f"{len(raw) / 1e6:6.1f} MB: status {statuses[0]}, worst probe "
          f"{max(lat) * 1e3:.0f} ms (idle {idle * 1e3:.0f} ms)")


def serve_proxy(upstream: str) -> None:
    import uvloop

    from interplay.endpoint import Endpoint
    from interplay.interception import InterceptionServer
    from interplay.model.client import ModelClient

    async def run() -> None:
        calls: list[Any] = []
        client = ModelClient(Endpoint(base_url=upstream, model="m"), max_connections=512)
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=client, on_call=lambda c: calls.append(c.id))
            print(route.base_url, route.secret, flush=True)
            await asyncio.Event().wait()

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    uvloop.run(run())


if __name__ == "__main__":
    main()
