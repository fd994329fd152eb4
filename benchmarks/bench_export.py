"""What `interplay export` costs: throughput and peak memory over a generated episodes.jsonl of
about 1 GB (target: at least 50 MB/s, memory flat in the file's size), and how much token
capture adds to an episode line.

The file is generated into a temporary folder (deleted at the end) from real records: each
episode a user-sim-like chat of an assistant (trainable, token capture on: prompt ids,
completion ids and logprobs on every call) with tool calls and results, and a modeled user
(untrainable, no capture); episode lines written by ``interplay.values.splicing.to_json_bytes`` as a
run writes them, varied per episode (ids, rewards, rollouts). One episode in 50 ended in an
error, and one in 100 was run again (``--retry-errors``), so its pair has two lines.

Each export runs in a process of its own (``interplay export``'s function, as the command
calls it), which reports its peak RSS and the peak of its anonymous memory (``RssAnon``: its
own, leaving out the pages of files it maps, such as the Arrow files the datasets library
reads back); the same exports over a tenth of the file show whether memory grows with it.
``iter_episodes`` alone is timed too: reading is most of an export's cost.

Run by hand (it prints figures; nothing is asserted):

    .venv/bin/python benchmarks/bench_export.py
    .venv/bin/python benchmarks/bench_export.py --size-mb 200 --formats sft,rl-call
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from interplay.model.tokens import compact
from interplay.values import splicing
from interplay.values.records import (
    Episode,
    EpisodeInfo,
    Message,
    ModelCall,
    Reward,
    Task,
    Tokens,
    ToolCall,
    Trace,
    Usage,
)

TARGET_MB_S = 50.0
WORDS = ("order shipped address change cancel refund the a your is has been to for we "
         "please thanks parcel tracking number today tomorrow warehouse").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def make_episode(rng: random.Random, task_idx: int, rollout: int, *,
                 capture: bool = True) -> Episode:
    info = EpisodeInfo(episode_id=f"{rng.getrandbits(32):08x}", env="user-sim-tools",
                       task_idx=task_idx, rollout=rollout, seed=rng.getrandbits(31))
    tool = {"type": "function", "function": {
        "name": "find_order", "description": "Look an order up by its id.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"]}}}
    system = Message("system", "You are the shop's support assistant. " + sentence(rng, 40))
    conv = [system]
    assistant_calls: list[ModelCall] = []
    user_calls: list[ModelCall] = []
    prompt_ids = [rng.randrange(49152) for _ in range(120)]
    for turn in range(5):
        user_line = Message("user", sentence(rng, 25))
        user_calls.append(ModelCall(id=f"mc_u{turn}", model="m", request={
            "model": "m", "messages": [{"role": "system", "content": "You are a customer."}]},
            response=orjson.dumps({"choices": [{"message": {
                "role": "assistant", "content": user_line.content}}]}),
            usage=Usage(300, 30, 330), finish_reason="stop"))
        conv.append(user_line)
        prompt_ids += [rng.randrange(49152) for _ in range(35)]
        calls_tool = turn % 2 == 0
        reply = Message("assistant", None if calls_tool else sentence(rng, 45),
                        tool_calls=(ToolCall(f"call_{turn}", "find_order",
                                             json.dumps({"order_id": str(1000 + turn)})),)
                        if calls_tool else ())
        completion = [rng.randrange(49152) for _ in range(18 if calls_tool else 60)]
        tokens = Tokens(prompt_ids=list(prompt_ids), completion_ids=completion,
                        logprobs=[compact(-rng.random() * 4) for _ in completion]) \
            if capture else None
        assistant_calls.append(ModelCall(
            id=f"mc_a{turn}", model="m",
            request={"model": "m", "messages": [m.wire() for m in conv], "tools": [tool]},
            response=orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion",
                                   "choices": [{"index": 0, "message": reply.to_openai(),
                                                "finish_reason": "tool_calls" if calls_tool
                                                else "stop", "logprobs": None}],
                                   "usage": {"prompt_tokens": len(prompt_ids),
                                             "completion_tokens": len(completion)}}),
            usage=Usage(len(prompt_ids), len(completion), len(prompt_ids) + len(completion)),
            finish_reason="tool_calls" if calls_tool else "stop", tokens=tokens))
        conv.append(reply)
        prompt_ids += completion
        if calls_tool:
            conv.append(Message("tool", json.dumps({"status": "shipped", "eta": "tomorrow"}),
                                tool_call_id=f"call_{turn}"))
            prompt_ids += [rng.randrange(49152) for _ in range(20)]
    reward = float(rng.random() < 0.5)
    assistant = Trace(agent="assistant", episode=info, seat="assistant", harness="chat",
                      model="m", messages=list(conv), model_calls=assistant_calls,
                      stop_condition="user_done", rewards=[Reward("state_match", reward)],
                      reward=reward)
    user = Trace(agent="user", episode=info, seat="user", trainable=False, harness="null",
                 model="m", messages=[Message("user", m.text) for m in conv[1:]],
                 model_calls=user_calls, stop_condition="user_done")
    return Episode(info=info, task=Task(idx=task_idx, prompt=sentence(rng, 12)),
                   traces=[assistant, user], rewards=[Reward("state_match", reward)],
                   reward=reward)


def generate(path: Path, size_mb: float, seed: int = 0) -> tuple[int, int]:
    """Write about ``size_mb`` MB of episode lines; returns (bytes, lines)."""
    rng = random.Random(seed)
    templates = [orjson.loads(splicing.to_json_bytes(make_episode(rng, 0, 0)))
                 for _ in range(16)]
    target = int(size_mb * 1e6)
    written = lines = 0
    rollouts = 8
    with path.open("wb") as fh:
        n = 0
        while written < target:
            record = dict(templates[n % len(templates)])
            task_idx, rollout = divmod(n, rollouts)
            record["info"] = {**record["info"], "task_idx": task_idx, "rollout": rollout,
                              "episode_id": f"{n:08x}"}
            reward = float(rng.random() < 0.5)
            record["reward"] = reward
            traces = [dict(t) for t in record["traces"]]
            traces[0]["reward"] = reward
            traces[0]["episode"] = record["info"]
            record["traces"] = traces
            failed = n % 50 == 49
            if failed:
                record["error"], record["error_type"] = "TimeoutError: timed out", "timeout"
                record["reward"] = traces[0]["reward"] = None
            line = orjson.dumps(record) + b"\n"
            fh.write(line)
            written += len(line)
            lines += 1
            if n % 100 == 99:  # run again with --retry-errors: a second line of its pair
                fh.write(line)
                written += len(line)
                lines += 1
            n += 1
    return written, lines


_CHILD = """
import resource, sys, threading, time
from interplay.export import ExportOptions, export
from interplay.run.results import iter_episodes
from pathlib import Path
fmt, unit, rows, src, out = sys.argv[1:6]
anon = [0]
def watch():  # the peak of memory that is the process's own, not a file's pages it maps
    while True:
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                anon[0] = max(anon[0], int(line.split()[1]))
        time.sleep(0.02)
threading.Thread(target=watch, daemon=True).start()
t0 = time.perf_counter()
if fmt == "read":
    n = sum(1 for _ in iter_episodes(Path(src)))
else:
    n = export(src, out, ExportOptions(format=fmt, unit=unit, rows=rows)).rows
wall = time.perf_counter() - t0
print(wall, n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, anon[0])
"""

#: name: (format, unit, rows)
CASES = {"read": ("read", "call", "sft"), "sft": ("sft", "call", "sft"),
         "rl-call": ("rl", "call", "sft"), "rl-trace": ("rl", "trace", "sft"),
         "hf-sft": ("hf", "call", "sft"), "hf-rl": ("hf", "call", "rl")}


def measure(case: str, src: Path, work: Path) -> dict[str, Any]:
    fmt, unit, rows = CASES[case]
    out = work / (case if fmt == "hf" else f"{case}.jsonl")
    proc = subprocess.run([sys.executable, "-c", _CHILD, fmt, unit, rows, str(src), str(out)],
                          capture_output=True, text=True, check=True)
    wall, n, rss_kb, anon_kb = proc.stdout.split()
    size = src.stat().st_size
    written = (sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out.is_dir()
               else out.stat().st_size) if out.exists() else 0
    if out.is_dir():
        shutil.rmtree(out)
    elif out.exists():
        out.unlink()
    mb_s = size / 1e6 / float(wall)
    return {"case": case, "input_mb": round(size / 1e6, 1), "rows": int(n),
            "wall_s": round(float(wall), 2), "mb_per_s": round(mb_s, 1),
            "ratio_of_target": round(mb_s / TARGET_MB_S, 2),
            "peak_rss_mb": round(int(rss_kb) / 1024, 1),
            "peak_anon_mb": round(int(anon_kb) / 1024, 1),
            "output_mb": round(written / 1e6, 1), "load": os.getloadavg()[0]}


def line_growth() -> dict[str, Any]:
    rng = random.Random(7)
    with_tokens = splicing.to_json_bytes(make_episode(rng, 0, 0))
    rng = random.Random(7)
    without = splicing.to_json_bytes(make_episode(rng, 0, 0, capture=False))
    return {"line_bytes_without_capture": len(without), "with_capture": len(with_tokens),
            "growth": round(len(with_tokens) / len(without), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=1000.0)
    parser.add_argument("--formats", default="read,sft,rl-call,rl-trace",
                        help=f"of {', '.join(CASES)}")
    parser.add_argument("--small-formats", default="read,sft,rl-call,rl-trace,hf-sft,hf-rl",
                        help="run over the tenth of the file (for memory against size)")
    args = parser.parse_args()
    print(json.dumps(line_growth()))
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        work = Path(tmp)
        for scale, formats in ((0.1, args.small_formats), (1.0, args.formats)):
            src = work / f"episodes-{scale}.jsonl"
            t0 = time.perf_counter()
            size, lines = generate(src, args.size_mb * scale)
            print(json.dumps({"generated_mb": round(size / 1e6, 1), "lines": lines,
                              "gen_s": round(time.perf_counter() - t0, 1)}))
            for case in filter(None, formats.split(",")):
                print(json.dumps(measure(case, src, work)), flush=True)
            src.unlink()


if __name__ == "__main__":
    main()
