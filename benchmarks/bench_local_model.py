"""The embedded model on this machine: time to first token and tokens per second, and what
token capture costs (the server samples such requests itself, with each token's logprob).

Run by hand: ``.venv/bin/python benchmarks/bench_local_model.py [--runs N] [--threads T]``.
Starts ``interplay serve-local`` through LocalModel (on ``T`` llama.cpp threads:
``INTERPLAY_LOCAL_THREADS``; default the server's own) and streams completions through the
ModelClient.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import urllib.request

from interplay.model.client import ModelClient
from interplay.model.local import THREADS_VAR, LocalModel, usable_cores
from interplay.model.wire import assistant_message

PROMPTS = ["Write three sentences about the sea.",
           "Explain what a hash table is, briefly.",
           "List five fruits and one fact about each."]


def server_threads(base_url: str) -> int:
    """The threads llama.cpp runs with, as the server reports them."""
    with urllib.request.urlopen(f"{base_url}/models", timeout=30) as r:
        return int(json.loads(r.read())["data"][0]["meta"]["n_threads"])


async def run(runs: int, max_tokens: int) -> None:
    t0 = time.perf_counter()
    async with LocalModel() as local:
        start_s = time.perf_counter() - t0
        threads = await asyncio.to_thread(server_threads, str(local.base_url))
        print(f"server start (load + /v1/models answers): {start_s:.2f} s  "
              f"[{os.cpu_count()} CPUs, {usable_cores()} usable, {threads} llama.cpp threads, "
              f"load {os.getloadavg()[0]:.1f}]")
        client = ModelClient(local.endpoint)
        await client.chat([{"role": "user", "content": "hi"}], max_tokens=4)  # warm up
        ttft, tps, plain, captured = [], [], [], []
        for i in range(runs):
            msgs = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
            call = await client.chat(msgs, stream=True, max_tokens=max_tokens, temperature=0)
            assert call.error_type is None, call.error
            n = call.usage.completion_tokens
            gen_s = call.latency_s - (call.first_token_s or 0)
            ttft.append(call.first_token_s or 0)
            tps.append((n - 1) / gen_s if gen_s > 0 and n > 1 else 0)
            t1 = time.perf_counter()
            call = await client.chat(msgs, max_tokens=max_tokens, temperature=0)
            plain.append(call.usage.completion_tokens / (time.perf_counter() - t1))
            assert assistant_message(call) is not None
            t1 = time.perf_counter()
            call = await client.chat(msgs, max_tokens=max_tokens, temperature=0, capture=True)
            assert call.tokens is not None and call.tokens.missing == [], call.tokens
            captured.append(call.usage.completion_tokens / (time.perf_counter() - t1))
        await client.aclose()
    print(f"streamed, {runs} runs, max_tokens={max_tokens}:")
    print(f"  time to first token: p50 {statistics.median(ttft) * 1e3:.0f} ms, "
          f"max {max(ttft) * 1e3:.0f} ms")
    print(f"  decode speed: p50 {statistics.median(tps):.1f} tokens/s")
    print(f"not streamed: p50 {statistics.median(plain):.1f} tokens/s end to end "
          f"(prompt processing included)")
    print(f"not streamed, token capture: p50 {statistics.median(captured):.1f} tokens/s "
          f"({statistics.median(captured) / statistics.median(plain):.2f} of the above)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None,
                        help="llama.cpp's threads (default: the server's)")
    args = parser.parse_args()
    if args.threads is not None:
        os.environ[THREADS_VAR] = str(args.threads)
    asyncio.run(run(args.runs, args.max_tokens))


if __name__ == "__main__":
    main()
