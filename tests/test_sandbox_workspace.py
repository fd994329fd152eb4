"""A task's workspace made ready in each backend and read back (interplay.run.workspace, through
the contract alone): its repository at a commit, folder, files and setup in place before the
agent; what the episode changed listed and diffed, links included (a virtualenv's absolute
ones too), a repository's own .git left out; a setup that fails said in one line with the
sandbox removed. Against the real daemon (skipped, saying why, where none answers) and the
local backend."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import WHY_NO_DOCKER, labelled, remove_labelled

from interplay.builtin_sandboxes.docker import DockerSandbox
from interplay.builtin_sandboxes.local import LocalSandbox
from interplay.contracts.sandbox import Sandbox, SandboxError
from interplay.run import workspace
from interplay.values.records import Repo, Workspace

pytestmark = pytest.mark.slow

MARK = f"workspace-{secrets.token_hex(4)}"


@pytest.fixture(params=["docker", "local"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "docker":
        if WHY_NO_DOCKER is not None:
            pytest.skip(WHY_NO_DOCKER)
        yield DockerSandbox, {}
        remove_labelled("interplay.test", MARK)
    else:
        yield LocalSandbox, {"root": str(tmp_path / "local")}


def _repo(root: Path) -> tuple[str, str]:
    """A git repository of this machine with two commits; its path and the first's hash."""
    root.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=root, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git("add", ".")
    git("commit", "-q", "-m", "first")
    first = git("rev-parse", "HEAD").strip()
    (root / "later.txt").write_text("a later commit's file\n")
    git("add", ".")
    git("commit", "-q", "-m", "second")
    return str(root), first


def _folder(root: Path) -> str:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "util.py").write_text("X = 1\n")
    (root / "doomed.txt").write_text("to be deleted\n")
    (root / "lib-link").symlink_to("lib")
    return str(root)


async def test_a_workspace_made_ready_then_what_the_episode_changed(
        backend: Any, tmp_path: Path) -> None:
    cls, settings = backend
    url, first = _repo(tmp_path / "repo")
    ws = Workspace(repo=Repo(url=url, commit=first), folder=_folder(tmp_path / "folder"),
                   files={"NOTES.md": "Fix add.\n"},
                   setup=["echo ready > from-setup.txt", "ln -s /usr/bin/python3 py"],
                   env={"TASK_VAR": "v"})
    ready = workspace.made(cls, settings)
    await workspace.prepare(ready, ws, [], {"test": MARK})
    sandbox: Sandbox = ready.sandbox
    try:
        record = ready.record
        assert record.error is None and record.workdir == sandbox.workdir
        assert [c.exit_code for c in record.setup] == [0, 0]
        listed = await sandbox.exec(["sh", "-c", "ls -A | sort; cat from-setup.txt; "
                                     "echo $TASK_VAR; git log --format=%s"])
        assert listed.stdout.split() == [".git", "NOTES.md", "calc.py", "doomed.txt",
                                         "from-setup.txt", "lib", "lib-link", "py",
                                         "ready", "v", "first"], listed.output()
        # The agent's work: a fix, a file added and one deleted, links made and changed.
        await sandbox.write_file("calc.py", "def add(a, b):\n    return a + b\n")
        await sandbox.exec(["sh", "-c", "rm doomed.txt && echo new > lib/new.py && "
                            "ln -sfn /usr/bin/python3.11 py && ln -s lib lib-2 && "
                            "git add -A >/dev/null 2>&1"])
        changes = await workspace.changes(ready)
        assert changes is not None
        assert {(c.path, c.status) for c in changes.files} == {
            ("calc.py", "modified"), ("doomed.txt", "deleted"), ("lib/new.py", "added"),
            ("py", "modified"), ("lib-2", "added")}
        assert "-    return a - b\n+    return a + b\n" in changes.diff
        assert "-> /usr/bin/python3.11" in changes.diff and ".git" not in changes.diff
        assert changes.diff_cut == 0 and changes.files_cut == 0
        # Read once: the same record after.
        assert await workspace.changes(ready) is changes
    finally:
        await workspace.stop(ready)
    assert not ready.scratch.exists()
    if cls is DockerSandbox:
        assert not labelled("interplay.test", MARK)


async def test_a_setup_that_fails_says_which_in_one_line_and_the_sandbox_goes(
        backend: Any) -> None:
    cls, settings = backend
    ws = Workspace(setup=["true", "echo first; echo 'the reason it failed' >&2; exit 4",
                          "echo never"])
    ready = workspace.made(cls, settings)
    with pytest.raises(SandboxError) as caught:
        await workspace.prepare(ready, ws, [], {"test": MARK})
    message = str(caught.value)
    assert "setup command" in message and "exit code 4" in message
    assert message.endswith(": the reason it failed") and "\n" not in message
    assert ready.record.error == message
    assert [c.exit_code for c in ready.record.setup] == [0, 4]
    assert not ready.scratch.exists()
    if cls is DockerSandbox:
        assert not labelled("interplay.test", MARK)
