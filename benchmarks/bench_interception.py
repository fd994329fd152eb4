"""What the interception server adds to a model call, and what the client transport costs.

Run by hand: ``.venv/bin/python benchmarks/bench_interception.py [--quick]``.

The scripted model and the interception server each run in their own process, so the load
generator (aiohttp, in this process) does not share a core's event loop with either. For 1, 64
and 256 concurrent streamed Chat Completions it prints p50/p99 latency straight to the scripted
model and through the interception server, the added latency, the throughput ratio, and the
interception process's CPU per request. Then the ModelClient's own CPU per request through
each transport (``Endpoint.transport``: aiohttp, and the openai SDK's client over httpx2).

``--dialects``: instead, the interception process's CPU per request on each of its routes, the
same conversation (a system prompt, two turns, a tool call and its result, a tool offered) in
each API: Chat Completions, Responses and Anthropic Messages (both translated to Chat
Completions for the scripted model), streamed and not, one at a time and 64 at once, with each
route's ratio to Chat Completions. With ``--instructions``, the same ratios in instructions per
request, counted by valgrind's callgrind in the interception process while it answers (a
figure the machine's load does not move; the process runs under valgrind, so slowly).

``--bodies MB [MB ...]``: instead, how long large request bodies stall the server for others:
one client posts a body of each size three times while another asks ``GET /v1/models`` every
5 ms; it prints the worst latency the prober saw (and the status the bodies got).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

BODY = {"model": "m", "stream": True,
        "messages": [{"role": "user", "content": "a short question of seven words"}]}

#: One conversation in each API the interception server speaks: a system prompt, the user's
#: question, the model's tool call and its result, the user's next question, one tool offered.
_SYSTEM = "You are the help desk of a library. Answer briefly and look things up."
_TOOL = {"name": "lookup", "description": "Look a title up in the catalogue.",
         "parameters": {"type": "object", "properties": {"title": {"type": "string"}},
                        "required": ["title"]}}
DIALECTS: dict[str, tuple[str, dict[str, Any], bytes]] = {
    "chat.completions": ("/chat/completions", {"model": "m", "messages": [
        {"role": "system", "content": _SYSTEM},
        {"role": "user", "content": "Do you have Middlemarch?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"title": "Middlemarch"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "2 copies, shelf F-12"},
        {"role": "user", "content": "And when do you open on Saturday?"}],
        "tools": [{"type": "function", "function": _TOOL}]}, b"[DONE]\n\n"),
    "responses": ("/responses", {"model": "m", "instructions": _SYSTEM, "input": [
        {"type": "message", "role": "user", "content": "Do you have Middlemarch?"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup",
         "arguments": '{"title": "Middlemarch"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "2 copies, shelf F-12"},
        {"type": "message", "role": "user", "content": "And when do you open on Saturday?"}],
        "tools": [{"type": "function", **_TOOL}]}, b"response.completed"),
    "messages": ("/messages", {"model": "m", "max_tokens": 1024, "system": [
        {"type": "text", "text": _SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Do you have Middlemarch?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1",
                                               "name": "lookup",
                                               "input": {"title": "Middlemarch"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1",
                 "content": "2 copies, shelf F-12"},
                {"type": "text", "text": "And when do you open on Saturday?"}]}],
        "tools": [{"name": _TOOL["name"], "description": _TOOL["description"],
                   "input_schema": _TOOL["parameters"]}]}, b"message_stop"),
}


def spawn(args: list[str], program: str = sys.executable
          ) -> tuple[subprocess.Popen[bytes], list[str]]:
    proc = subprocess.Popen([program, *args], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL if program != sys.executable else None)
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
               pid: int | None = None, body: dict[str, Any] | None = None,
               end: bytes = b"[DONE]\n\n") -> tuple[list[float], float, float]:
    """Latencies, wall time, and the CPU seconds process ``pid`` used during the timed part;
    each request posts ``body`` (default :data:`BODY`) and its answer ends with ``end``."""
    payload = json.dumps(BODY if body is None else body).encode()
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
                    answer = await r.read()
                    assert r.status == 200 and end in answer[-300:], answer[:200]
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
    from interplay.config.endpoint import Endpoint
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
    parser.add_argument("--dialects", action="store_true",
                        help="the interception process's CPU per request on each route instead")
    parser.add_argument("--instructions", action="store_true",
                        help="with --dialects: count instructions per request with callgrind")
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
    if args.dialects:
        if args.instructions:
            dialect_instructions(scale)
        else:
            dialects(scale)
        return
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


def dialects(scale: float) -> None:
    """The interception process's CPU per request on each route, ratio to Chat Completions."""
    import uvloop

    model, (model_url,) = spawn(["-c", "from interplay.testing.scripted import main; main()"])
    proxy, (proxy_url, secret) = spawn([__file__, "--serve-proxy", model_url])
    try:
        print(f"{'route':>17} {'stream':>7} {'streams':>8} {'CPU/req':>9} {'vs chat':>8} "
              f"{'p50':>8}")
        for stream in (True, False):
            for conc in (1, 64):
                n = max(conc * 8, int((1500 if conc == 1 else 4000) * scale))
                base = None
                for name, (path, body, end) in DIALECTS.items():
                    sent = {**body, "stream": stream}
                    lat, _, used = uvloop.run(load(proxy_url + path, secret, conc, n, proxy.pid,
                                                   sent, end if stream else b"}"))
                    per = used / n * 1000
                    base = per if base is None else base
                    print(f"{name:>17} {stream!s:>7} {conc:>8} {per:>7.3f}ms "
                          f"{per / base:>7.2f}x {pct(lat, .5) * 1e3:>6.2f}ms")
    finally:
        for p in (proxy, model):
            p.terminate()
            p.wait(5)


def dialect_instructions(scale: float) -> None:
    """Instructions per request of the interception process on each route (callgrind, counted
    only while the timed requests are answered), ratio to Chat Completions."""
    import tempfile

    import uvloop

    out = Path(tempfile.mkdtemp(prefix="interplay-bench-dialects-"))
    model, (model_url,) = spawn(["-c", "from interplay.testing.scripted import main; main()"])
    proxy, (proxy_url, secret) = spawn(
        ["--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}/cg.out",
         sys.executable, __file__, "--serve-proxy", model_url], program="valgrind")
    n = max(20, int(200 * scale))

    def control(*flags: str) -> None:
        subprocess.run(["callgrind_control", *flags, str(proxy.pid)], check=True,
                       capture_output=True)

    try:
        print(f"{'route':>17} {'stream':>7} {'instructions/req':>17} {'vs chat':>8}")
        for stream in (True, False):
            base = None
            for name, (path, body, end) in DIALECTS.items():
                sent = {**body, "stream": stream}
                marker = end if stream else b"}"
                uvloop.run(load(proxy_url + path, secret, 1, 10, None, sent, marker))  # warm up
                before = set(out.iterdir())
                control("-z")
                control("-i", "on")
                uvloop.run(load(proxy_url + path, secret, 1, n, None, sent, marker))
                control("-d")
                control("-i", "off")
                (dump,) = set(out.iterdir()) - before
                totals = re.search(rb"^(?:totals|summary): (\d+)", dump.read_bytes(), re.M)
                assert totals is not None, dump
                # The load's warm-up requests (load() sends some before timing) count too.
                per = int(totals.group(1)) / (n + min(n, 4 + 50))
                base = per if base is None else base
                print(f"{name:>17} {stream!s:>7} {per:>17,.0f} {per / base:>7.2f}x")
    finally:
        for p in (proxy, model):
            p.terminate()
            p.wait(30)


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

    from interplay.config.endpoint import Endpoint
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
