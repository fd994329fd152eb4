"""The docker sandbox's own parts against the real daemon: its limits (a fork bomb, a 4 GB
allocation, a workspace that fills the disk, its wall time), each stopped and recorded with
the sandbox usable after where it can be; images (one that does not exist, a Dockerfile that
does not build, one cached by content); a daemon that is not there; a container that died;
many sandboxes at once. Each test starts what it is about; containers are found by the test's
own label, never anyone else's. Skipped, saying why, where no daemon answers."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import (
    BASE_IMAGE,
    DOCKER_HOST,
    api,
    labelled,
    needs_docker,
    remove_labelled,
)

from interplay.builtin_sandboxes import _cleanup
from interplay.builtin_sandboxes.docker import DockerSandbox
from interplay.builtin_sandboxes.engine import BUILT_REPOSITORY, context_digest
from interplay.contracts.sandbox import ExecResult, SandboxError, SandboxPlan
from interplay.values.records import Workspace

pytestmark = [needs_docker, pytest.mark.slow]

MARK = f"docker-{secrets.token_hex(4)}"
CLEANUP = Path(_cleanup.__file__)

Started = Callable[..., Any]


@pytest.fixture
async def started() -> AsyncIterator[Started]:
    """``await started(settings, workspace=None)``: a docker sandbox started for this test,
    stopped (and its container removed) after it."""
    made: list[DockerSandbox] = []

    async def start(settings: dict[str, Any] | None = None,
                    workspace: Workspace | None = None) -> DockerSandbox:
        sandbox = DockerSandbox(settings or {})
        made.append(sandbox)
        await sandbox.start(SandboxPlan(workspace=workspace or Workspace(),
                                        labels={"test": MARK}))
        return sandbox

    yield start
    for sandbox in made:
        await sandbox.stop()
    remove_labelled("interplay.test", MARK)


async def _until(sandbox: DockerSandbox, check: Callable[[ExecResult], bool],
                 argv: list[str], what: str, tries: int = 60) -> ExecResult:
    """Run ``argv`` until ``check`` holds of its result (each try a second apart at most)."""
    for _ in range(tries):
        result = await sandbox.exec(argv, timeout_s=30)
        if check(result):
            return result
        await asyncio.sleep(0.5)
    raise AssertionError(f"never {what}")


# -- limits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bomb", [
    ":(){ :|:& };:",  # the classic: its shell exits at once, the bomb left in the background
    ":(){ :|:& };:; exec sleep 600",  # one that keeps its command running, to its time limit
])
async def test_a_fork_bomb_meets_the_pids_limit_and_is_ended_with_its_command(
        started: Started, bomb: str) -> None:
    sandbox = await started({"pids": 64})
    result = await sandbox.exec(["bash", "-c", bomb], timeout_s=5)
    if "sleep" in bomb:
        # Forking until the limit, for as long as its command ran.
        assert result.timed_out and result.exit_code is None
        assert "fork: retry: Resource temporarily unavailable" in result.stderr, result
    else:
        # Its shell's exit is the command's end: what it left forking is ended with it.
        assert result.exit_code == 0 and not result.timed_out, result
    # What it forked is gone: the sandbox runs a command that forks again.
    after = await sandbox.exec(["sh", "-c", "echo a | cat; ls /proc | grep -c '^[0-9]'"])
    lines = after.stdout.split()
    assert after.exit_code == 0 and lines[0] == "a", after
    assert int(lines[1]) < 10, after  # its init, its sleep, this command: not the bomb


async def test_a_4gb_allocation_is_killed_at_the_memory_limit_and_the_sandbox_goes_on(
        started: Started) -> None:
    sandbox = await started({"memory_mb": 256})
    result = await sandbox.exec(["python3", "-c", "b = bytearray(4 << 30); print('had it')"],
                                timeout_s=120)
    assert result.exit_code == 137, result  # killed by the kernel (SIGKILL), as docker says
    assert "had it" not in result.stdout
    assert (await sandbox.exec(["echo", "alive"])).stdout == "alive\n"
    assert sandbox.record()["limits"]["memory_mb"] == 256


async def test_a_workspace_that_fills_the_disk_is_stopped_and_recorded(
        started: Started) -> None:
    sandbox = await started({"disk_mb": 64})
    result = await sandbox.exec(["sh", "-c", "while true; do head -c 10000000 /dev/zero "
                                 "> fill.$(date +%s%N); done"], timeout_s=300)
    assert result.exit_code is None and not result.timed_out
    assert result.stopped is not None and "disk limit of 64 MB (sandbox.disk_mb)" in \
        result.stopped
    assert result.ending() == f"stopped: {result.stopped}"
    # No more commands run in it; it says so at once, and the record says why.
    again = await sandbox.exec(["echo", "more"])
    assert again.stopped == result.stopped and again.stdout == ""
    assert sandbox.record()["stopped"] == result.stopped


async def test_short_commands_that_fill_the_disk_one_after_another_are_stopped(
        started: Started) -> None:
    # Each exits long before a check while it runs could see it: the check after each, or
    # the next one's, does.
    sandbox = await started({"disk_mb": 40})
    result = await _until(sandbox, lambda r: r.stopped is not None,
                          ["sh", "-c", "head -c 30000000 /dev/zero > f.$(date +%s%N)"],
                          "stopped by the disk limit")
    assert "disk limit of 40 MB" in str(result.stopped)


async def test_past_its_wall_time_every_command_is_stopped(started: Started) -> None:
    sandbox = await started({"wall_s": 3})
    first = await sandbox.exec(["sleep", "30"], timeout_s=60)
    assert first.exit_code is None and not first.timed_out
    assert first.stopped is not None and "wall time of 3 s (sandbox.wall_s)" in first.stopped
    assert first.duration_s < 30
    later = await sandbox.exec(["true"])
    assert later.stopped == first.stopped and later.exit_code is None


# -- images ---------------------------------------------------------------------------------


async def test_an_image_that_does_not_exist_is_one_line_saying_what_to_do(
        started: Started) -> None:
    with pytest.raises(SandboxError) as caught:
        await started(workspace=Workspace(image="interplay-no-such-image:nope"))
    message = str(caught.value)
    assert "'interplay-no-such-image:nope' is not on the Docker daemon" in message
    assert "sandbox.pull = true" in message and "\n" not in message
    assert not labelled("interplay.test", MARK)


def _dockerfile(folder: Path, *lines: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text("\n".join(["FROM interplay-base:bookworm", *lines]) + "\n")
    return str(folder / "Dockerfile")


async def test_a_dockerfile_that_does_not_build_says_its_last_lines(
        started: Started, tmp_path: Path) -> None:
    path = _dockerfile(tmp_path / "bad", f"RUN echo preparing-{MARK} && echo broken-{MARK} "
                       "&& exit 3")
    with pytest.raises(SandboxError) as caught:
        await started(workspace=Workspace(dockerfile=path))
    message = str(caught.value)
    assert message.startswith(f"Dockerfile {path!r} does not build")
    assert "returned a non-zero code: 3" in message
    assert f"broken-{MARK}" in message and "\n" not in message


async def test_a_build_past_its_time_limit_is_cancelled_and_leaves_no_image(
        started: Started, tmp_path: Path) -> None:
    path = _dockerfile(tmp_path / "slow", f"RUN echo slow-{MARK} && sleep 30")
    with pytest.raises(SandboxError) as caught:
        await started(workspace=Workspace(dockerfile=path, build_timeout_s=2))
    assert str(caught.value) == (f"Dockerfile {path!r} did not build within 2 s (the task's "
                                 "workspace build_timeout_s)")
    # The daemon cancels the build once its stream is closed: its step's container goes
    # (it would run for 30 s), and no image is tagged with the folder's content.
    client = api()
    try:
        for _ in range(100):
            steps = [c for c in client.containers(all=True)
                     if f"slow-{MARK}" in str(c.get("Command"))]
            if not steps:
                break
            await asyncio.sleep(0.1)
        assert not steps, steps
        digest = context_digest(tmp_path / "slow", "Dockerfile")
        assert not client.images(name=f"{BUILT_REPOSITORY}:{digest[:20]}")
    finally:
        client.close()


async def test_a_dockerfile_is_built_once_per_content_of_its_folder(
        started: Started, tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    path = _dockerfile(context, "COPY data.txt /data.txt", f"LABEL test={MARK}",
                       "RUN date +%s%N > /built-at")
    (context / "data.txt").write_text("one")
    client = api()
    boxes: list[DockerSandbox] = []
    try:
        first = await started(workspace=Workspace(dockerfile=path))
        built_at = await first.read_file("/built-at")
        assert first.image is not None and first.image.startswith(f"{BUILT_REPOSITORY}:")
        # The same folder again: the image it built, not a new build.
        second = await started(workspace=Workspace(dockerfile=path))
        boxes += [first, second]
        assert second.image == first.image
        assert await second.read_file("/built-at") == built_at
        # A file of the folder changed: a new image, with the new file.
        (context / "data.txt").write_text("two")
        third = await started(workspace=Workspace(dockerfile=path))
        boxes.append(third)
        assert third.image != first.image
        assert await third.read_file("/data.txt") == b"two"
        assert await third.read_file("/built-at") != built_at
    finally:
        for box in boxes:
            await box.stop()
        for image in client.images(filters={"label": f"test={MARK}"}):
            client.remove_image(image["Id"], force=True)
        client.close()


# -- the daemon and the container -----------------------------------------------------------


def test_a_daemon_that_is_not_there_is_one_line_when_the_run_starts(tmp_path: Path) -> None:
    missing = f"unix://{tmp_path}/no-docker.sock"
    problems = DockerSandbox({"host": missing}).check()
    assert len(problems) == 1 and "\n" not in problems[0]
    assert f"cannot reach the Docker daemon at {missing}" in problems[0]
    assert "no such socket" in problems[0]
    assert "dockerd --bridge=none" in problems[0] and "sandbox.host" in problems[0]


async def test_a_container_that_died_is_a_clear_error_and_its_sandbox_still_stops(
        started: Started) -> None:
    sandbox = await started()
    container = labelled("interplay.test", MARK)[0]["Id"]
    client = api()
    try:
        client.kill(container)
    finally:
        client.close()
    with pytest.raises(SandboxError, match="the sandbox's container has stopped"):
        await sandbox.exec(["true"])
    await sandbox.stop()
    assert not labelled("interplay.test", MARK)


async def test_a_container_removed_under_it_is_a_clear_error(started: Started) -> None:
    sandbox = await started()
    remove_labelled("interplay.test", MARK)
    with pytest.raises(SandboxError, match="the sandbox's container is gone"):
        await sandbox.exec(["true"])
    with pytest.raises(SandboxError, match="the sandbox's container is gone"):
        await sandbox.read_file("/etc/hostname")
    await sandbox.stop()


async def test_files_put_in_belong_to_the_sandboxs_user(started: Started, tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "mod.py").write_text("x = 1\n")
    sandbox = await started({"user": "nobody"})
    await sandbox.put(folder, "repo")
    await sandbox.write_file("deep/down/notes.txt", "a\n")
    whoami = await sandbox.exec(["id", "-un"])
    assert whoami.stdout.strip() == "nobody"
    # What was put in, the folders made for it and the working folder itself: all writable.
    wrote = await sandbox.exec(["sh", "-c", "echo y >> repo/pkg/mod.py && touch repo/pkg/new.py"
                                " && echo b >> deep/down/notes.txt && touch deep/down/more"
                                " && touch here"])
    assert wrote.ok, wrote.output()
    owners = await sandbox.exec(["stat", "-c", "%U %n", ".", "repo", "repo/pkg/mod.py", "deep",
                                 "deep/down", "deep/down/notes.txt"])
    assert {line.split()[0] for line in owners.stdout.splitlines()} == {"nobody"}


async def test_many_sandboxes_at_once(started: Started) -> None:
    boxes = await asyncio.gather(*(started({"cpus": 0.25, "memory_mb": 64}) for _ in range(12)))
    assert len({b.record()["container"] for b in boxes}) == 12
    results = await asyncio.gather(*(b.exec(["sh", "-c", f"echo {i}; sleep 0.5; echo {i}"])
                                     for i, b in enumerate(boxes) for _ in range(2)))
    assert [r.stdout for r in results] == [f"{i}\n{i}\n" for i in range(12) for _ in range(2)]
    await asyncio.gather(*(b.stop() for b in boxes))
    assert not labelled("interplay.test", MARK)


def test_one_dockerfile_built_by_episodes_at_once_in_one_event_loop_then_another(
        tmp_path: Path) -> None:
    # As a trainer calling the rollout API does: asyncio.run after asyncio.run, each with
    # episodes of the same task starting at once.
    path = _dockerfile(tmp_path / "ctx", f"LABEL test={MARK}")

    async def episodes() -> set[str | None]:
        boxes = [DockerSandbox({}) for _ in range(3)]
        try:
            await asyncio.gather(*(b.start(SandboxPlan(workspace=Workspace(dockerfile=path),
                                                       labels={"test": MARK}))
                                   for b in boxes))
            return {b.image for b in boxes}
        finally:
            for b in boxes:
                await b.stop()

    client = api()
    try:
        first = asyncio.run(episodes())
        assert asyncio.run(episodes()) == first and len(first) == 1
    finally:
        remove_labelled("interplay.test", MARK)
        for image in client.images(filters={"label": f"test={MARK}"}):
            client.remove_image(image["Id"], force=True)
        client.close()


def test_the_reapers_cleanup_removes_every_container_of_its_owner_and_no_other() -> None:
    # What the reaper runs once a run is gone: only the standard library, given the owner.
    owner, other = f"{MARK}-owner", f"{MARK}-other"
    client = api()
    try:
        for tag in [owner] * 12 + [other]:
            made = client.create_container(
                BASE_IMAGE, command=["sleep", "infinity"],
                labels={"interplay.owner": tag, "interplay.test": MARK},
                host_config=client.create_host_config(network_mode="none", init=True))
            client.start(made["Id"])
        done = subprocess.run([sys.executable, "-I", str(CLEANUP), "docker", DOCKER_HOST,
                               owner], capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert not labelled("interplay.owner", owner)
        assert len(labelled("interplay.owner", other)) == 1
    finally:
        remove_labelled("interplay.test", MARK)
        client.close()
