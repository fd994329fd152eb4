"""What a run starts ends with it, however it ends: `interplay eval` (and a process using
interplay.processes) in a real subprocess, ended by SIGKILL, SIGTERM, Ctrl-C, an exception or a
normal exit while its children run; every process it started, found by pid, must then be gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from interplay.testing import ScriptedModel, descendants, survivors

# Every test starts real processes, kills them and waits for them to be gone.
pytestmark = [pytest.mark.skipif(not os.path.isdir("/proc"), reason="walks /proc (Linux)"),
              pytest.mark.slow]

ScriptedFactory = Callable[..., ScriptedModel]

#: A long-lived program: two children of its own (one in its process group, one in a session
#: of its own, which only the run's tag finds), then it writes the three pids and sleeps.
PROGRAM = textwrap.dedent("""
    import json, os, subprocess, sys, time
    out = sys.argv[1]
    kid = subprocess.Popen(["sleep", "600"])
    away = subprocess.Popen(["sleep", "600"], start_new_session=True)
    tmp = os.path.join(out, f".{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump([os.getpid(), kid.pid, away.pid], f)
    os.rename(tmp, os.path.join(out, f"{os.getpid()}.json"))
    time.sleep(600)
""")

#: Starts PROGRAM from a thread that then ends, says so, and ends as its first argument says
#: once told to (a line on stdin): by an exception, a normal exit, or not at all (to be killed).
STARTER = textwrap.dedent("""
    import sys, threading, time
    from interplay import processes
    how, program, out = sys.argv[1:4]
    thread = threading.Thread(target=lambda: processes.popen([sys.executable, program, out]))
    thread.start()
    thread.join()
    print("started", flush=True)
    sys.stdin.readline()
    if how == "raise":
        raise RuntimeError("the run failed")
    if how == "exit":
        sys.exit(0)
    time.sleep(600)
""")


def _env() -> dict[str, str]:
    # Only the builtins: the tests never depend on what else is installed.
    return {**os.environ, "INTERPLAY_LOAD_PLUGINS": ""}


def _program_pids(folder: Path, count: int, proc: subprocess.Popen[str]) -> set[int]:
    """The pids the first ``count`` programs wrote, once they have (waiting as they start)."""
    deadline = time.monotonic() + 120  # a failure bound, not a speed check
    while True:
        files = sorted(folder.glob("*.json"))
        if len(files) >= count:
            return {pid for f in files for pid in json.loads(f.read_text())}
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "no program started"
        time.sleep(0.05)


def _end_midway(args: list[str], sig: signal.Signals,
                ready: Callable[[subprocess.Popen[str]], set[int]]) -> set[int]:
    """Start ``interplay ARGS`` in a session of its own, wait until ``ready`` (which returns
    the pids it knows of), take its tree of processes, and end it with ``sig`` as a user sends
    it (Ctrl-C at a terminal reaches the foreground process group); the tree."""
    proc = subprocess.Popen([sys.executable, "-m", "interplay.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), start_new_session=True)
    try:
        tree = ready(proc)
        tree |= descendants(proc.pid)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 130), err
    return tree


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    (tmp_path / "pids").mkdir()
    return path


# -- a process using interplay.processes -------------------------------------------------------


@pytest.mark.parametrize("how", ["kill", "raise", "exit"])
def test_a_child_outlives_the_thread_that_started_it_but_not_its_process(
        tmp_path: Path, program: Path, how: str) -> None:
    pids = tmp_path / "pids"
    starter = subprocess.Popen([sys.executable, "-c", STARTER, how, str(program), str(pids)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert starter.stdout is not None and starter.stdin is not None
        for line in starter.stdout:  # log lines (structlog's default) may come first
            if line == "started\n":
                break
        else:
            raise AssertionError(starter.communicate()[1])
        started = _program_pids(pids, 1, starter)
        tree = descendants(starter.pid) | started
        # The thread that started the program has ended (a parent-death signal would have
        # fired then); the program and its children live on.
        assert survivors(started, within_s=0) == started
        if how == "kill":
            starter.kill()
        else:
            starter.stdin.write("go\n")
            starter.stdin.flush()
        _, err = starter.communicate(timeout=60)
    finally:
        if starter.poll() is None:
            starter.kill()
    assert starter.returncode == {"kill": -signal.SIGKILL, "raise": 1, "exit": 0}[how]
    if how == "raise":
        assert "the run failed" in err
    assert len(tree) >= 4  # the program, its two children, the reaper
    assert survivors(tree) == set()


# -- interplay eval: a command harness's programs ----------------------------------------------


@pytest.mark.parametrize(("sig", "workers"), [(signal.SIGKILL, 1), (signal.SIGTERM, 1),
                                              (signal.SIGINT, 1), (signal.SIGKILL, 2)])
def test_a_run_ended_mid_episode_leaves_no_program_behind(
        tmp_path: Path, program: Path, scripted_model: ScriptedFactory, sig: signal.Signals,
        workers: int) -> None:
    model = scripted_model()
    pids = tmp_path / "pids"
    argv = json.dumps([sys.executable, str(program), str(pids)])
    # Ended once both episodes' programs are running.
    tree = _end_midway(
        ["eval", "echo", "-n", "4", "-c", "2", "-w", str(workers), "--base-url", model.base_url,
         "-o", str(tmp_path / "run"), "--no-report", "-q",
         "--set", "seats.assistant.harness=command",
         "--set", f"seats.assistant.harness_config.argv={argv}"],
        sig, lambda proc: _program_pids(pids, 2, proc))
    assert len(list(pids.glob("*.json"))) == 2
    assert len(tree) > 6  # two programs with two children each, the reapers (and workers)
    assert survivors(tree) == set()


# -- interplay eval: the embedded model --------------------------------------------------------


def _wait_for_episode(out: Path, proc: subprocess.Popen[str]) -> set[int]:
    path = out / "episodes.jsonl"
    deadline = time.monotonic() + 180  # a failure bound, not a speed check
    while not (path.exists() and path.read_text().count("\n") >= 1):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the run wrote no episode"
        time.sleep(0.05)
    return set()


@pytest.mark.local_model
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_run_ended_mid_run_leaves_no_model_server_behind(tmp_path: Path,
                                                           sig: signal.Signals) -> None:
    pytest.importorskip("llama_cpp", reason="the embedded model is not installed")
    out = tmp_path / "run"
    tree = _end_midway(["eval", "echo", "-n", "8", "-o", str(out), "--no-report", "-q"], sig,
                       lambda proc: _wait_for_episode(out, proc))  # the model is answering
    assert len(tree) >= 2  # the model's server and the reaper
    assert survivors(tree) == set()


@pytest.mark.local_model
def test_serve_local_started_by_hand_outlives_its_starter(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="the embedded model is not installed")
    url_file, pid_file = tmp_path / "url", tmp_path / "pid"
    # A shell that starts the server in the background and exits at once.
    starter = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m interplay.cli serve-local > "{url_file}" '
                     f'2>/dev/null & echo $! > "{pid_file}"'], env=_env(), timeout=30)
    assert starter.returncode == 0
    pid = int(pid_file.read_text())
    try:
        deadline = time.monotonic() + 120
        # The background job's redirect makes the file: it may not exist yet.
        while not (url_file.exists() and url_file.read_text().strip()):
            assert survivors({pid}, within_s=0) == {pid}, "serve-local exited"
            assert time.monotonic() < deadline, "serve-local printed no URL"
            time.sleep(0.05)
        url = url_file.read_text().strip()
        with urllib.request.urlopen(f"{url}/models", timeout=30) as r:
            assert r.status == 200
    finally:
        os.kill(pid, signal.SIGTERM)
    assert survivors({pid}) == set()


async def test_a_program_run_ends_when_the_program_exits(tmp_path: Path) -> None:
    """run_program returns when the program exits, with what it wrote until then, though a
    child that left its group keeps writing to the same pipe without end; that child ends
    with the run."""
    from interplay.processes import run_program

    pid_file = tmp_path / "pid"
    try:
        run = await run_program(
            ["bash", "-c", f"read line; echo \"got $line\"; setsid yes & echo $! > {pid_file}"],
            stdin=b"apple\n", timeout_s=30)
        assert (run.exit_code, run.timed_out) == (0, False)
        assert run.stdout.startswith(b"got apple\n")
        assert run.stderr == b""
        assert survivors({int(pid_file.read_text())}) == set()
    finally:
        with contextlib.suppress(ProcessLookupError):  # written before the program exited
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


async def test_a_program_run_ends_what_it_started_and_nothing_else(tmp_path: Path) -> None:
    """Two runs at once, each leaving a process in a session of its own (one a session leader
    with a child of its own, in a group the run never saw): when the first ends, its
    processes end with it, and the second run's, and a process this test started itself, run
    on; the second's end when it does; and a third's on its timeout."""
    from interplay.processes import popen, run_program

    a_pids, b_pid, c_pid, done = (tmp_path / n for n in ("a", "b", "c", "done"))
    a = (f"setsid bash -c 'sleep 300 & echo $$ $! > {a_pids}.tmp; mv {a_pids}.tmp {a_pids}; "
         f"wait' & while [ ! -f {a_pids} ]; do sleep 0.02; done; echo a")
    b = (f"setsid sleep 300 & echo $! > {b_pid}.tmp; mv {b_pid}.tmp {b_pid}; "
         f"while [ ! -f {done} ]; do sleep 0.02; done")
    mine = popen(["sleep", "300"])
    started: set[int] = {mine.pid}

    async def first() -> None:
        run = await run_program(["bash", "-c", a], timeout_s=60)
        assert (run.exit_code, run.stdout) == (0, b"a\n")
        ended = {int(p) for p in a_pids.read_text().split()}
        started.update(ended)
        assert len(ended) == 2
        assert survivors(ended) == set()
        deadline = time.monotonic() + 60
        while not b_pid.exists():
            assert time.monotonic() < deadline, "the second program wrote no pid"
            await asyncio.sleep(0.02)
        started.add(int(b_pid.read_text()))
        assert survivors({int(b_pid.read_text()), mine.pid}, within_s=0) == {
            int(b_pid.read_text()), mine.pid}
        done.touch()

    try:
        second = asyncio.ensure_future(run_program(["bash", "-c", b], timeout_s=60))
        await first()
        assert (await second).exit_code == 0
        assert survivors({int(b_pid.read_text())}) == set()
        run = await run_program(["bash", "-c", f"setsid sleep 300 & echo $! > {c_pid}; sleep 300"],
                                timeout_s=1)
        started.add(int(c_pid.read_text()))
        assert run.timed_out
        assert survivors({int(c_pid.read_text())}) == set()
        assert survivors({mine.pid}, within_s=0) == {mine.pid}
    finally:
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        mine.wait()
