"""interplay's listeners (the shared ASGI plumbing of ``interplay._plumbing.listener``) under a
descriptor limit and a client that hoards connections, and what the plumbing costs per request.

Run by hand: ``.venv/bin/python benchmarks/bench_listener.py [--hostile N] [--good N]``.

The interception server runs in a process of its own with ``RLIMIT_NOFILE`` at 1024 (soft and
hard, as ``ulimit -n 1024`` sets them), forwarding to the scripted model in this process.
Another process holds ``--hostile`` connections to it, each sending the start of a request
and never the rest, each opened again the moment the server closes it. This process then
sends ``--good`` requests, each on a connection of its own and then on one kept-alive
connection, and prints how many were answered, their latency (p50, p99, max) against the same
requests with no hostile client, and how many connections the server shed.

``--instructions``: instead, instructions per request (kept-alive connections) and per
connection (one request each) of an AsgiServer serving a trivial app, counted by valgrind's
callgrind in the server process (two runs of different lengths, solved for the difference).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# The server under a descriptor limit and the hostile client are the ones the test of this
# case runs (tests/test_listeners.py), so the figures are of what the test checks.
sys.path.insert(0, str(HERE.parent / "tests"))
from test_listeners import HOSTILE, PRESSED_SERVER  # noqa: E402


async def good_requests(base_url: str, secret: str, n: int, *, fresh: bool) -> list[float]:
    """Latencies (s) of ``n`` answered requests, NaN for one that failed."""
    import httpx

    body = {"model": "scripted", "messages": [{"role": "user", "content": "hello"}]}
    headers = {"authorization": f"Bearer {secret}"}
    out: list[float] = []
    kept = httpx.AsyncClient(timeout=30)
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                if fresh:
                    async with httpx.AsyncClient(timeout=30) as http:
                        r = await http.post(base_url + "/chat/completions", json=body,
                                            headers=headers)
                else:
                    r = await kept.post(base_url + "/chat/completions", json=body,
                                        headers=headers)
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            out.append(time.perf_counter() - t0 if ok else float("nan"))
    finally:
        await kept.aclose()
    return out


def describe(latencies: list[float]) -> str:
    answered = sorted(x for x in latencies if x == x)
    if not answered:
        return f"0 of {len(latencies)} answered"
    q = (statistics.quantiles(answered, n=100, method="inclusive") if len(answered) > 1
         else answered * 99)
    return (f"{len(answered)} of {len(latencies)} answered; p50 {q[49] * 1e3:.1f} ms, "
            f"p99 {q[98] * 1e3:.1f} ms, max {answered[-1] * 1e3:.1f} ms")


async def hostile_run(hostile: int, good: int) -> None:
    from interplay.testing import ScriptedModel

    async with ScriptedModel() as model:
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-c", PRESSED_SERVER, model.base_url, "uvloop",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert server.stdout is not None and server.stdin is not None
        route = json.loads(await server.stdout.readline())
        port = route["base_url"].split(":")[2].split("/")[0]
        for fresh in (True, False):
            quiet = await good_requests(route["base_url"], route["secret"], good, fresh=fresh)
            print(f"no hostile client, {'fresh connections' if fresh else 'kept alive'}: "
                  f"{describe(quiet)}")
        attacker = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HOSTILE, port, str(hostile), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE)
        assert attacker.stdout is not None and attacker.stdin is not None
        await attacker.stdout.readline()
        for fresh in (True, False):
            pressed = await good_requests(route["base_url"], route["secret"], good, fresh=fresh)
            print(f"{hostile} half-sent connections held, "
                  f"{'fresh connections' if fresh else 'kept alive'}: {describe(pressed)}")
        attacker.stdin.close()
        opened = int((await attacker.stdout.readline()) or 0)
        await attacker.wait()
        server.stdin.close()
        shed = json.loads((await server.stdout.read()).decode().splitlines()[-1])["shed"]
        await server.wait()
        print(f"the hostile client opened {opened} connections; the server shed {shed}")


# -- instructions ---------------------------------------------------------------------------------


def serve_trivial() -> None:
    from interplay._plumbing import aio as _aio
    from interplay._plumbing import asgi
    from interplay._plumbing.listener import AsgiServer

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asgi.read_body(receive, 1 << 20)
        await asgi.send_json(send, 200, {"ok": 1})

    async def main() -> None:
        srv = AsgiServer(app)
        await srv.start()
        print(srv.port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await srv.stop()

    _aio.run(main())


REQUEST = (b"POST /v1/x HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: 2\r\n\r\n{}")


def drive(port: int, requests: int, fresh: bool) -> None:
    if fresh:
        closing = REQUEST.replace(b"host: x", b"host: x\r\nconnection: close")
        for _ in range(requests):
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(closing)
                while s.recv(65536):
                    pass
        return
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    for _ in range(requests // len(socks)):
        for s in socks:
            s.sendall(REQUEST)
        for s in socks:
            got = b""
            while not got.endswith(b'{"ok":1}'):
                got += s.recv(65536)
    for s in socks:
        s.close()


def counted(requests: int, fresh: bool) -> int:
    out = tempfile.mktemp(prefix="interplay-bench-listener-")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
         __file__, "--serve-trivial"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
    port = int(proc.stdout.readline())
    drive(port, requests, fresh)
    proc.stdin.close()
    proc.wait()
    found = re.search(r"Collected : (\d+)", proc.stderr.read())
    if os.path.exists(out):
        os.unlink(out)
    assert found, "valgrind printed no count"
    return int(found.group(1))


def instructions() -> None:
    for fresh, (a, b), unit in ((False, (400, 2000), "request, kept alive"),
                                (True, (200, 1000), "connection (one request each)")):
        per = (counted(b, fresh) - counted(a, fresh)) / (b - a)
        print(f"instructions per {unit}: {per / 1e3:.1f}K")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hostile", type=int, default=1100)
    parser.add_argument("--good", type=int, default=200)
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--serve-trivial", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_trivial:
        serve_trivial()
    elif args.instructions:
        instructions()
    else:
        asyncio.run(hostile_run(args.hostile, args.good))


if __name__ == "__main__":
    main()
