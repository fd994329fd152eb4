"""`interplay eval -w 2` when processes are killed, stopped and resumed at awkward moments: the
run must end with every (task, rollout) pair recorded exactly once, the episodes a dead worker
was running recorded as ``worker_error``, and never a traceback.

Each test drives the real command as a subprocess against the scripted model. Tasks whose
prompt says "slow" are answered after a pause long enough to be running whenever a process is
killed; the others are answered quickly, so finished episodes pile up in a worker's pipe while
its parent is stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, descendants

ScriptedFactory = Callable[..., ScriptedModel]

SLOW_S = 3.0
FAST_S = 0.15


def paced(request: ScriptedRequest) -> ScriptedReply:
    text = request.last_user_text()
    word = text.rsplit(" ", 1)[-1]
    return ScriptedReply.text(word, latency_s=SLOW_S if "slow" in text else FAST_S)


def _env() -> dict[str, str]:
    return {**os.environ, "INTERPLAY_LOAD_PLUGINS": ""}


def _tasks(path: Path, kinds: list[str]) -> Path:
    with path.open("w") as fh:
        for i, kind in enumerate(kinds):
            word = f"{kind}{i}"
            fh.write(json.dumps({"prompt": f"Say {word}", "answer": word}) + "\n")
    return path


def _start(tmp_path: Path, model: ScriptedModel, kinds: list[str], *, workers: int = 2,
           concurrency: int = 4, name: str = "run") -> tuple[subprocess.Popen[str], Path]:
    tasks = _tasks(tmp_path / f"{name}.jsonl", kinds)
    out = tmp_path / name
    proc = subprocess.Popen(
        [sys.executable, "-m", "interplay.cli", "eval", "echo", "-c", str(concurrency),
         "-w", str(workers), "--base-url", model.base_url, "-o", str(out), "--no-report",
         "--quiet", "--set", f"env.taskset={json.dumps(str(tasks))}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    return proc, out


def _records(out: Path) -> list[dict[str, Any]]:
    path = out / "episodes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _by_pair(out: Path) -> dict[tuple[int, int], dict[str, Any]]:
    records = _records(out)
    found = {(r["info"]["task_idx"], r["info"]["rollout"]): r for r in records}
    assert len(found) == len(records), "a pair was recorded twice"
    return found


def _wait(predicate: Callable[[], bool], proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 60  # a failure bound, not a speed check
    while time.monotonic() < deadline:
        if predicate():
            return
        assert proc.poll() is None, (what, proc.communicate()[1])
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _written(out: Path) -> int:
    path = out / "episodes.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _workers(parent: int) -> list[int]:
    """The run's live worker processes."""
    return sorted(pid for pid in descendants(parent) if b"interplay.run.workers" in _cmdline(pid))


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return b""


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """Pids a test stopped; each is let go again however the test ends."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


# Two workers with two slots each: worker 0 gets tasks 0 and 1, worker 1 tasks 2 and 3, so
# each holds one slow episode (1 and 3) the whole time while its other slot goes through the
# fast ones.
KINDS = ["fast", "slow", "fast", "slow", *["fast"] * 10]


@pytest.mark.slow
def test_a_worker_killed_while_its_parent_is_stopped_costs_only_its_running_episode(
        tmp_path: Path, scripted_model: ScriptedFactory, stopped: list[int]) -> None:
    """Its finished episodes are still in the pipe when the parent resumes: they are recorded,
    the pairs sent to the dead worker go to the other one, and the slow episode it was running
    is a worker_error; no traceback."""
    model = scripted_model(paced)
    proc, out = _start(tmp_path, model, KINDS)
    _wait(lambda: _written(out) >= 1 and len(_workers(proc.pid)) == 2, proc, "a first episode")
    victim = _workers(proc.pid)[0]
    os.kill(proc.pid, signal.SIGSTOP)
    stopped.append(proc.pid)
    time.sleep(4 * FAST_S)  # the victim finishes its fast episode into the pipe
    os.kill(victim, signal.SIGKILL)
    time.sleep(0.1)
    os.kill(proc.pid, signal.SIGCONT)
    _, stderr = proc.communicate(timeout=120)

    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    found = _by_pair(out)
    assert sorted(found) == [(t, 0) for t in range(len(KINDS))]
    lost = {pair for pair, r in found.items() if r["error_type"] is not None}
    assert len(lost) == 1 and lost <= {(1, 0), (3, 0)}, lost
    assert {found[p]["error_type"] for p in lost} == {"worker_error"}
    assert all(r["reward"] == 1.0 for p, r in found.items() if p not in lost)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == len(KINDS)


@pytest.mark.slow
def test_a_worker_stopped_and_resumed_loses_nothing(
        tmp_path: Path, scripted_model: ScriptedFactory, stopped: list[int]) -> None:
    model = scripted_model(paced)
    proc, out = _start(tmp_path, model, KINDS)
    _wait(lambda: _written(out) >= 1 and len(_workers(proc.pid)) == 2, proc, "a first episode")
    victim = _workers(proc.pid)[0]
    os.kill(victim, signal.SIGSTOP)
    stopped.append(victim)
    time.sleep(8 * FAST_S)  # the other worker goes on meanwhile
    os.kill(victim, signal.SIGCONT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    found = _by_pair(out)
    assert sorted(found) == [(t, 0) for t in range(len(KINDS))]
    assert all(r["error_type"] is None and r["reward"] == 1.0 for r in found.values())


@pytest.mark.slow
def test_every_worker_killed_is_one_line_and_a_resume_finishes_the_run(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(paced)
    kinds = ["fast", "slow", "fast", "slow", *["slow"] * 6]
    proc, out = _start(tmp_path, model, kinds)
    _wait(lambda: _written(out) >= 2 and len(_workers(proc.pid)) == 2, proc, "two episodes")
    for pid in _workers(proc.pid):
        os.kill(pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith(
        "interplay: error: every worker process exited")
    found = _by_pair(out)
    assert {r["error_type"] for r in found.values()} >= {"worker_error"}
    assert len(found) < len(kinds)  # the pairs no worker ever got are not invented

    again = subprocess.run(
        [sys.executable, "-m", "interplay.cli", "eval", "--resume", str(out), "--retry-errors",
         "--no-report", "--quiet"], capture_output=True, text=True, env=_env(), timeout=120)
    assert again.returncode == 0, again.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == len(kinds) and summary["error_episodes"] == 0


# -- the protocol reader, against real processes that break it -----------------------------------


@pytest.mark.parametrize("output", [
    "not a protocol line\n",                       # something wrote into the private pipe
    '{"task_idx": 0, "rollout": 0, "slim": 3}\n',  # a header of the wrong shape
    '{"task_idx": 0, "rollo',                      # died in the middle of a header
])
async def test_a_worker_that_breaks_the_protocol_costs_only_its_running_episodes(
        output: str) -> None:
    from interplay.run import workers
    from interplay.values.records import Task

    # A worker that wrote a whole line then hangs, or one that dies in the middle of a line.
    program = ("import sys, time; sys.stdout.write(sys.argv[1]); sys.stdout.flush(); "
               "sys.argv[1].endswith('\\n') and time.sleep(60)")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", program, output, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    worker = workers._Worker(0, proc, capacity=1)
    worker.outstanding[(0, 0)] = (Task(0, prompt="p"), 0, time.time())
    lines: list[Any] = []
    lost: list[list[tuple[int, int]]] = []

    def on_lost(w: Any) -> None:
        lost.append(sorted(w.outstanding))

    reading = workers._read(worker, lambda w: None, lambda *a: lines.append(a), on_lost)
    await asyncio.wait_for(reading, 60)  # a failure bound: a hung reader would hang the run
    assert lines == []
    assert lost == [[(0, 0)]]
    assert proc.returncode is not None


@pytest.mark.slow
def test_a_worker_killed_as_it_starts_leaves_the_run_to_the_other(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    """Killed before it has answered anything (perhaps before it read its set-up): what it
    was sent is lost, and every other pair goes to the worker that lives."""
    model = scripted_model(paced)
    kinds = ["fast"] * 8
    proc, out = _start(tmp_path, model, kinds)
    _wait(lambda: len(_workers(proc.pid)) >= 1, proc, "a worker")
    os.kill(_workers(proc.pid)[0], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    found = _by_pair(out)
    assert sorted(found) == [(t, 0) for t in range(len(kinds))]
    lost = [r for r in found.values() if r["error_type"] is not None]
    assert len(lost) <= 2  # at most its share of -c 4
    assert {r["error_type"] for r in lost} <= {"worker_error"}
    assert all(r["reward"] == 1.0 for r in found.values() if r["error_type"] is None)
