"""The Sandbox contract as every backend keeps it, against the real thing: the docker backend
on this machine's Docker daemon (skipped, saying why, where none answers), Podman's
Docker-compatible socket where there is one, and the local backend.

These tests are about commands and files, not lifecycle: each backend's tests share one
started sandbox (its module's), and each test leaves it usable for the next. What a command
leaves running is looked for from this machine (a container's processes are this machine's
too), by a marker of the test's own in its command line or environment.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sandbox_support import WHY_NO_DOCKER, remove_labelled, wait_for

from interplay.builtin_sandboxes.docker import DockerSandbox
from interplay.builtin_sandboxes.local import LocalSandbox
from interplay.contracts.sandbox import NotReachable, Sandbox, SandboxError, SandboxPlan
from interplay.testing import mentioning
from interplay.values.records import Workspace

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

MARK = f"contract-{secrets.token_hex(4)}"
#: Podman's Docker-compatible socket, where one is served (``podman system service``).
PODMAN_HOST = os.environ.get("INTERPLAY_TEST_PODMAN_HOST") or "unix:///run/podman/podman.sock"


def _podman_missing() -> str | None:
    path = PODMAN_HOST.removeprefix("unix://")
    if not PODMAN_HOST.startswith("unix://") or not os.path.exists(path):
        return (f"no Podman socket at {PODMAN_HOST} (`podman system service --time=0 "
                f"{PODMAN_HOST}` serves one; INTERPLAY_TEST_PODMAN_HOST names another)")
    return WHY_NO_DOCKER and f"the Docker SDK or base image is missing: {WHY_NO_DOCKER}"


def _started(kind: str, tmp: Path) -> Sandbox:
    if kind == "local":
        return LocalSandbox({"root": str(tmp)})
    why = WHY_NO_DOCKER if kind == "docker" else _podman_missing()
    if why is not None:
        pytest.skip(why)
    settings: dict[str, Any] = {"memory_mb": 512, "pids": 256}
    if kind == "podman":
        settings["host"] = PODMAN_HOST
    return DockerSandbox(settings)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["docker", "podman",
                                                                     "local"])
async def box(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Sandbox]:
    sandbox = _started(request.param, tmp_path_factory.mktemp("local-sandboxes"))
    plan = SandboxPlan(workspace=Workspace(env={"FROM_TASK": "task value"}),
                       labels={"test": MARK})
    await sandbox.start(plan)
    try:
        yield sandbox
    finally:
        await sandbox.stop()
        if request.param != "local" and WHY_NO_DOCKER is None:
            remove_labelled("interplay.test", MARK)


def _kind(box: Sandbox) -> str:
    return box.name


def _marker() -> str:
    """A number no other process's command line holds: ``sleep MARKER`` is findable."""
    return f"{300 + secrets.randbelow(10000)}.{secrets.randbelow(10**6):06d}"


def _none_left(marker: str) -> None:
    wait_for(lambda: not mentioning(marker), f"the processes holding {marker} to end", 15)


# -- exec: how a command ended ------------------------------------------------------------------


async def test_exit_codes_are_the_commands_own(box: Sandbox) -> None:
    assert (await box.exec(["true"])).exit_code == 0
    assert (await box.exec(["sh", "-c", "exit 3"])).exit_code == 3
    # Ended by a signal: 128 + N, as a shell reports it.
    assert (await box.exec(["sh", "-c", "kill -KILL $$"])).exit_code == 137
    assert (await box.exec(["sh", "-c", "kill -TERM $$"])).exit_code == 143
    ok = await box.exec(["true"])
    assert ok.ok and not ok.timed_out and ok.stopped is None and ok.ending() == "exit code 0"


async def test_a_program_that_cannot_start_is_127_or_126_naming_it(box: Sandbox) -> None:
    result = await box.exec(["no-such-program-here", "arg"])
    assert result.exit_code == 127
    assert "no-such-program-here" in result.stderr
    assert result.stdout == ""
    # One that is there but cannot be run: 126, as a shell says it.
    await box.write_file("not-a-program.sh", "echo hi\n", mode=0o644)
    refused = await box.exec(["./not-a-program.sh"])
    assert refused.exit_code == 126 and "not-a-program.sh" in refused.stderr
    assert "ermission denied" in refused.stderr
    # A working folder that is not there is not a program that is not there.
    elsewhere = await box.exec(["pwd"], cwd="no/such/folder")
    assert elsewhere.exit_code == 126 and elsewhere.stdout == ""
    assert elsewhere.stderr.startswith(f"cannot run pwd in {box.workdir}/no/such/folder: no such")
    if _kind(box) == "docker":
        nobody = await box.exec(["true"], user="no-such-user")
        assert nobody.exit_code == 126 and "unable to find user no-such-user" in nobody.stderr


async def test_stdin_is_fed_and_closed(box: Sandbox) -> None:
    data = bytes(range(256)) * 8192  # 2 MB, every byte value
    result = await box.exec(["sh", "-c", "wc -c; echo done >&2"], stdin=data)
    assert result.stdout.strip() == str(len(data))
    assert result.stderr == "done\n"
    echoed = await box.exec(["cat"], stdin="héllo\n")
    assert echoed.stdout == "héllo\n"
    # None given: the program reads end-of-file at once (not a terminal left open).
    assert (await box.exec(["cat"], timeout_s=30)).stdout == ""
    # A program that never reads it, or reads only some, ends all the same.
    assert (await box.exec(["true"], stdin=data, timeout_s=30)).exit_code == 0
    assert (await box.exec(["head", "-c", "3"], stdin=data * 4, timeout_s=30)).stdout == \
        "\x00\x01\x02"
    # One that writes as it reads: its stdin is fed while its output is read.
    echoed_back = await box.exec(["cat"], stdin=data * 4, timeout_s=30, output_bytes=100)
    assert echoed_back.exit_code == 0 and echoed_back.stdout_cut == len(data) * 4 - 100


async def test_env_is_the_workspaces_and_the_commands_not_interplays(box: Sandbox,
                                                                    monkeypatch: Any) -> None:
    monkeypatch.setenv("INTERPLAY_TEST_KEY", "sk-must-not-be-seen")
    result = await box.exec(["sh", "-c", "echo \"$FROM_TASK|$MINE|$INTERPLAY_TEST_KEY\""],
                            env={"MINE": "mine"})
    assert result.stdout == "task value|mine|\n"
    over = await box.exec(["sh", "-c", "echo $FROM_TASK"], env={"FROM_TASK": "over"})
    assert over.stdout == "over\n"


async def test_cwd_is_the_workdir_unless_told(box: Sandbox) -> None:
    await box.exec(["mkdir", "-p", "sub/deeper"])
    assert (await box.exec(["pwd"])).stdout.strip() == box.workdir
    assert (await box.exec(["pwd"], cwd="sub/deeper")).stdout.strip() == \
        f"{box.workdir}/sub/deeper"
    assert (await box.exec(["pwd"], cwd="/")).stdout.strip() == "/"


async def test_user_runs_the_command_as_that_user(box: Sandbox) -> None:
    if _kind(box) == "local":
        with pytest.raises(SandboxError, match="runs commands as"):
            await box.exec(["id", "-u"], user="no-such-user-here")
        assert (await box.exec(["id", "-u"], user=str(os.getuid()))).stdout.strip() == \
            str(os.getuid())
        return
    assert (await box.exec(["id", "-u"], user="nobody")).stdout.strip() == "65534"
    assert (await box.exec(["id", "-u"], user="1234")).stdout.strip() == "1234"
    assert (await box.exec(["id", "-u"])).stdout.strip() == "0"


# -- exec: bounded output ---------------------------------------------------------------------


async def test_output_is_bounded_each_stream_to_its_bound_saying_what_was_cut(
        box: Sandbox) -> None:
    script = ("python3 -c \"import sys; sys.stdout.write('A' * 500 + 'B' * 999000 + 'C' * 500);"
              " sys.stderr.write('e' * 5000)\"")
    result = await box.exec(["sh", "-c", script], output_bytes=1000)
    assert result.exit_code == 0
    assert result.stdout_cut == 1_000_000 - 1000
    assert result.stdout.startswith("A" * 500) and result.stdout.endswith("C" * 500)
    assert f"[... {result.stdout_cut} bytes left out ...]" in result.stdout
    assert result.stderr_cut == 4000 and result.stderr.startswith("e" * 500)
    whole = await box.exec(["sh", "-c", "printf '%s' abc; printf '%s' def >&2"])
    assert (whole.stdout, whole.stderr, whole.stdout_cut, whole.stderr_cut) == \
        ("abc", "def", 0, 0)


async def test_endless_output_is_stopped_at_its_time_bounded_and_the_sandbox_goes_on(
        box: Sandbox) -> None:
    result = await box.exec(["yes"], timeout_s=2, output_bytes=4096)
    assert result.timed_out and result.exit_code is None
    assert result.ending().startswith("timed out after")
    assert result.stdout_cut > 0 and len(result.stdout) < 4096 + 100
    assert result.stdout.startswith("y\ny\n") and "bytes left out" in result.stdout
    assert (await box.exec(["echo", "still here"])).stdout == "still here\n"


# -- exec: its end, and what it leaves ------------------------------------------------------


async def test_a_command_that_never_ends_times_out_and_nothing_of_it_is_left(
        box: Sandbox) -> None:
    marker = _marker()
    result = await box.exec(["sh", "-c", f"sleep {marker}; echo never"], timeout_s=1)
    assert result.timed_out and result.exit_code is None and result.stdout == ""
    _none_left(marker)


async def test_the_end_is_the_commands_exit_and_what_it_left_running_is_ended(
        box: Sandbox) -> None:
    marker = _marker()
    # A background child holding the output, one in a session of its own, one that
    # redirected its output: the command's own exit ends the exec, and they go with it.
    script = (f"sleep {marker} & setsid sleep {marker} & "
              f"sleep {marker} >/dev/null 2>&1 & echo started")
    result = await box.exec(["sh", "-c", script], timeout_s=60)
    assert result.exit_code == 0 and result.stdout == "started\n" and not result.timed_out
    _none_left(marker)


async def test_a_command_that_closed_its_output_is_waited_for_until_it_exits(
        box: Sandbox) -> None:
    await box.exec(["rm", "-f", "closed.txt"])
    result = await box.exec(["sh", "-c", "exec >/dev/null 2>&1; sleep 1; echo x > closed.txt"],
                            timeout_s=60)
    assert result.exit_code == 0
    assert await box.read_file("closed.txt") == b"x\n"


async def test_commands_run_at_once_in_one_sandbox(box: Sandbox) -> None:
    await box.exec(["rm", "-f", "flag-a", "flag-b"])
    # Each waits for the other's file: they finish only if both run at the same time.
    a = box.exec(["sh", "-c", "touch flag-a; while [ ! -e flag-b ]; do sleep 0.05; done; echo a"],
                 timeout_s=60)
    b = box.exec(["sh", "-c", "touch flag-b; while [ ! -e flag-a ]; do sleep 0.05; done; echo b"],
                 timeout_s=60)
    many = [box.exec(["sh", "-c", f"echo {i}; echo err{i} >&2"]) for i in range(16)]
    first, second, *rest = await asyncio.gather(a, b, *many)
    assert (first.stdout, second.stdout) == ("a\n", "b\n")
    assert [(r.stdout, r.stderr) for r in rest] == [(f"{i}\n", f"err{i}\n") for i in range(16)]


async def test_a_cancelled_exec_ends_its_command_and_the_sandbox_goes_on(box: Sandbox) -> None:
    marker = _marker()
    task = asyncio.ensure_future(box.exec(["sleep", marker]))
    wait_until = asyncio.get_running_loop().time() + 30
    while not mentioning(marker):
        assert asyncio.get_running_loop().time() < wait_until, "the command never started"
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _none_left(marker)
    assert (await box.exec(["echo", "on"])).stdout == "on\n"


# -- files ----------------------------------------------------------------------------------


async def test_write_then_read_a_file_any_bytes_its_folders_made(box: Sandbox) -> None:
    data = bytes(range(256)) * 40
    await box.write_file("made/on/the/way/f.bin", data)
    assert await box.read_file("made/on/the/way/f.bin") == data
    await box.write_file(f"{box.workdir}/abs.txt", "text ü")
    assert await box.read_file("abs.txt") == "text ü".encode()
    await box.write_file("run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert (await box.exec(["./run.sh"])).stdout == "ran\n"
    await box.write_file("run.sh", "#!/bin/sh\necho replaced\n", mode=0o755)
    assert (await box.exec(["./run.sh"])).stdout == "replaced\n"


async def test_reading_what_is_not_a_file(box: Sandbox) -> None:
    with pytest.raises(FileNotFoundError):
        await box.read_file("no/such/file")
    await box.exec(["mkdir", "-p", "a-folder"])
    with pytest.raises(IsADirectoryError):
        await box.read_file("a-folder")


async def test_a_file_larger_than_asked_is_refused_without_reading_it_whole(
        box: Sandbox) -> None:
    await box.exec(["sh", "-c", "head -c 50000000 /dev/zero > big.bin"])
    with pytest.raises(SandboxError, match="more than the 1000"):
        await box.read_file("big.bin", max_bytes=1000)
    assert len(await box.read_file("big.bin", max_bytes=50_000_000)) == 50_000_000
    await box.exec(["rm", "big.bin"])


async def test_a_symlink_is_read_through(box: Sandbox) -> None:
    await box.write_file("target.txt", "pointed at")
    await box.exec(["ln", "-sfn", "target.txt", "rel-link"])
    await box.exec(["ln", "-sfn", f"{box.workdir}/target.txt", "abs-link"])
    await box.exec(["ln", "-sfn", "rel-link", "link-to-link"])
    for link in ("rel-link", "abs-link", "link-to-link"):
        assert await box.read_file(link) == b"pointed at", link
    await box.exec(["ln", "-sfn", "nowhere", "dangling"])
    with pytest.raises(FileNotFoundError):
        await box.read_file("dangling")


def _tree(root: Path) -> dict[str, Any]:
    """What a folder holds, as a comparison sees it: files (bytes, executable bit), links
    (their targets, never followed) and folders."""
    out: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = ("dir",)
        else:
            out[rel] = ("file", path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR))
    return out


def _sample_folder(root: Path) -> Path:
    (root / "pkg" / "deep" / "er").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "pkg" / "a.py").write_text("print('a')\n")
    (root / "pkg" / "deep" / "er" / "b.bin").write_bytes(os.urandom(70_000))
    tool = root / "tool.sh"
    tool.write_text("#!/bin/sh\necho tool\n")
    tool.chmod(0o755)
    (root / "rel-link").symlink_to("pkg/a.py")
    (root / "abs-link").symlink_to("/usr/bin/python3")  # as a virtualenv's python is
    (root / "dir-link").symlink_to("pkg")
    (root / "dangling").symlink_to("no/such/thing")
    return root


async def test_put_then_get_a_folder_keeps_links_modes_and_empty_folders(
        box: Sandbox, tmp_path: Path) -> None:
    source = _sample_folder(tmp_path / "source")
    await box.put(source, "copied")
    listed = await box.exec(["sh", "-c", "cd copied && ./tool.sh && readlink abs-link && "
                             "cat dir-link/a.py"])
    assert listed.stdout == "tool\n/usr/bin/python3\nprint('a')\n", listed.output()
    back = tmp_path / "back"
    await box.get("copied", back)
    assert _tree(back) == _tree(source)
    # Into a folder that is there already: its contents are added to.
    await box.get("copied/pkg", back / "pkg")
    assert _tree(back) == _tree(source)


async def test_put_and_get_one_file(box: Sandbox, tmp_path: Path) -> None:
    one = tmp_path / "one.txt"
    one.write_text("single")
    await box.put(one, "single/one.txt")
    assert await box.read_file("single/one.txt") == b"single"
    await box.get("single/one.txt", tmp_path / "out" / "again.txt")
    assert (tmp_path / "out" / "again.txt").read_text() == "single"
    # A link got by its own path is read through, as a file read is.
    await box.exec(["ln", "-sfn", "one.txt", "single/link"])
    await box.get("single/link", tmp_path / "through.txt")
    assert (tmp_path / "through.txt").read_text() == "single"


async def test_get_of_what_is_not_there_or_is_too_large(box: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await box.get("no/such/path", tmp_path / "x")
    await box.exec(["sh", "-c", "mkdir -p heavy && head -c 3000000 /dev/urandom > heavy/f"])
    with pytest.raises(SandboxError, match="1000000"):
        await box.get("heavy", tmp_path / "heavy", max_bytes=1_000_000)
    await box.exec(["rm", "-r", "heavy"])


async def test_a_large_folder_goes_in_and_out(box: Sandbox, tmp_path: Path) -> None:
    source = tmp_path / "large"
    for i in range(20):
        folder = source / f"d{i:02d}"
        folder.mkdir(parents=True)
        for j in range(40):
            (folder / f"f{j:02d}.txt").write_text(f"{i} {j}\n" * 20)
        (folder / "blob").write_bytes(os.urandom(1_000_000))
    await box.put(source, "large")
    count = await box.exec(["sh", "-c", "find large -type f | wc -l; du -sk large | cut -f1"])
    files, kb = count.stdout.split()
    assert int(files) == 20 * 41 and int(kb) >= 20_000
    back = tmp_path / "large-back"
    await box.get("large", back)
    assert _tree(back) == _tree(source)
    await box.exec(["rm", "-r", "large"])


# -- the network ----------------------------------------------------------------------------


async def test_reach(box: Sandbox) -> None:
    url = "http://127.0.0.1:5/v1"
    if _kind(box) == "local":
        assert await box.reach(url) == url  # this machine's network: the same address
        return
    # Started with no program inside that needs the model: the network is none.
    assert box.record()["network"] == "none"
    with pytest.raises(NotReachable, match=r"sandbox\.network"):
        await box.reach(url)
