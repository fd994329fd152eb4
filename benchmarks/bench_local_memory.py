"""The embedded model server's memory against the calls it has answered.

Starts ``interplay serve-local`` (the real SmolLM2 on llama.cpp) and sends it the calls of
user-sim style episodes: each episode is two conversations (an assistant and a user seat) that
take turns, each call carrying its conversation so far (a system prompt of some 300 tokens,
then the turns), so the server keeps a state per conversation and takes up each one again
after the other seat's call. Calls rotate through the three ways the server generates: plain,
streamed, and with token ids and logprobs (its own generation). After every ``--every`` calls
it prints the server's resident memory (VmRSS), its peak (VmHWM) and the mean time per call.

Also prints what the kept states save: the time of a conversation's next call with the states
kept against the same call on a server that forgot them (the prompt read again from scratch).

Run by hand (it prints figures; nothing is asserted):

    .venv/bin/python benchmarks/bench_local_memory.py                  # 1,000 calls
    .venv/bin/python benchmarks/bench_local_memory.py --calls 200 --every 50

Measure another build by running it with that build's Python (``BEFORE/.venv/bin/python
benchmarks/bench_local_memory.py``): the server started is the one that Python imports.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

SYSTEM = ("You are a patient support agent for a small online shop that sells tea, coffee and "
          "the things to brew them. You answer the customer's questions about orders, "
          "deliveries, refunds and products. Be brief and friendly, ask for the order number "
          "when you need it, and never promise what the shop's policy does not allow. The "
          "policy: refunds within 30 days of delivery for unopened items; opened tea and "
          "coffee are refunded only when they arrived damaged; deliveries take three to five "
          "working days inside the country and ten to fifteen abroad; an order can be changed "
          "until it is packed, which happens on the working day after it is placed. ") * 3
TOPICS = ["a late parcel", "a broken teapot", "a refund for green tea", "a change of address",
          "a coffee grinder that is too loud", "a missing discount", "a gift card",
          "a wrong size of filter papers", "an order placed twice", "beans that taste stale"]


def rss_kb(pid: int) -> tuple[int, int]:
    """The process's VmRSS and VmHWM, in kB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen([sys.executable, "-m", "interplay.cli", "--log-level", "error",
                             "serve-local", "--port", "0"], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip()
    if not url.startswith("http"):
        proc.kill()
        raise SystemExit("the embedded model's server did not start")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/models", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the embedded model's server did not answer /v1/models")


def call(client: httpx.Client, url: str, messages: list[dict[str, Any]], way: str,
         max_tokens: int) -> str:
    body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": max_tokens,
                            "temperature": 0.7, "seed": 1}
    if way == "stream":
        body["stream"] = True
        text = []
        with client.stream("POST", f"{url}/chat/completions", json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    import json

                    for choice in json.loads(line[6:]).get("choices", ()):
                        text.append((choice.get("delta") or {}).get("content") or "")
        return "".join(text)
    if way == "tokens":
        body.update(return_token_ids=True, logprobs=True)
    r = client.post(f"{url}/chat/completions", json=body)
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"] or ""


def conversations(turns: int) -> Any:
    """Calls of episode after episode: (conversation, messages to send), the two seats of an
    episode taking turns, each seat's conversation growing by a turn per call."""
    for episode in itertools.count():
        topic = TOPICS[episode % len(TOPICS)]
        seats = {
            "assistant": [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": f"Hello, I am writing about {topic} "
                                                      f"(case {episode})."}],
            "user": [{"role": "system", "content": f"You are a customer of a tea shop, "
                                                   f"writing about {topic} (case {episode}). "
                                                   "Answer the agent in one or two lines."},
                     {"role": "user", "content": "Hello, how can I help you today?"}],
        }
        for _turn in range(turns):
            for seat in ("assistant", "user"):
                yield seat, seats


def run(calls: int, every: int, turns: int, max_tokens: int) -> None:
    proc, url = start_server()
    ways = itertools.cycle(["plain", "stream", "tokens"])
    try:
        with httpx.Client(timeout=300) as client:
            rss0, _ = rss_kb(proc.pid)
            print(f"server pid {proc.pid}; RSS after start {rss0 / 1024:.0f} MB")
            print(f"{'calls':>6} {'RSS MB':>8} {'peak MB':>8} {'s/call':>7}")
            stream = conversations(turns)
            t0 = time.monotonic()
            first: int | None = None
            for n in range(1, calls + 1):
                seat, seats = next(stream)
                reply = call(client, url, seats[seat], next(ways), max_tokens) or "..."
                other = "user" if seat == "assistant" else "assistant"
                seats[seat].append({"role": "assistant", "content": reply})
                seats[other].append({"role": "user", "content": reply})
                if n % every == 0:
                    rss, peak = rss_kb(proc.pid)
                    first = rss if first is None else first
                    print(f"{n:>6} {rss / 1024:>8.0f} {peak / 1024:>8.0f} "
                          f"{(time.monotonic() - t0) / every:>7.2f}", flush=True)
                    t0 = time.monotonic()
            if first is not None:
                print(f"RSS growth from call {every} to call {calls}: "
                      f"{(rss - first) / 1024:+.0f} MB")
            saved(client, url, max_tokens)
    finally:
        proc.terminate()
        proc.wait(10)


def saved(client: httpx.Client, url: str, max_tokens: int) -> None:
    """A conversation's next call with its state kept, against the same call read afresh."""
    base = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello."}]
    kept, fresh = [], []
    for i in range(5):
        a = [*base, {"role": "assistant", "content": f"Hello! Case {i}, how can I help?"}]
        b = [{"role": "system", "content": f"Another conversation, number {i}, in between."},
             {"role": "user", "content": "Hi."}]
        reply = call(client, url, a, "plain", max_tokens)
        call(client, url, b, "plain", max_tokens)  # the other seat's turn
        nxt = [*a, {"role": "assistant", "content": reply or "..."},
               {"role": "user", "content": "My order has not arrived."}]
        t = time.monotonic()
        call(client, url, nxt, "plain", 1)
        kept.append(time.monotonic() - t)
        # The same prompt with a different first token: nothing kept matches it.
        other = [{"role": "system", "content": "x" + SYSTEM}, *nxt[1:]]
        t = time.monotonic()
        call(client, url, other, "plain", 1)
        fresh.append(time.monotonic() - t)
    k, f = sorted(kept)[2], sorted(fresh)[2]
    print(f"next call of a conversation (1 token), median of 5: {k * 1000:.0f} ms with its "
          f"state kept, {f * 1000:.0f} ms read afresh ({f / k:.1f}x)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--turns", type=int, default=3, help="turns of each seat per episode")
    p.add_argument("--max-tokens", type=int, default=48)
    args = p.parse_args()
    run(args.calls, args.every, args.turns, args.max_tokens)


if __name__ == "__main__":
    main()
