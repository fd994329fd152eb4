"""Sandboxes through ``interplay eval`` as a user runs it (the real command in a subprocess, a
test plugin's env whose one step runs a shell command in the episode's sandbox): a run killed
with ``kill -9`` mid-run, with and without worker processes, leaves no container and no
folder once its reaper has run; Ctrl-C leaves nothing either and keeps what was recorded; a
daemon that is not there is one line when the run starts, and so is a configured image that
does not exist, or a task's.

What a run left is found by its env's name, unique to the test (each container carries it as
the label ``interplay.env``) and a marker in its commands, never by anyone else's."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sandbox_support import WHY_NO_DOCKER, ProbePlugin, needs_docker, records, wait_for

from interplay.testing import mentioning

pytestmark = pytest.mark.slow

#: Episodes of tasks below it finish at once; the others run ``sleep MARKER`` until killed.
QUICK = 4


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[ProbePlugin]:
    plugin = ProbePlugin(tmp_path / "plugin")
    yield plugin
    if WHY_NO_DOCKER is None:
        plugin.remove_containers()


def _marker() -> str:
    return f"{3000 + secrets.randbelow(10000)}.{secrets.randbelow(10**6):06d}"


def _start(plugin: ProbePlugin, out: Path, marker: str, *args: str) -> subprocess.Popen[str]:
    command = f"[ {{idx}} -lt {QUICK} ] || sleep {marker}"
    return subprocess.Popen(
        plugin.eval_argv("-n", "20", "-c", "8", "-o", str(out), "--no-report", "--quiet",
                         "--set", "env.tasks=20", "--set", f"env.command={json.dumps(command)}",
                         *args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=plugin.env(),
        start_new_session=True)


def _running(plugin: ProbePlugin) -> int:
    return sum(1 for c in plugin.containers() if c["State"] == "running")


def _midway(proc: subprocess.Popen[str], out: Path, ready: int, marker: str,
            count: Callable[[], int]) -> None:
    """Wait until the quick episodes are recorded and ``ready`` sandboxes run a sleeping
    command."""
    def there() -> bool:
        assert proc.poll() is None, proc.communicate()
        return (len(records(out)) >= QUICK and count() >= ready
                and len(mentioning(marker)) >= ready)

    wait_for(there, f"{ready} sandboxes at work", 180)


def _ended(proc: subprocess.Popen[str]) -> str:
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err


@needs_docker
@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_killed_mid_run_leaves_no_container(plugin: ProbePlugin, tmp_path: Path,
                                                  workers: int) -> None:
    marker = _marker()
    out = tmp_path / "run"
    # Its env calls no model; worker processes ask for an endpoint other than the embedded
    # one all the same.
    proc = _start(plugin, out, marker, "--sandbox", "docker", "-w", str(workers),
                  "--base-url", "http://127.0.0.1:9/v1")
    try:
        _midway(proc, out, 4, marker, lambda: _running(plugin))
        assert len(plugin.containers()) >= 4
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        _ended(proc)
    assert proc.returncode == -signal.SIGKILL
    wait_for(lambda: not plugin.containers(), "the reaper to remove the run's containers", 90)
    wait_for(lambda: not mentioning(marker), "the commands inside to end", 30)
    done = records(out)
    assert len(done) >= QUICK and all(r["results"]["exit_code"] == 0 for r in done)


@needs_docker
def test_ctrl_c_mid_run_leaves_no_container_and_keeps_what_was_recorded(
        plugin: ProbePlugin, tmp_path: Path) -> None:
    marker = _marker()
    out = tmp_path / "run"
    proc = _start(plugin, out, marker, "--sandbox", "docker")
    try:
        _midway(proc, out, 4, marker, lambda: _running(plugin))
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it
        err = _ended(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    # The run removed them itself, before it exited: no reaper needed.
    assert not plugin.containers()
    assert not mentioning(marker)
    done = records(out)
    assert len(done) >= QUICK
    assert {r["info"]["task_idx"] for r in done} >= set(range(QUICK))


def test_a_run_killed_mid_run_leaves_no_local_folder(plugin: ProbePlugin,
                                                     tmp_path: Path) -> None:
    marker = _marker()
    out, root = tmp_path / "run", tmp_path / "sandboxes"

    def folders() -> int:
        return sum(1 for p in root.glob("*/ep-*")) if root.exists() else 0

    proc = _start(plugin, out, marker, "--sandbox", "local",
                  "--set", f"sandbox.root={json.dumps(str(root))}")
    try:
        _midway(proc, out, 4, marker, folders)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        _ended(proc)
    wait_for(lambda: not any(root.iterdir()), "the reaper to remove the run's folders", 60)
    wait_for(lambda: not mentioning(marker), "the commands to end", 30)


def test_a_daemon_that_is_not_there_is_one_line_when_the_run_starts(
        plugin: ProbePlugin, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        plugin.eval_argv("-n", "1", "-o", str(out), "--no-report", "--set",
                         f"sandbox.host={json.dumps(f'unix://{tmp_path}/none.sock')}",
                         "--sandbox", "docker"),
        capture_output=True, text=True, env=plugin.env(), timeout=120)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "cannot reach the Docker daemon" in lines[0] and "no such socket" in lines[0]
    assert not out.exists()


@needs_docker
@pytest.mark.parametrize(("setting", "where"), [("sandbox.image", ""), ("env.image", "task 0: ")])
def test_an_image_that_does_not_exist_is_one_line_when_the_run_starts(
        plugin: ProbePlugin, tmp_path: Path, setting: str, where: str) -> None:
    # The sandbox's own image, or the one each task names.
    out = tmp_path / "run"
    done = subprocess.run(
        plugin.eval_argv("-n", "3", "-o", str(out), "--no-report", "--quiet",
                         "--set", "env.tasks=3", "--set", 'sandbox.kind="docker"',
                         "--set", f'{setting}="interplay-no-such-image:nope"'),
        capture_output=True, text=True, env=plugin.env(), timeout=300)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"interplay: error: {where}image 'interplay-no-such-image:nope'"
                               " is not on the Docker daemon"), lines[0]
    assert "sandbox.pull" in lines[0]
    assert not records(out)
    assert not plugin.containers()


def test_the_probe_plugin_is_found_by_the_command(plugin: ProbePlugin) -> None:
    listed = subprocess.run([sys.executable, "-m", "interplay.cli", "list", "envs"],
                            capture_output=True, text=True, env=plugin.env(), timeout=120)
    assert plugin.name in listed.stdout, listed.stderr
