"""Child processes that end with the interplay process that started them, however it ends.

Every process interplay starts (the embedded model's server, a command harness's program,
codex, worker processes) is started here: in a session of its own, so Ctrl-C at a terminal
reaches interplay alone, which decides how its children stop; with this process's tag
(``INTERPLAY_OWNER``) in its environment, which whatever it starts inherits; and with its
process group registered with this process's reaper (:mod:`interplay._plumbing.reaper`, one small
process, started with the first child). Each owner still stops its children on every path it
lives through (a normal end, an exception, Ctrl-C, SIGTERM). The reaper covers the one path it
does not: once this process is gone, ``kill -9`` included, it ends every process of those
groups and every process that carries the tag, so a child's own children go too, even those
that left its group.

How the reaper learns that this process is gone: it holds the read end of a pipe whose only
write end is this process's, and reads end-of-file when the process is gone. Not a
parent-death signal (Linux's ``PR_SET_PDEATHSIG``), because that signal:

- follows the *thread* that forked the child, not the process: the embedded model's server is
  started from a worker thread (``asyncio.to_thread``, or any thread of a library's user), so
  it would be killed when that thread ends, not when the run does;
- is not inherited by the child's own children, so a program's children would outlive it, and
  an arbitrary program (codex, a command) can only be given it by a ``preexec_fn``, which is
  unsafe in a process with threads;
- exists on Linux alone.

Worker processes (:mod:`interplay.run.workers`) set ``PR_SET_PDEATHSIG`` for themselves as well:
they are forked by the run's event-loop thread, which outlives them, and it stops them at
once, before they could take their closed stdin for the end of their work.

Platforms: on Linux, groups and the tag (found through ``/proc``). On other POSIX systems
(macOS, the BSDs), groups only: a descendant that left its group (``setsid``, a daemon) is not
found, nor a child started in the instant between its start and its registration. On Windows
children start plainly and nothing is reaped.

A program run for its output (:func:`run_program`, what the ``command`` harness does) ends
when it exits, not when its output pipes close: a background child it left holding them (``cmd
&``, or one in a session of its own) does not keep its caller waiting. What it wrote until it
exited is read, and everything it started is ended with the run: its process group, and (on
Linux) every process carrying the run's own tag (``INTERPLAY_PROGRAM_RUN``), which finds
those that left the group (``setsid``, a daemon) too. A process that clears its environment
(``env -i``) loses the tag, and is the reaper's only if it is still in a registered group.
A failure to start it is told apart
(:func:`not_runnable`): the program itself cannot run as given (no such file, no permission,
not an executable), or the system was short of something (descriptors, processes, memory) and
trying again may work.

This module owns how children start and the reaper; it must not decide when a child should
stop (its owner does).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from interplay._plumbing.reaper import scan, sweep
from interplay.errors import InterplayError
from interplay.log import get_logger

log = get_logger("interplay.processes")

#: The environment variable that tags every process an interplay process started (and what
#: they started) with that process's id: ``<pid>-<random>``.
__all__ = ["ProgramDirs", "ProgramRun", "find_program", "not_runnable", "other_version",
           "owner_tag", "popen", "refusal_reason", "run_program", "start_process"]

OWNER_VAR = "INTERPLAY_OWNER"
#: The environment variable that tags every process of one :func:`run_program` (the program
#: and what it starts) with that run's own value, so the run's end finds them all.
PROGRAM_VAR = "INTERPLAY_PROGRAM_RUN"
_SCRIPT = Path(__file__).parent / "_plumbing" / "reaper.py"


class _Reaper:
    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd


_reaper: _Reaper | None = None
_tag: str | None = None
_unavailable = False
_lock = threading.Lock()
_fork_hook = False
#: The ``exec`` lines told to this process's reaper (:func:`reap_with`).
_commands: set[bytes] = set()


def _forget_in_child() -> None:
    """A forked child (no exec) is a process of its own: its children get a reaper of their
    own, and it lets go of the parent's pipe."""
    global _reaper, _tag, _lock, _commands
    _lock = threading.Lock()
    _commands = set()
    if _reaper is not None:
        with contextlib.suppress(OSError):
            os.close(_reaper.fd)
    _reaper, _tag = None, None


def _spawn(tag: str) -> _Reaper | None:
    global _fork_hook
    read, write = os.pipe()
    # Not tagged itself, so a reaper further up (this process may be a worker) leaves it to
    # end what this process started.
    env = {k: v for k, v in os.environ.items() if k != OWNER_VAR}
    try:
        pid = os.posix_spawn(
            sys.executable, [sys.executable, "-I", str(_SCRIPT), OWNER_VAR, tag], env,
            file_actions=[(os.POSIX_SPAWN_DUP2, read, 0),
                          (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                          (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)],
            # A group of its own: no terminal's signals, and no group a reaper ends.
            setpgroup=0)
    except OSError as exc:
        os.close(write)
        log.warning("processes.reaper_failed", exception_type=type(exc).__name__)
        return None
    finally:
        os.close(read)
    # A registration must never block the event loop; a full pipe drops it (see _register).
    os.set_blocking(write, False)
    if not _fork_hook:
        os.register_at_fork(after_in_child=_forget_in_child)
        _fork_hook = True
    log.debug("processes.reaper_started", pid=pid)
    return _Reaper(pid, write)


def _running() -> _Reaper | None:
    """This process's reaper, started if need be; None where there can be none."""
    global _reaper, _tag, _unavailable
    with _lock:
        if _reaper is None and not _unavailable:
            if not hasattr(os, "posix_spawn") or not sys.executable:
                _unavailable = True
                return None
            _tag = _tag or f"{os.getpid()}-{secrets.token_hex(8)}"
            _reaper = _spawn(_tag)
            _unavailable = _reaper is None
        return _reaper


def _register(pgid: int) -> None:
    _tell_reaper(b"%d\n" % pgid, pgid=pgid)


def reap_with(argv: Sequence[str]) -> bool:
    """Have this process's reaper run ``argv`` once this process is gone, however it went
    (``kill -9`` included), after it has ended this process's children: how a sandbox
    backend removes what it started outside this machine's process tree (containers found by
    :func:`owner_tag`'s value). Registered once per distinct argv; the command gets a minute.
    Whether a reaper will run it (False where there is none: Windows)."""
    line = b"exec " + json.dumps(list(argv)).encode() + b"\n"
    with _lock:
        if line in _commands:
            return True
        _commands.add(line)
    return _tell_reaper(line)


def _tell_reaper(line: bytes, *, pgid: int | None = None) -> bool:
    global _reaper
    for _ in range(2):
        reaper = _running()
        if reaper is None:
            return False
        try:
            os.write(reaper.fd, line)
            return True
        except BlockingIOError:
            # The reaper is not reading (stopped by hand?): the tag still finds the group.
            log.warning("processes.reaper_busy", pgid=pgid)
            return False
        except OSError:
            # The reaper is gone (killed by hand): a new one, with the same tag.
            log.warning("processes.reaper_lost", pid=reaper.pid)
            with _lock:
                if _reaper is reaper:
                    _reaper = None
                    with contextlib.suppress(OSError):
                        os.close(reaper.fd)
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(reaper.pid, os.WNOHANG)
            # A new reaper knows nothing yet: the commands it must run are told again.
            with _lock:
                again = [c for c in _commands if c != line]
            for command in again:
                with contextlib.suppress(OSError):
                    new = _running()
                    if new is not None:
                        os.write(new.fd, command)
    return False


def owner_tag() -> tuple[str, str] | None:
    """``(variable, value)``: the tag in the environment of every process this process starts
    through :func:`start_process`; a process carrying it is ended with this process. For a
    program that builds its children's environment itself (codex's shell policy): pass it
    on. None where nothing is reaped (Windows)."""
    if _running() is None or _tag is None:
        return None
    return OWNER_VAR, _tag


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with this process's tag."""
    out = dict(os.environ if env is None else env)
    tag = owner_tag()
    if tag is not None:
        out[tag[0]] = tag[1]
    return out


async def start_process(program: str, *args: str, env: Mapping[str, str] | None = None,
                        **kwargs: Any) -> asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec`` for a child that ends with this process: started in
    a session (and process group) of its own, tagged, its group registered with the reaper.
    ``env`` defaults to this process's environment; other arguments pass through. Stopping it
    is still the caller's to do; ``os.killpg(proc.pid, ...)`` reaches what it started."""
    proc = await asyncio.create_subprocess_exec(program, *args, env=child_env(env),
                                                start_new_session=True, **kwargs)
    _register(proc.pid)
    return proc


def popen(args: list[str], *, env: Mapping[str, str] | None = None,
          **kwargs: Any) -> subprocess.Popen[bytes]:
    """:func:`start_process` for ``subprocess.Popen``: the same child, started synchronously
    (from any thread)."""
    proc = subprocess.Popen(args, env=child_env(env), start_new_session=True, **kwargs)
    _register(proc.pid)
    return proc


#: The program each tagged run started, by its tag: the process a harness started itself (on
#: this machine, or a sandbox's command seen from here), whose model calls are its own.
_programs: dict[str, int] = {}


def note_program(tag: str, pid: int) -> None:
    """Remember that ``pid`` is the program the run tagged ``tag`` started (:func:`caller`)."""
    _programs[tag] = pid


def forget_program(tag: str) -> None:
    _programs.pop(tag, None)


#: The programs whose processes are shells: a command a program runs goes through one.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "ash", "busybox"})


def caller(pid: int) -> str | None:
    """Who process ``pid`` (Linux ``/proc``) is to the program runs interplay started:
    ``program`` when it is the program a segment started (its run's tag says which), or a
    process that one started without going through a shell (a launcher's child, a wrapper
    script's program); ``other`` for anything else: a command the program ran (it goes
    through a shell), one that left the program's tree (a double fork), one that carries no
    run's tag. None where it cannot be told (no ``/proc``, the process gone, or this process
    itself)."""
    if pid == os.getpid():
        return None
    environ = _read(f"/proc/{pid}/environ")
    if environ is None:
        return None
    prefix = f"{PROGRAM_VAR}=".encode()
    tag = next((e[len(prefix):].decode(errors="replace") for e in environ.split(b"\0")
                if e.startswith(prefix)), None)
    root = _programs.get(tag) if tag is not None else None
    if root is None:
        return "other"
    for _ in range(64):
        if pid == root:
            return "program"
        if pid <= 1 or _is_shell(pid):
            return "other"
        stat = _read(f"/proc/{pid}/stat")
        if stat is None:
            return "other"
        pid = int(stat[stat.rfind(b")") + 2:].split()[1])
    return "other"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _is_shell(pid: int) -> bool:
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        comm = _read(f"/proc/{pid}/comm")
        exe = comm.decode(errors="replace").strip() if comm else ""
    return exe.removesuffix(" (deleted)") in SHELLS


def end_tagged(var: str, tag: str, *, grace_s: float = 1.0, wait_s: float = 10.0) -> int:
    """End every live process whose environment holds ``var=tag`` (Linux ``/proc``; none
    elsewhere), as the reaper ends a run's: SIGTERM and up to ``grace_s`` to stop as asked,
    then what is left is stopped (scanning again until nothing new forks) and killed. Waits,
    up to ``wait_s``, until they are gone; how many there were. It blocks: from async code,
    call it in a thread."""
    if not os.path.isdir("/proc"):
        return 0

    def find(groups: set[int]) -> set[int]:
        return scan(var, tag, groups)

    if not find(set()):
        return 0
    ended = sweep(set(), find, grace_s)
    # SIGKILL is delivered asynchronously: the caller goes on once they are gone.
    deadline = time.monotonic() + wait_s
    while find(set()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(ended)


#: Why a program cannot start that is the program's (or its settings'), not the system's: trying
#: again cannot help. Any other failure to start it (EMFILE, ENFILE, EAGAIN, ENOMEM, or uvloop's
#: errno -1 for the same) is the system running short, and may pass.
NOT_RUNNABLE = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENOEXEC,
                          errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG,
                          errno.E2BIG})


def not_runnable(exc: OSError) -> bool:
    """Whether ``exc``, raised starting a program, says the program cannot run as given (no
    such file, no permission, not an executable: a setting to fix, not worth trying again),
    rather than that the system was short of descriptors, processes or memory (trying again
    may work)."""
    return exc.errno in NOT_RUNNABLE


def refusal_reason(exc: OSError) -> str:
    """Why the system refused to start a program (``exc`` is not :func:`not_runnable`), in
    words: its error's text, or what uvloop's errno -1 ("Unknown error -1", how it reports a
    start that failed for want of descriptors) means."""
    if exc.errno is None or exc.errno < 0:
        return "no descriptor, process or memory to spare (the system's error: " \
               f"{exc.strerror or exc})"
    return exc.strerror or str(exc)


@attrs.define
class ProgramRun:
    """What one run of a program did: its exit code (negative: the signal that ended it, as
    SIGKILL at its timeout), everything it wrote to stdout, the last ``keep_stderr`` bytes
    of its stderr, and how many processes it left behind that carried its tag and were ended
    after it exited (``strays``)."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    strays: int = 0


class _Sink:
    """The read end of a program's pipe, read as data arrives, and once more, without waiting,
    when the program has exited: as many bytes as the pipe holds then (a child still writing
    to it does not keep this reading)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, keep: int | None,
                 collect: Callable[[bytes], None] | None = None) -> None:
        self.loop = loop
        self.fd = fd
        self.keep = keep
        self.collect = collect
        self.data = bytearray()
        self.open = True
        os.set_blocking(fd, False)
        loop.add_reader(fd, self.read)

    def read(self, size: int = 1 << 18) -> int:
        """One read of up to ``size`` bytes; how many came (0 at the end, or none waiting)."""
        try:
            chunk = os.read(self.fd, size)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return 0
        if self.collect is not None:
            self.collect(chunk)
            return len(chunk)
        self.data += chunk
        if self.keep is not None and len(self.data) > 2 * self.keep:
            del self.data[:-self.keep]
        return len(chunk)

    def take(self) -> bytes:
        """All that was written until now; the pipe is closed."""
        left = _waiting(self.fd) if self.open else 0
        while left > 0 and self.open:
            n = self.read(min(left, 1 << 18))
            if not n:
                break
            left -= n
        self.close()
        return bytes(self.data if self.keep is None else self.data[-self.keep:])

    def close(self) -> None:
        if self.open:
            self.open = False
            self.loop.remove_reader(self.fd)
            os.close(self.fd)


def _waiting(fd: int) -> int:
    """Bytes waiting in the pipe ``fd`` (FIONREAD)."""
    import fcntl
    import termios

    buf = bytearray(4)
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf)
    except OSError:
        return 1 << 30  # read until it would block
    return int.from_bytes(buf, sys.byteorder)


class _Feed:
    """The write end of a program's stdin, fed ``data`` as the program reads it, then closed.
    A program that exits without reading it all just does not get the rest."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> None:
        self.loop = loop
        self.fd = fd
        self.data = memoryview(data)
        self.open = True
        os.set_blocking(fd, False)
        self.watching = False
        self.write()

    def write(self) -> None:
        while self.open and self.data:
            try:
                n = os.write(self.fd, self.data[:1 << 16])
            except (BlockingIOError, InterruptedError):
                if not self.watching:
                    self.watching = True
                    self.loop.add_writer(self.fd, self.write)
                return
            except OSError:  # the program closed its stdin (EPIPE) or exited
                break
            self.data = self.data[n:]
        self.close()

    def close(self) -> None:
        if self.open:
            self.open = False
            if self.watching:
                self.loop.remove_writer(self.fd)
            os.close(self.fd)


async def run_program(argv: Sequence[str], *, stdin: bytes = b"", timeout_s: float,
                      cwd: str | None = None, env: Mapping[str, str] | None = None,
                      keep_stderr: int | None = None,
                      on_stdout: Callable[[bytes], None] | None = None,
                      on_stderr: Callable[[bytes], None] | None = None,
                      tag: str | None = None) -> ProgramRun:
    """Run ``argv`` (through :func:`start_process`) with ``stdin`` on its standard input, until
    it exits or ``timeout_s`` passes, then end everything it started: its process group, and
    every process carrying this run's tag (:data:`PROGRAM_VAR`), in the group or not.

    Its output is read as it comes, through pipes of this function's own rather than
    asyncio's: an asyncio subprocess is not done until its pipes close, and a child the
    program left in the background may hold them for as long as it lives. Once the program
    has exited, what it wrote is all in the pipes (a write to a pipe is done when it returns)
    and is read without waiting for their end. Raises the OSError of a program that could not
    start (see :func:`not_runnable`); cancelled, it ends them first. ``on_stdout`` and
    ``on_stderr``, when given, are handed each chunk as it is read instead of its being kept
    (a caller that bounds what it keeps); ``tag`` is the run's tag (default: a new one)."""
    loop = asyncio.get_running_loop()
    tag = tag or secrets.token_hex(16)
    env = {**(os.environ if env is None else env), PROGRAM_VAR: tag}
    mine: list[int] = []  # the descriptors still open here, closed on every way out
    try:
        stdin_r, stdin_w = os.pipe()
        mine += [stdin_r, stdin_w]
        out_r, out_w = os.pipe()
        mine += [out_r, out_w]
        err_r, err_w = os.pipe()
        mine += [err_r, err_w]
        proc = await start_process(*argv, stdin=stdin_r, stdout=out_w, stderr=err_w, cwd=cwd,
                                   env=env)
    except BaseException:
        for fd in mine:
            os.close(fd)
        raise
    for fd in (stdin_r, out_w, err_w):  # the program's ends: it holds its own copies
        os.close(fd)
    note_program(tag, proc.pid)
    feed = _Feed(loop, stdin_w, stdin)
    out = _Sink(loop, out_r, None, on_stdout)
    err = _Sink(loop, err_r, keep_stderr, on_stderr)
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
    finally:
        # What it left running in its group goes with it (and the program, on a timeout or a
        # cancellation); then what left the group, found by the run's tag.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        feed.close()
        try:
            if proc.returncode is None:
                await asyncio.shield(proc.wait())
        finally:
            stdout, stderr = out.take(), err.take()
            strays = await asyncio.shield(asyncio.to_thread(end_tagged, PROGRAM_VAR, tag))
            forget_program(tag)
            if strays:
                log.debug("processes.strays_ended", pid=proc.pid, count=strays)
    return ProgramRun(exit_code=proc.returncode, stdout=stdout, stderr=stderr,
                      timed_out=timed_out, strays=strays)


@attrs.define
class ProgramDirs:
    """The directories a harness program works in for one trace: ``root``, a temp dir of the
    trace's own (under ``state_dir``, or the system's temp dir); ``home`` in it, for the
    program's config and session files; and ``workdir``, the root's ``work`` folder or, when
    configured, the user's directory (made if missing, never removed). :meth:`remove` takes
    the root away and everything in it."""

    root: Path
    home: Path
    workdir: Path

    @classmethod
    def make(cls, harness: str, *, state_dir: str | None = None,
             workdir: str | None = None) -> ProgramDirs:
        """A new trace's directories for ``harness`` (its name, in errors and the root's
        name); InterplayError naming ``harness_config.state_dir`` or ``workdir`` when one
        cannot be made (a file in the way, no permission)."""
        parent = None
        if state_dir is not None:
            parent = _make_dir(Path(state_dir).expanduser(), harness, "state_dir", state_dir)
        try:
            root = Path(tempfile.mkdtemp(prefix=f"interplay-{harness}-", dir=parent))
        except OSError as e:
            raise _dir_error(harness, "state_dir", state_dir or tempfile.gettempdir(),
                             e) from None
        # Nothing holds the root yet, so nothing else could remove it: a failure here does.
        try:
            home = _make_dir(root / "home", harness, "state_dir", str(root))
            work = _make_dir(root / "work", harness, "state_dir", str(root)) \
                if workdir is None else \
                _make_dir(Path(workdir).expanduser().resolve(), harness, "workdir", workdir)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return cls(root=root, home=home, workdir=work)

    async def remove(self) -> None:
        """Remove the root (the home, and the trace's own workdir; a configured workdir is
        the user's and stays); a root the system would not let go of is logged with its
        path."""
        await asyncio.to_thread(shutil.rmtree, self.root, True)
        if self.root.exists():  # no descriptor to spare, say: where it is
            log.warning("processes.dirs_left", path=str(self.root))


def _dir_error(harness: str, setting: str, value: str, error: OSError) -> InterplayError:
    return InterplayError(f"harness {harness!r}: cannot use {setting} {value!r} "
                          f"({error.strerror or error}); set harness_config.{setting} to a "
                          f"writable directory")


def _make_dir(path: Path, harness: str, setting: str, value: str) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _dir_error(harness, setting, value, e) from None
    return path


def find_program(name: str, configured: str | None, *, harness: str, hint: str) -> str:
    """A harness program's executable: ``configured`` (a path or a name on PATH) if given,
    else ``name`` next to the running Python (a venv's bin, where a checkout's setup links
    it), else ``name`` on PATH. InterplayError naming ``harness`` with ``hint`` (how to
    install it, or set ``harness_config.binary``) when there is none."""
    if configured:
        found = shutil.which(os.path.expanduser(configured))
        if found is None:
            raise InterplayError(f"harness {harness!r}: binary {configured!r} not found or "
                                 f"not executable; {hint}")
        return found
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise InterplayError(f"harness {harness!r}: {name!r} is not installed; {hint}")
    return found


#: The executables :func:`other_version` asked already, and the lock that asks each once.
_asked: set[str] = set()
_asked_lock = threading.Lock()


def other_version(binary: str, pinned: str) -> str | None:
    """The version ``binary --version`` prints (its first ``N.N.N``) when it is not
    ``pinned``: what a harness warns of. Asked once per executable in a process (None every
    time after); None too when it is the pinned one, or when it prints none or cannot be run
    (its start says why, if it cannot)."""
    with _asked_lock:
        if binary in _asked:
            return None
        _asked.add(binary)
        try:
            done = subprocess.run([binary, "--version"], capture_output=True, timeout=30,
                                  stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    found = re.search(rb"\d+\.\d+\.\d+", done.stdout)
    version = found.group().decode() if found else None
    return None if version in (None, pinned) else version
