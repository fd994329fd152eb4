"""The embedded model's kept states on long prompts: two seats that take turns, each with a
system prompt of some thousands of tokens (a benchmark's policy), as tau2-bench's agent and
user are. Prints each call's time and what the server keeps, with the two latest states kept
whatever their size (``KEPT_LATEST``, the server's) against the capacity alone (0).

Run by hand (it prints figures; nothing is asserted):

    .venv/bin/python benchmarks/bench_local_states.py               # 11,000 characters, 2 turns
    .venv/bin/python benchmarks/bench_local_states.py --chars 20000 --turns 3

In process, on the real model (``StateLlama`` and ``StateCache`` as ``interplay serve-local``
makes them, one llama.cpp thread), greedy and 8 tokens a reply, so both settings answer alike.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import interplay.model.local_states as states
from interplay.model.local import N_CTX, model_path

TEXT = (Path(__file__).resolve().parent.parent / "docs" / "always_on.md").read_text()


def run(kept_latest: int, chars: int, turns: int) -> list[tuple[int, str, int, float, int]]:
    llm = states.StateLlama(model_path=str(model_path()), n_ctx=N_CTX, n_threads=1,
                            n_threads_batch=1, verbose=False)
    llm.set_cache(states.StateCache(kept_latest=kept_latest))
    conversations: dict[str, list[dict[str, Any]]] = {
        seat: [{"role": "system", "content": f"You are the {seat}. " + TEXT[:chars]},
               {"role": "user", "content": "Hello, who are you?"}]
        for seat in ("agent", "user")}
    rows = []
    for turn in range(turns):
        for seat, messages in conversations.items():
            t0 = time.perf_counter()
            answer: Any = llm.create_chat_completion(messages=messages, max_tokens=8, seed=1,
                                                     temperature=0)
            took = time.perf_counter() - t0
            messages += [answer["choices"][0]["message"],
                         {"role": "user", "content": "Tell me more."}]
            rows.append((turn, seat, answer["usage"]["prompt_tokens"], took,
                         llm.cache.cache_size))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chars", type=int, default=11000, help="system prompt characters")
    p.add_argument("--turns", type=int, default=2)
    args = p.parse_args()
    states.release_large_blocks()
    print("| kept latest | turn | seat | prompt tokens | s | states kept |")
    print("|---|---|---|---|---|---|")
    for kept in (0, states.KEPT_LATEST):
        for turn, seat, tokens, took, size in run(kept, args.chars, args.turns):
            print(f"| {kept} | {turn} | {seat} | {tokens} | {took:.1f} | {size / 2**20:.0f} MiB |",
                  flush=True)


if __name__ == "__main__":
    main()
