"""The plugin as a user meets it: installed from its folder, found through its entry point by
the `interplay` command, and run by `interplay eval` on the scripted model, serving an OpenEnv
app for the run and leaving nothing behind, even when the run is killed."""

from __future__ import annotations

import importlib.metadata
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    command_env,
    descendants,
    interplay_command,
    run_interplay,
    survivors,
)

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run() -> Run:
    return run_interplay


def bisect(request: ScriptedRequest) -> ScriptedReply:
    """Plays the demo by bisection, reading "go higher" / "go lower" after each guess."""
    low, high = 1, 100
    for message in request.messages:
        text = str(message.get("content") or "")
        if message.get("role") == "user":
            hint = re.search(r"(\d+) is wrong: go (higher|lower)", text)
            if hint:
                guess = int(hint.group(1))
                low, high = (guess + 1, high) if hint.group(2) == "higher" else (low, guess - 1)
    return ScriptedReply.text(str((low + high) // 2))


def test_it_registers_only_through_its_own_entry_point() -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="interplay")
           if ep.value.startswith("interplay_openenv")]
    assert [(ep.name, ep.value, ep.dist.name if ep.dist else None) for ep in eps] == [
        ("openenv", "interplay_openenv.plugin", "interplay-openenv")]
    kernel = importlib.metadata.distribution("interplay")
    assert not [r for r in kernel.requires or () if "openenv" in r]


def test_listing_plugins_imports_no_openenv(run: Run) -> None:
    code = ("import sys; from interplay.plugins import host as plugins; "
            "plugins.reset(); plugins.registry(); "
            "assert plugins.get('envs', 'openenv'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openenv', 'gradio')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
    listed = run("plugins", "--json")
    (info,) = [i for i in json.loads(listed.stdout) if i["name"] == "openenv"]
    assert info["package"] == "interplay-openenv" and info["error"] is None
    assert info["registered"] == {"envs": ["openenv"]}


def test_interplay_eval_serves_the_demo_for_the_run(run: Run, tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    with ScriptedModel(bisect) as model:
        out = run("eval", "openenv", "--set", "env.app=interplay_openenv.demo:app", "-n", "3",
                  "--base-url", model.base_url, "-o", str(out_dir), "-q")
    assert out.returncode == 0, out.stderr
    episodes = [json.loads(line) for line in
                (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 3
    for e in episodes:
        assert e["error"] is None
        record = e["results"]["openenv"]
        assert record["ended_by"] == "done" and record["reward"] == 1.0
        assert e["reward"] == 1.0
        assert 1 <= len(record["steps"]) <= 7
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["complete"]
    # The server served this run only: the address it had is free again.
    url = episodes[0]["results"]["openenv"]["base_url"]
    assert url.startswith("http://127.0.0.1:")
    assert _server_gone(url)


def _server_gone(url: str) -> bool:
    import httpx

    try:
        httpx.get(f"{url}/health", timeout=2)
    except httpx.HTTPError:
        return True
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_run_leaves_no_server_behind(tmp_path: Path) -> None:
    with ScriptedModel(lambda r: ScriptedReply.text("50", latency_s=30)) as model:
        proc = subprocess.Popen(
            [*interplay_command(), "eval", "openenv", "--set", "env.app=interplay_openenv.demo:app",
             "-n", "1", "--base-url", model.base_url, "-o", str(tmp_path / "run"), "-q",
             "--no-report"], env=command_env(), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not model.requests and time.monotonic() < deadline:
                time.sleep(0.1)
            assert model.requests, "the run never reached the model"
            tree = descendants(proc.pid)
            servers = [pid for pid in tree if b"uvicorn" in _cmdline(pid)]
            assert len(servers) == 1
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            assert survivors(tree) == set()
        finally:
            if proc.poll() is None:
                proc.kill()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
