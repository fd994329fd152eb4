"""The ``local`` sandbox: a folder of this machine per episode, and no isolation.

Commands run on this machine, as the user interplay runs as, with the episode's folder as
their working folder, an environment of their own (PATH, the locale, ``HOME`` in a folder of
the episode's beside the workspace, the task's variables: not interplay's environment, which
may hold keys), their output bounded and everything they started ended when they end
(:func:`interplay.processes.run_program`). Nothing else is kept from them: they can read and
write any file this user can, reach any address this machine reaches, and see other
processes. For trusted programs, and for machines that are a sandbox already (a CI runner, a
VM of its own). A task that names an image or a Dockerfile is refused when the run starts.

The folders live under one root per process (under ``sandbox.root``, or the system's temp
folder), removed with the episode, and by the reaper when the run is killed.

This module owns the folder's life and the commands run in it; it must not apply a task's
files or setup (the run does, through the contract).
"""

from __future__ import annotations

import asyncio
import errno
import getpass
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay.contracts.sandbox import (
    EXEC_TIMEOUT_S,
    OUTPUT_BYTES,
    BoundedOutput,
    ExecResult,
    Mount,
    Sandbox,
    SandboxError,
    SandboxNeeds,
    SandboxPlan,
)
from interplay.log import get_logger
from interplay.processes import reap_with, run_program
from interplay.values.records import Workspace

log = get_logger("interplay.contracts.sandbox.local")

_CLEANUP = str(Path(__file__).with_name("_cleanup.py"))
#: The variables of interplay's environment a command gets (nothing that may hold a key).
_PASSED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "TMPDIR")


@attrs.define
class LocalConfig:
    """Settings of the local sandbox (a run's ``sandbox.*`` with ``kind = "local"``)."""

    #: Where each episode's folder is made; null: the system's temp folder.
    root: str | None = None
    #: Seconds it may live: past them every command in it is stopped and no more run.
    wall_s: float = attrs.field(default=3600.0, validator=attrs.validators.gt(0))


_roots: dict[str, Path] = {}
_roots_lock = threading.Lock()


def _root(parent: str | None) -> Path:
    """This process's folder of sandboxes under ``parent``, made (and given to the reaper)
    on first use."""
    key = parent or ""
    with _roots_lock:
        found = _roots.get(key)
        if found is None or not found.is_dir():
            if parent is not None:
                Path(parent).expanduser().mkdir(parents=True, exist_ok=True)
            found = Path(tempfile.mkdtemp(prefix="interplay-sandboxes-",
                                          dir=None if parent is None
                                          else str(Path(parent).expanduser())))
            reap_with([sys.executable, "-I", _CLEANUP, "local", str(found)])
            _roots[key] = found
        return found


def _forget_roots() -> None:
    global _roots_lock
    _roots.clear()
    _roots_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_roots)


class LocalSandbox(Sandbox):
    """A folder of this machine per episode; commands run here, without isolation."""

    name = "local"
    Config: ClassVar[type] = LocalConfig
    isolated = False

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._folder: Path | None = None
        self._work: Path | None = None
        self._env: dict[str, str] = {}
        self._deadline = 0.0

    def problems(self, workspace: Workspace, needs: SandboxNeeds) -> list[str]:
        for key in ("image", "dockerfile"):
            if getattr(workspace, key) is not None:
                return [f"sandbox 'local' has no images, and a task names its {key} "
                        f"{getattr(workspace, key)!r}: run it with sandbox.kind = \"docker\""]
        if workspace.user not in (None, "", getpass.getuser(), str(os.getuid())):
            return [f"sandbox 'local' runs commands as {getpass.getuser()!r} only, and a task "
                    f"names its workspace user {workspace.user!r}: run it with sandbox.kind = "
                    f"\"docker\", or drop the user"]
        return []

    @property
    def workdir(self) -> str:
        if self._work is None:
            raise SandboxError("the sandbox is not started")
        return str(self._work)

    async def start(self, plan: SandboxPlan) -> None:
        try:
            root = await asyncio.to_thread(_root, self.config.root)
            self._folder = Path(tempfile.mkdtemp(prefix="ep-", dir=root))
            self._work = self._folder / "work"
            self._work.mkdir()
            (self._folder / "home").mkdir()
        except OSError as exc:
            raise SandboxError(f"sandbox 'local': cannot make a folder under "
                               f"{self.config.root or tempfile.gettempdir()!r} "
                               f"({exc.strerror or exc}); set sandbox.root to a writable "
                               f"folder") from None
        self._env = {k: v for k, v in os.environ.items() if k in _PASSED}
        self._env.update({"HOME": str(self._folder / "home"), **plan.workspace.env})
        self._deadline = time.monotonic() + self.config.wall_s

    def _path(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else Path(self.workdir) / p

    async def exec(self, argv: Sequence[str], *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                   timeout_s: float | None = None, user: str | None = None,
                   output_bytes: int = OUTPUT_BYTES,
                   on_stdout: Callable[[bytes], None] | None = None) -> ExecResult:
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("exec takes a non-empty list of strings")
        if user not in (None, "", getpass.getuser(), str(os.getuid())):
            raise SandboxError(f"sandbox 'local' runs commands as {getpass.getuser()!r} "
                               f"only, not {user!r}")
        left = self._deadline - time.monotonic()
        if left <= 0:
            return ExecResult(exit_code=None, stopped=self._wall_spent())
        asked = EXEC_TIMEOUT_S if timeout_s is None else timeout_s
        limit = min(asked, left)
        out, err = BoundedOutput(output_bytes, on_stdout), BoundedOutput(output_bytes)
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        folder = str(self._path(cwd)) if cwd else self.workdir
        t0 = time.monotonic()
        if not await asyncio.to_thread(os.path.isdir, folder):
            # Told apart from a program not found (which a missing folder would read as).
            return ExecResult(exit_code=126, stderr=f"cannot run {argv[0]} in {folder}: no "
                              f"such folder\n")
        try:
            run = await run_program(list(argv), stdin=data, timeout_s=limit, cwd=folder,
                                    env={**self._env, **(env or {})},
                                    on_stdout=out.add, on_stderr=err.add)
        except OSError as exc:
            # As a shell tells it: 127 for a program not found, 126 for one that cannot run.
            code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
            return ExecResult(exit_code=code, stderr=f"{argv[0]}: {exc.strerror or exc}\n",
                              duration_s=time.monotonic() - t0)
        code = run.exit_code
        if code is not None and code < 0:
            code = 128 - code  # a signal, as a shell reports it
        timed_out, stopped = run.timed_out, None
        if timed_out:
            code = None
            if limit < asked:
                timed_out, stopped = False, self._wall_spent()
        return ExecResult(exit_code=code, stdout=out.text(), stderr=err.text(),
                          timed_out=timed_out, stdout_cut=out.cut, stderr_cut=err.cut,
                          duration_s=time.monotonic() - t0, stopped=stopped)

    def _wall_spent(self) -> str:
        return f"the sandbox's wall time of {self.config.wall_s:g} s (sandbox.wall_s) is spent"

    async def read_file(self, path: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes:
        p = self._path(path)

        def read() -> bytes:
            size = p.stat().st_size
            if size > max_bytes:
                raise SandboxError(f"{path} is {size} bytes, more than the {max_bytes} "
                                   f"asked for")
            return p.read_bytes()

        return await asyncio.to_thread(read)

    async def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        p = self._path(path)
        content = data.encode() if isinstance(data, str) else data

        def write() -> None:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content)
            p.chmod(mode)

        await asyncio.to_thread(write)

    async def put(self, source: Path, target: str) -> None:
        dest = self._path(target)

        def copy() -> None:
            if source.is_dir():
                shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest)

        await asyncio.to_thread(copy)

    async def get(self, source: str, target: Path, *,
                  max_bytes: int = 1024 * 1024 * 1024) -> None:
        src = self._path(source)

        def copy() -> None:
            if not src.exists():
                raise FileNotFoundError(source)
            size = sum(p.lstat().st_size for p in src.rglob("*")) if src.is_dir() \
                else src.stat().st_size
            if size > max_bytes:
                raise SandboxError(f"{source} holds more than {max_bytes} bytes")
            if src.is_dir():
                shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)

        await asyncio.to_thread(copy)

    async def reach(self, url: str) -> str:
        return url

    def inside(self, mount: Mount) -> str:
        return mount.source

    async def stop(self) -> None:
        folder, self._folder = self._folder, None
        if folder is not None:
            await asyncio.to_thread(shutil.rmtree, folder, True)
            if folder.exists():
                log.warning("sandbox.folder_left", path=str(folder))

    def record(self) -> dict[str, Any]:
        return {"folder": str(self._folder) if self._folder else None}
