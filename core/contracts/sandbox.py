"""The Sandbox contract: where an agent works.

A sandbox is one place to run commands and keep files, for one episode: started by the run
before the first segment of a seat that works in it, shared by the seats the env puts in it
(its agent's; a user sim stays outside), kept while the verifiers score (they run commands in
it too) and removed after. What it offers, async: :meth:`Sandbox.start` and
:meth:`Sandbox.stop`; :meth:`Sandbox.exec` of an argv (working folder, environment, stdin,
time limit, user), returning an :class:`ExecResult` whose output is bounded and says what was
cut; files read and written one at a time; a folder put in and a path got out; and
:meth:`Sandbox.reach`, the address by which a program inside reaches one of interplay's
servers on this machine (the interception server, the tool gateway), when the sandbox's
network lets it.

Backends are registered by plugins (``register_sandboxes``); ``docker`` and ``local`` are
built in (``interplay.builtin_sandboxes``). A backend's settings are its ``Config`` (a run's
``sandbox.*``); what a task brings is its :class:`~interplay.values.records.Workspace`; what a
seat's harness brings (a program, read-only) is a :class:`Mount` of :class:`SandboxNeeds`.

This module owns the contract and the values it speaks in; it must not start anything, and
it sits below the contexts so that every contract (a harness, a step, a verifier) can be
handed a sandbox.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay.config.loading import settle
from interplay.errors import ErrorType, InterplayError
from interplay.values.records import CommandRecord, Workspace

#: Bytes of each of stdout and stderr an exec keeps unless it asks for another bound.
OUTPUT_BYTES = 64 * 1024
#: The time limit of an exec that names none.
EXEC_TIMEOUT_S = 600.0


class SandboxError(Exception):
    """A sandbox could not do what it was asked: start (an image missing, a Dockerfile that
    does not build, a daemon gone), set up, or run a command at all. Its message is one line
    saying what failed and what to change; the episode ends as a ``sandbox_error``
    (:attr:`error_type`)."""

    #: The error type of an episode this ends (:func:`interplay.errors.error_of`).
    error_type: ClassVar[ErrorType] = ErrorType.SANDBOX_ERROR


class NotReachable(SandboxError, InterplayError):
    """The sandbox's network lets nothing inside reach the address asked for (``reach``): a
    setting to change, named in the message."""


@attrs.frozen
class ExecResult:
    """How one command run in a sandbox ended.

    ``stdout`` and ``stderr`` are decoded as UTF-8 (invalid bytes replaced) and bounded: past
    the bound their middle is left out, marked in the text, and counted in ``stdout_cut`` and
    ``stderr_cut``. ``exit_code`` is None when the command was stopped before it exited
    (``timed_out``, or ``stopped`` says why: the sandbox's wall time or disk limit spent)."""

    #: Its exit code (128 + N when a signal N ended it); None when it was stopped first.
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    #: Whether it was stopped at its time limit.
    timed_out: bool = False
    #: Bytes of stdout left out past the bound.
    stdout_cut: int = 0
    #: Bytes of stderr left out past the bound.
    stderr_cut: int = 0
    #: Seconds it ran.
    duration_s: float = 0.0
    #: Why it was stopped other than by its own time limit (the sandbox's wall time, its disk
    #: limit), in a few words; None otherwise.
    stopped: str | None = None

    @property
    def ok(self) -> bool:
        """Whether it exited with 0."""
        return self.exit_code == 0

    def output(self) -> str:
        """stdout then stderr, as a person reads a terminal's."""
        if self.stdout and self.stderr:
            sep = "" if self.stdout.endswith("\n") else "\n"
            return f"{self.stdout}{sep}{self.stderr}"
        return self.stdout or self.stderr

    def ending(self) -> str:
        """How it ended, in a few words: ``exit code 1``, ``timed out after 30 s``, ..."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.0f} s"
        if self.stopped is not None:
            return f"stopped: {self.stopped}"
        return f"exit code {self.exit_code}"

    def record(self, command: str, bound: int = 8 * 1024) -> CommandRecord:
        """This result as a :class:`~interplay.values.records.CommandRecord` of ``command``, its
        output cut to ``bound`` bytes."""
        text, cut = bounded_text(self.output(), bound)
        return CommandRecord(command=command, exit_code=self.exit_code, output=text,
                             output_cut=cut + self.stdout_cut + self.stderr_cut,
                             timed_out=self.timed_out, duration_s=round(self.duration_s, 3))


class BoundedOutput:
    """A stream's bytes kept to a bound as they arrive: the first half of the bound and the
    last half, the middle counted (what :class:`ExecResult` reports). ``listener``, when
    given, is handed every chunk as it arrives, whatever is kept."""

    def __init__(self, bound: int = OUTPUT_BYTES,
                 listener: Callable[[bytes], None] | None = None) -> None:
        self.bound = max(0, bound)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.listener = listener

    def add(self, data: bytes) -> None:
        if self.listener is not None:
            self.listener(data)
        self.total += len(data)
        room = self.bound // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            keep = self.bound - self.bound // 2
            if len(self.tail) > 2 * keep + 65536:
                del self.tail[:-keep]

    @property
    def cut(self) -> int:
        """Bytes left out."""
        return max(0, self.total - self.bound)

    def text(self) -> str:
        keep = self.bound - self.bound // 2
        if self.cut == 0:
            return (bytes(self.head) + bytes(self.tail)).decode(errors="replace")
        tail = bytes(self.tail[-keep:]) if keep else b""
        return (self.head.decode(errors="replace")
                + f"\n[... {self.cut} bytes left out ...]\n"
                + tail.decode(errors="replace"))


def bounded_text(text: str, bound: int) -> tuple[str, int]:
    """``text`` kept to ``bound`` bytes (its middle left out and marked past it), and how many
    bytes were left out."""
    data = text.encode(errors="replace")
    if len(data) <= bound:
        return text, 0
    out = BoundedOutput(bound)
    out.add(data)
    return out.text(), out.cut


@attrs.frozen
class Mount:
    """A path of this machine brought into the sandbox read-only (a harness's program, say):
    ``source`` here, seen as ``target`` inside."""

    source: str
    target: str


@attrs.frozen
class SandboxNeeds:
    """What a seat's harness needs of the sandbox it works in, asked before the sandbox
    starts (:meth:`interplay.Harness.sandbox_needs`): paths of this machine brought in
    read-only (``mounts``: its program), and whether a program inside calls interplay's model
    boundary and tool gateway (``reach``), which the sandbox's network must then let out."""

    mounts: tuple[Mount, ...] = ()
    reach: bool = False


@attrs.frozen
class SandboxPlan:
    """What the run asks a backend to start for one episode: the task's workspace, what the
    seats working inside bring, and labels naming the episode (kept on what the backend
    makes, so a leftover can be told to whom it belonged)."""

    workspace: Workspace = attrs.Factory(Workspace)
    mounts: tuple[Mount, ...] = ()
    #: Whether a program inside calls interplay's model boundary (a program harness inside).
    reach: bool = False
    labels: Mapping[str, str] = attrs.Factory(dict)


@attrs.define
class NoSandboxConfig:
    """A sandbox backend with no settings."""


class Sandbox:
    """Base class of every sandbox backend. Subclass it and register it with
    ``register_sandboxes``.

    ``Config`` is an attrs class of the backend's settings (structured from a run's
    ``sandbox`` table, beside its ``kind``). An instance is made per episode, started once
    (:meth:`start`) and stopped once (:meth:`stop`, also after errors and when the run is
    cancelled). Paths inside are absolute, or relative to :attr:`workdir`."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoSandboxConfig
    #: Whether what runs inside is kept from this machine's files, processes and network
    #: (docker: yes; local: no).
    isolated: ClassVar[bool] = True

    def __init__(self, config: Any = None) -> None:
        self.config = settle(config, self, "sandbox")

    # -- before the run ----------------------------------------------------------------------

    def check(self) -> list[str]:
        """What keeps this backend from running here, one line each saying what to install
        or set (a daemon that does not answer); none by default. Asked when a run starts,
        before its results folder and any model call, on the machine its episodes run on."""
        return []

    def problems(self, workspace: Workspace, needs: SandboxNeeds) -> list[str]:
        """What this backend cannot give a task's ``workspace`` or a seat's ``needs`` (an
        image, for a backend without images), one line each; asked when a run starts."""
        return []

    # -- one episode ---------------------------------------------------------------------------

    @property
    def workdir(self) -> str:
        """The workspace folder inside: where a task's files go and commands run by default."""
        raise NotImplementedError(f"sandbox {self.name!r} does not implement workdir")

    async def start(self, plan: SandboxPlan) -> None:
        """Make the sandbox for one episode: its image (built if need be), ``plan.mounts``
        in place, its workdir made. SandboxError saying what failed and what to change."""
        raise NotImplementedError(f"sandbox {self.name!r} does not implement start()")

    async def exec(self, argv: Sequence[str], *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                   timeout_s: float | None = None, user: str | None = None,
                   output_bytes: int = OUTPUT_BYTES,
                   on_stdout: Callable[[bytes], None] | None = None) -> ExecResult:
        """Run ``argv`` inside (``cwd`` default :attr:`workdir`, ``env`` over the workspace's,
        ``stdin`` fed to it, ``user`` a name or uid inside) until it exits or ``timeout_s``
        passes (default :data:`EXEC_TIMEOUT_S`); then everything it started is ended. Each
        of stdout and stderr is kept to ``output_bytes``; ``on_stdout`` is handed stdout's
        chunks as they arrive (a program's events, read live). Never raises for what the
        command did; SandboxError when it cannot be run at all (the sandbox is gone)."""
        raise NotImplementedError(f"sandbox {self.name!r} does not implement exec()")

    async def read_file(self, path: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes:
        """The bytes of the file at ``path``; FileNotFoundError when there is none,
        SandboxError when it is larger than ``max_bytes``."""
        raise NotImplementedError(f"sandbox {self.name!r} does not implement read_file()")

    async def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` (its folders made), replacing what was there."""
        raise NotImplementedError(f"sandbox {self.name!r} does not implement write_file()")

    async def put(self, source: Path, target: str) -> None:
        """Copy the file or folder ``source`` of this machine to ``target`` inside (a folder's
        contents into the folder ``target``, made if need be)."""
        raise NotImplementedError(f"sandbox {self.name!r} does not implement put()")

    async def get(self, source: str, target: Path, *,
                  max_bytes: int = 1024 * 1024 * 1024) -> None:
        """Copy the file or folder ``source`` inside to ``target`` on this machine (a folder's
        contents into the folder ``target``); FileNotFoundError when there is none,
        SandboxError when it holds more than ``max_bytes``."""
        raise NotImplementedError(f"sandbox {self.name!r} does not implement get()")

    async def reach(self, url: str) -> str:
        """The URL by which a program inside reaches ``url``, an address of one of
        interplay's servers on this machine (``http://127.0.0.1:PORT/...``): the same URL
        where the network lets it through. NotReachable, saying which setting lets it, when
        the network keeps it out."""
        raise NotImplementedError(f"sandbox {self.name!r} does not implement reach()")

    async def stop(self) -> None:
        """Remove the sandbox and everything it started (idempotent; also after a failed
        start)."""

    def inside(self, mount: Mount) -> str:
        """Where a mount of the plan is seen inside (its ``target``, for a backend that
        mounts; its ``source`` for one whose commands run on this machine)."""
        return mount.target

    def record(self) -> dict[str, Any]:
        """What the episode's record keeps of this sandbox beside its kind and image: its id,
        network, limits (no secrets)."""
        return {}

    @property
    def image(self) -> str | None:
        """The image it runs, as named or built (None for a backend without images)."""
        return None

    @property
    def user(self) -> str | None:
        """Who a command that names no user runs as (a name or uid inside); None: the image's
        own user (or, for a backend without users, the one interplay runs as)."""
        return None


__all__ = [
    "EXEC_TIMEOUT_S",
    "OUTPUT_BYTES",
    "BoundedOutput",
    "ExecResult",
    "Mount",
    "NotReachable",
    "Sandbox",
    "SandboxError",
    "SandboxNeeds",
    "SandboxPlan",
    "bounded_text",
]
