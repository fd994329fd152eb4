"""A trace's single call while another trace holds N requests, through the interception server
to a scripted model whose answers to the holding trace never come (a pool of -c 1 x 2 seats:
two connections). Prints B's wait and the ratio to an idle server's.

    .venv/bin/python benchmarks/bench_fair_share.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

import attrs
import httpx

from interplay.interception import InterceptionServer
from interplay.model.client import ModelClient
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest


def _reply(request: ScriptedRequest) -> ScriptedReply:
    text = request.last_user_text()
    return ScriptedReply.hang() if text.startswith("A") else ScriptedReply.text(text)


async def one(held: int, rounds: int = 5) -> float:
    async with ScriptedModel(_reply) as m:
        client = ModelClient(attrs.evolve(m.endpoint, timeout_s=300.0,
                                          first_byte_timeout_s=300.0), max_connections=2)
        async with InterceptionServer() as server, httpx.AsyncClient(
                timeout=300, limits=httpx.Limits(max_connections=held + 8)) as http:
            a = server.open_trace(client=client, on_call=lambda c: None)
            b = server.open_trace(client=client, on_call=lambda c: None)

            async def ask(route: object, text: str) -> None:
                await http.post(f"{route.base_url}/chat/completions", json={  # type: ignore[attr-defined]
                    "model": "m", "messages": [{"role": "user", "content": text}]},
                    headers={"authorization": f"Bearer {route.secret}"})  # type: ignore[attr-defined]

            tasks = [asyncio.create_task(ask(a, f"A{i}")) for i in range(held)]
            for _ in range(1000 if held else 0):  # until A's first call is upstream
                if m.received:
                    break
                await asyncio.sleep(0.01)
            waits = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                await ask(b, "B")
                waits.append(time.perf_counter() - t0)
            server.close_trace(a.secret)
            await asyncio.gather(*tasks, return_exceptions=True)
        await client.aclose()
    return statistics.median(waits)


async def main() -> None:
    idle = await one(0)
    print(f"idle: B's call {idle * 1000:.1f} ms")
    for held in (20, 60):
        wait = await one(held)
        print(f"A holding {held}: B's call {wait * 1000:.1f} ms ({wait / idle:.2f}x idle)")


if __name__ == "__main__":
    asyncio.run(main())
