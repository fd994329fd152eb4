"""An episode's sandbox made ready and read back: started with what the task brings (its
repository, folder and files put in, its setup commands run), the workspace's state taken
then, what the episode changed in it computed once its steps are done, and the sandbox
removed after scoring. Every backend is reached through the contract alone
(:class:`interplay.contracts.sandbox.Sandbox`), so this works the same on any of them.

What changed is found by copying the workspace out twice (after setup, after the steps) and
comparing the copies file by file on this machine: it needs nothing inside (no git, no
shell), and the diff of the text files is bounded, as the list of files is.

This module owns those steps; it must not decide when they happen (the episode does:
:class:`~interplay.run.episode.LiveEpisodeContext`) nor run a command other than a task's setup.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from interplay.contracts.sandbox import (
    OUTPUT_BYTES,
    ExecResult,
    Mount,
    Sandbox,
    SandboxError,
    SandboxNeeds,
    SandboxPlan,
    bounded_text,
)
from interplay.log import get_logger
from interplay.values.records import (
    FileChange,
    Repo,
    SandboxRecord,
    Workspace,
    WorkspaceChanges,
)

log = get_logger("interplay.run.workspace")

#: Seconds each of a task's setup commands may take.
SETUP_TIMEOUT_S = 900.0
#: The most a workspace copied out for comparison may hold.
SNAPSHOT_BYTES = 512 * 1024 * 1024
#: Changed files listed at most.
FILES_KEPT = 200
#: Bytes of unified diff kept (its middle left out past it).
DIFF_BYTES = 16 * 1024
#: Text files larger than this are listed, not diffed.
DIFF_FILE_BYTES = 256 * 1024
#: Folders of a workspace left out of its changes (a repository's own store).
SKIPPED = (".git",)


@attrs.frozen
class Entry:
    """One file of a workspace copy: its size and content hash."""

    size: int
    digest: str


class Ready:
    """An episode's started sandbox and what is known of it: its record, and the copy of its
    workspace taken after setup (for the comparison at the end)."""

    def __init__(self, sandbox: Sandbox, record: SandboxRecord, scratch: Path) -> None:
        self.sandbox = sandbox
        self.record = record
        self.scratch = scratch
        self.before: dict[str, Entry] | None = None
        self.compared = False


class AsUser(Sandbox):
    """The episode's sandbox as the agent's seat reaches it when the task names a
    :attr:`~interplay.values.records.Workspace.user`: a command that names no user runs as
    that one; everything else is the sandbox's own (its backend gives the files it puts in to
    the same user)."""

    def __init__(self, sandbox: Sandbox, user: str) -> None:
        self.sandbox = sandbox
        self._user = user
        self.config = sandbox.config
        # The backend's class facts, seen through the view (they are class variables there).
        vars(self).update(name=sandbox.name, isolated=sandbox.isolated)

    @property
    def workdir(self) -> str:
        return self.sandbox.workdir

    @property
    def image(self) -> str | None:
        return self.sandbox.image

    @property
    def user(self) -> str | None:
        return self._user

    async def start(self, plan: SandboxPlan) -> None:
        raise SandboxError("the agent's view of a sandbox cannot start it: the run does")

    async def exec(self, argv: Sequence[str], *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                   timeout_s: float | None = None, user: str | None = None,
                   output_bytes: int = OUTPUT_BYTES,
                   on_stdout: Callable[[bytes], None] | None = None) -> ExecResult:
        return await self.sandbox.exec(argv, cwd=cwd, env=env, stdin=stdin,
                                       timeout_s=timeout_s, user=user or self._user,
                                       output_bytes=output_bytes, on_stdout=on_stdout)

    async def read_file(self, path: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes:
        return await self.sandbox.read_file(path, max_bytes=max_bytes)

    async def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        await self.sandbox.write_file(path, data, mode=mode)

    async def put(self, source: Path, target: str) -> None:
        await self.sandbox.put(source, target)

    async def get(self, source: str, target: Path, *,
                  max_bytes: int = 1024 * 1024 * 1024) -> None:
        await self.sandbox.get(source, target, max_bytes=max_bytes)

    async def reach(self, url: str) -> str:
        return await self.sandbox.reach(url)

    async def stop(self) -> None:
        """Nothing: the run stops the sandbox after the verifiers."""

    def inside(self, mount: Mount) -> str:
        return self.sandbox.inside(mount)

    def record(self) -> dict[str, Any]:
        return self.sandbox.record()


def made(cls: type[Sandbox], config: Any) -> Ready:
    """A sandbox of ``cls`` for one episode, not started yet."""
    scratch = Path(tempfile.mkdtemp(prefix="interplay-workspace-"))
    return Ready(cls(config), SandboxRecord(kind=cls.name), scratch)


async def prepare(ready: Ready, workspace: Workspace | None, needs: Sequence[SandboxNeeds],
                  labels: Mapping[str, str]) -> None:
    """Start ``ready``'s sandbox with the task's ``workspace`` in place and its setup run;
    SandboxError (kept on the record, the sandbox removed) when any of it fails."""
    ws = workspace or Workspace()
    mounts = tuple(dict.fromkeys(m for n in needs for m in n.mounts))
    plan = SandboxPlan(workspace=ws, mounts=mounts, reach=any(n.reach for n in needs),
                       labels=dict(labels))
    sandbox, record, scratch = ready.sandbox, ready.record, ready.scratch
    t0 = time.monotonic()
    try:
        await sandbox.start(plan)
        record.image, record.workdir = sandbox.image, sandbox.workdir
        await _bring(sandbox, ws, scratch)
        record.start_s = round(time.monotonic() - t0, 3)
        t1 = time.monotonic()
        for command in ws.setup:
            result = await sandbox.exec(["bash", "-c", command], timeout_s=SETUP_TIMEOUT_S)
            record.setup.append(result.record(command))
            if not result.ok:
                lines = [ln for ln in result.output().splitlines() if ln.strip()]
                last = f": {lines[-1].strip()[:300]}" if lines else ""
                raise SandboxError(f"the task's setup command {command[:120]!r} failed "
                                   f"({result.ending()}){last}")
        record.setup_s = round(time.monotonic() - t1, 3)
        ready.before = await _snapshot(sandbox, scratch / "before")
    except SandboxError as exc:
        record.error = str(exc)
        await asyncio.shield(stop(ready))
        raise
    except asyncio.CancelledError:
        record.error = "cancelled while it started"
        await asyncio.shield(stop(ready))
        raise
    except Exception as exc:  # a file that cannot be read, a backend's own failure
        record.error = f"the sandbox could not be made ready: {type(exc).__name__}: {exc}"
        await asyncio.shield(stop(ready))
        raise SandboxError(record.error) from exc
    record.info = sandbox.record()


async def _bring(sandbox: Sandbox, ws: Workspace, scratch: Path) -> None:
    """The task's repository, folder and files into the workspace, in that order."""
    if ws.repo is not None:
        checkout = scratch / "repo"
        await asyncio.to_thread(_checkout, ws.repo, checkout)
        await sandbox.put(checkout, sandbox.workdir)
    if ws.folder is not None:
        folder = Path(ws.folder)
        if not await asyncio.to_thread(folder.is_dir):
            raise SandboxError(f"the task's workspace folder {ws.folder!r} is not a folder")
        await sandbox.put(folder, sandbox.workdir)
    for path, text in ws.files.items():
        await sandbox.write_file(path, text)


def _checkout(repo: Repo, into: Path) -> None:
    """``repo`` cloned into ``into`` on this machine, at its commit."""
    url = repo.url
    local = Path(url).expanduser()
    source = str(local) if local.exists() else url

    def git(*args: str, cwd: Path | None = None) -> None:
        try:
            done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=600,
                                  check=False)
        except FileNotFoundError:
            raise SandboxError("a task's workspace repo needs git on this machine") from None
        except subprocess.TimeoutExpired:
            raise SandboxError(f"git {args[0]} of {url!r} took more than 600 s") from None
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip().splitlines()
            raise SandboxError(f"git {args[0]} of the task's repo {url!r} failed: "
                               f"{why[-1] if why else done.returncode}")

    git("clone", "--quiet", "--no-hardlinks", source, str(into))
    if repo.commit:
        git("-c", "advice.detachedHead=false", "checkout", "--quiet", repo.commit, cwd=into)


async def _snapshot(sandbox: Sandbox, into: Path) -> dict[str, Entry] | None:
    """The workspace copied out to ``into`` and listed; None when it is too large to copy."""
    try:
        await sandbox.get(sandbox.workdir, into, max_bytes=SNAPSHOT_BYTES)
    except SandboxError as exc:
        log.info("workspace.not_compared", reason_code="too_large", error_len=len(str(exc)))
        return None
    return await asyncio.to_thread(_listing, into)


def _listing(root: Path) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    if not root.is_dir():
        return out
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/", 1)[0] in SKIPPED:
            continue
        # A link first: one to a folder is a change of its own, not a folder to skip.
        if path.is_symlink():
            target = str(path.readlink()).encode()
            out[rel] = Entry(len(target), "link:" + hashlib.sha256(target).hexdigest())
            continue
        if path.is_dir():
            continue
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        out[rel] = Entry(path.stat().st_size, h.hexdigest())
    return out


async def changes(ready: Ready) -> WorkspaceChanges | None:
    """What the episode changed in the workspace since setup (once; None when the workspace
    could not be copied out), kept on the record."""
    if ready.compared:
        return ready.record.changes
    ready.compared = True
    if ready.before is None:
        ready.record.changes = WorkspaceChanges(note="the workspace was too large to compare "
                                                f"(over {SNAPSHOT_BYTES >> 20} MB)")
        return ready.record.changes
    after = await _snapshot(ready.sandbox, ready.scratch / "after")
    if after is None:
        ready.record.changes = WorkspaceChanges(note="the workspace grew too large to compare "
                                                f"(over {SNAPSHOT_BYTES >> 20} MB)")
        return ready.record.changes
    found = await asyncio.to_thread(compare, ready.before, after, ready.scratch / "before",
                                    ready.scratch / "after")
    ready.record.changes = found
    return found


def compare(before: Mapping[str, Entry], after: Mapping[str, Entry], old_root: Path,
            new_root: Path) -> WorkspaceChanges:
    """The changes between two listings of a workspace (their copies under the roots): the
    files, then a unified diff of the text ones, both bounded."""
    files: list[FileChange] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old is None and new is not None:
            files.append(FileChange(path, "added", new.size))
        elif new is None and old is not None:
            files.append(FileChange(path, "deleted", old.size))
        elif old is not None and new is not None and old.digest != new.digest:
            files.append(FileChange(path, "modified", new.size))
    parts: list[str] = []
    binary = 0
    for change in files:
        old_text = _text(old_root / change.path) if change.status != "added" else ""
        new_text = _text(new_root / change.path) if change.status != "deleted" else ""
        if old_text is None or new_text is None:
            binary += 1
            parts.append(f"Binary or large file {change.path} {change.status}\n")
            continue
        parts.extend(difflib.unified_diff(
            old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
            fromfile="/dev/null" if change.status == "added" else f"a/{change.path}",
            tofile="/dev/null" if change.status == "deleted" else f"b/{change.path}"))
        if parts and not parts[-1].endswith("\n"):
            parts[-1] += "\n\\ No newline at end of file\n"
    diff, cut = bounded_text("".join(parts), DIFF_BYTES)
    note = f"{binary} binary or large file(s) listed, not diffed" if binary else None
    return WorkspaceChanges(files=files[:FILES_KEPT], files_cut=max(0, len(files) - FILES_KEPT),
                            diff=diff, diff_cut=cut, note=note)


def _text(path: Path) -> str | None:
    """The file's text, or None when it is not text (a NUL, not UTF-8) or too large."""
    try:
        if path.is_symlink():
            return f"-> {path.readlink()}\n"
        if path.stat().st_size > DIFF_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


async def stop(ready: Ready) -> None:
    """Remove the sandbox and the copies (idempotent); the time it took is recorded."""
    t0 = time.monotonic()
    try:
        await ready.sandbox.stop()
    except Exception as exc:  # a backend's failure to stop must not lose the episode
        log.warning("workspace.stop_failed", kind=ready.record.kind,
                    exception_type=type(exc).__name__)
    finally:
        ready.record.stop_s = round(time.monotonic() - t0, 3)
        await asyncio.to_thread(shutil.rmtree, ready.scratch, True)
