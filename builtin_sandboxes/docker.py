"""The ``docker`` sandbox: a container per episode on a Docker Engine of this machine.

Its image is the task's (by name, or built from its Dockerfile and cached by the build
context's content), else ``sandbox.image``. Its limits are CPUs, memory (no swap beyond it),
processes (a fork bomb meets ``pids``), wall time (past ``wall_s`` every command is stopped)
and disk (what the container writes beyond its image, checked while commands run: past
``disk_mb`` they are stopped and no more run). Its network is one of:

- ``none``: nothing reachable from inside but its own loopback;
- ``model``: only interplay's own servers, the interception server and the tool gateway, at
  the same ``127.0.0.1:PORT`` addresses they have here (:mod:`.netns`); any other port of
  this machine and the internet stay unreachable. What a program harness inside needs, and
  what the network is when a seat's harness runs a program inside and the setting is unset;
- ``host``: this machine's network namespace, every port of it and whatever it reaches. It
  isolates nothing of the network: for trusted programs only.

Every container carries the run's owner tag as a label; the reaper removes what a killed run
left (:mod:`._cleanup`). A command runs with ``docker exec`` semantics through the Engine API:
its output bounded, its stdin fed, and at its end (its exit, its time limit, the sandbox's)
everything it started ended, found by a tag in its environment from this machine's ``/proc``
(the daemon is on this machine).

This module owns one container's life and the commands run in it; it must not apply a task's
files or setup (the run does, through the contract) nor know which harness runs inside.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import re
import secrets
import shutil
import sys
import tarfile
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, ClassVar, Literal

import attrs

from interplay._plumbing.reaper import sweep
from interplay.builtin_sandboxes import engine
from interplay.builtin_sandboxes.netns import Forwarder
from interplay.contracts.sandbox import (
    EXEC_TIMEOUT_S,
    OUTPUT_BYTES,
    BoundedOutput,
    ExecResult,
    NotReachable,
    Sandbox,
    SandboxError,
    SandboxNeeds,
    SandboxPlan,
)
from interplay.log import get_logger
from interplay.processes import (
    PROGRAM_VAR,
    forget_program,
    note_program,
    owner_tag,
    reap_with,
)
from interplay.values.records import Workspace

log = get_logger("interplay.contracts.sandbox.docker")

Network = Literal["none", "model", "host"]
#: The image a sandbox starts from when neither the task nor the settings name one: Debian
#: 12 with python3, bash and git, built from Debian's packages (docs/sandboxes.md).
BASE_IMAGE = "interplay-base:bookworm"
#: Seconds between checks of what a container has written, while commands run in it.
DISK_CHECK_S = 2.0
#: Seconds a command's output stream may stay open once the command has ended and what it
#: left running was ended (held by a process that escaped both its session and its tag).
STREAM_GRACE_S = 10.0
_CLEANUP = str(Path(__file__).with_name("_cleanup.py"))
#: An owner label for a process without a reaper (no tag), so its containers still carry one.
_UNTAGGED = f"{os.getpid()}-{secrets.token_hex(8)}"


@attrs.define
class DockerConfig:
    """Settings of the docker sandbox (a run's ``sandbox.*`` with ``kind = "docker"``)."""

    #: The Docker daemon (``unix:///PATH`` or ``tcp://HOST:PORT``); null: ``DOCKER_HOST``,
    #: else /var/run/docker.sock. Podman's Docker-compatible socket serves too. It must run
    #: on this machine: the network ``model`` and ending a command's processes read this
    #: machine's /proc.
    host: str | None = None
    #: The image a task that names none starts from.
    image: str = BASE_IMAGE
    #: Pull an image the daemon does not have (needs a registry it reaches); false: such an
    #: image is an error that says so.
    pull: bool = False
    #: What a program inside can reach: "none" (nothing), "model" (interplay's model
    #: boundary and tool gateway only), "host" (this machine's network: everything it
    #: reaches). null: "model" when a seat's harness runs a program inside, else "none".
    network: Network | None = None
    #: CPUs it may use (a fraction allowed); a task's own cpus wins.
    cpus: float | None = attrs.field(
        default=1.0, validator=attrs.validators.optional(attrs.validators.gt(0)))
    #: Memory in MB (no swap beyond it: a process past it is killed); a task's memory_mb
    #: wins.
    memory_mb: int | None = attrs.field(
        default=2048, validator=attrs.validators.optional(attrs.validators.ge(6)))
    #: Processes and threads it may hold at once (a fork bomb stops at it).
    pids: int | None = attrs.field(
        default=512, validator=attrs.validators.optional(attrs.validators.ge(8)))
    #: Seconds it may live: past them every command in it is stopped and no more run.
    wall_s: float = attrs.field(default=3600.0, validator=attrs.validators.gt(0))
    #: MB it may write beyond its image, checked every few seconds while a command runs:
    #: past them its commands are stopped and no more run; null: no limit.
    disk_mb: int | None = attrs.field(
        default=4096, validator=attrs.validators.optional(attrs.validators.ge(1)))
    #: The user commands run as inside (a name or uid the image knows); null: the image's.
    user: str | None = None
    #: Seconds a task's Dockerfile may take to build.
    build_timeout_s: float = attrs.field(default=1200.0, validator=attrs.validators.gt(0))


class DockerSandbox(Sandbox):
    """A container per episode on this machine's Docker Engine, with limits and a network.

    Its image is the task's (by name, or built from its Dockerfile) or ``image``; it is
    removed after the episode is scored, and by the run's reaper if the run is killed."""

    name = "docker"
    Config: ClassVar[type] = DockerConfig
    isolated = True

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        cfg: DockerConfig = self.config
        self._daemon = engine.daemon(cfg.host)
        self._id: str | None = None
        self._workdir = "/workspace"
        self._owner: str | None = cfg.user
        self._image: str | None = None
        self._network: str = "none"
        self._env: dict[str, str] = {}
        self._forwarder: Forwarder | None = None
        self._deadline = 0.0
        #: The commands running, by tag.
        self._running: dict[str, _Command] = {}
        self._disk_task: asyncio.Task[None] | None = None
        self._disk_checked = 0.0
        self._disk_spent: str | None = None
        #: Why a command was stopped at the sandbox's wall time, once one was.
        self._wall_stopped: str | None = None
        #: Where this machine lists the container's processes (its cgroup), when it can.
        self._procs_file: str | None = None
        self._limits: dict[str, Any] = {}
        self._stopped = False
        #: Images found on the daemon when the run started (each asked once).
        self._seen_images: set[str] = set()

    # -- before the run ----------------------------------------------------------------------

    def check(self) -> list[str]:
        try:
            engine.sdk()
        except Exception as exc:
            return [str(exc)]
        why = self._daemon.ping()
        if why is None:
            return []
        return [f"sandbox 'docker': cannot reach the Docker daemon at {self._daemon.host} "
                f"({why}): install docker.io and start it (dockerd --bridge=none "
                f"--iptables=false --ip-masq=false, docs/sandboxes.md), name another with "
                f"sandbox.host, or set sandbox.kind = \"local\" to run in a folder of this "
                f"machine, without isolation"]

    def problems(self, workspace: Workspace, needs: SandboxNeeds) -> list[str]:
        if needs.reach and self.config.network == "none":
            return ["sandbox.network = \"none\" lets nothing inside reach the model, and a "
                    "program runs inside: set sandbox.network = \"model\" (interplay's own "
                    "servers only)"]
        if workspace.dockerfile is None and not self.config.pull:
            name = workspace.image or self.config.image
            if name not in self._seen_images:
                try:
                    self._daemon.client.inspect_image(name)
                except Exception:
                    return [self._missing(name)]
                self._seen_images.add(name)
        return []

    # -- one episode ---------------------------------------------------------------------------

    @property
    def workdir(self) -> str:
        return self._workdir

    @property
    def image(self) -> str | None:
        return self._image

    @property
    def user(self) -> str | None:
        cfg: DockerConfig = self.config
        return cfg.user or None

    async def start(self, plan: SandboxPlan) -> None:
        cfg: DockerConfig = self.config
        ws = plan.workspace
        self._image, inspected = await self._image_for(ws)
        own_dir = (inspected.get("Config") or {}).get("WorkingDir") or ""
        self._workdir = ws.workdir or own_dir or "/workspace"
        # Who the files put in belong to: the task's agent user, else sandbox.user.
        self._owner = ws.user or cfg.user
        self._network = cfg.network or ("model" if plan.reach else "none")
        self._env = dict(ws.env)
        owner = owner_tag()
        owner_value = owner[1] if owner is not None else _UNTAGGED
        # Before the container exists: a run killed from here on leaves nothing behind.
        reap_with([sys.executable, "-I", _CLEANUP, "docker", self._daemon.host, owner_value])
        cpus = ws.cpus if ws.cpus is not None else cfg.cpus
        memory = ws.memory_mb if ws.memory_mb is not None else cfg.memory_mb
        self._limits = {"cpus": cpus, "memory_mb": memory, "pids": cfg.pids,
                        "wall_s": cfg.wall_s, "disk_mb": cfg.disk_mb}
        api = self._daemon.client
        host_config = api.create_host_config(
            network_mode="host" if self._network == "host" else "none",
            nano_cpus=int(cpus * 1e9) if cpus else None,
            mem_limit=f"{memory}m" if memory else None,
            memswap_limit=f"{memory}m" if memory else None,
            pids_limit=cfg.pids, init=True,
            security_opt=["no-new-privileges"],
            binds={m.source: {"bind": m.target, "mode": "ro"} for m in plan.mounts})
        labels = {engine.OWNER_LABEL: owner_value,
                  **{f"interplay.{k}": str(v) for k, v in plan.labels.items()}}
        create = asyncio.ensure_future(self._daemon.call(
            api.create_container, self._image, command=["sleep", "infinity"],
            working_dir=self._workdir, labels=labels, host_config=host_config,
            environment=self._env, hostname="sandbox", detach=True))
        try:
            created = await asyncio.shield(create)
        except asyncio.CancelledError:
            # Cancelled (Ctrl-C) while the daemon makes it: it is made all the same, in its
            # thread; its id is waited for so that stop() removes it, not only the reaper.
            with contextlib.suppress(Exception):
                self._id = str((await asyncio.wait_for(create, 60))["Id"])
            raise
        self._id = str(created["Id"])
        await self._daemon.call(api.start, self._id)
        state = (await self._daemon.call(api.inspect_container, self._id)).get("State") or {}
        if not state.get("Running"):
            raise SandboxError(f"the container of image {self._image!r} did not keep running "
                               f"(exit code {state.get('ExitCode')}): the image needs "
                               f"`sleep` (coreutils or busybox)")
        self._deadline = time.monotonic() + cfg.wall_s
        self._procs_file = _procs_file(int(state.get("Pid") or 0))
        if self._network == "model":
            self._forwarder = Forwarder(int(state["Pid"]))
        if self._owner:
            made = await self.exec(["sh", "-c", 'mkdir -p "$1" && chown "$2" "$1"', "sh",
                                    self._workdir, self._owner], user="0")
            if not made.ok:
                raise SandboxError(f"could not give the working folder {self._workdir} to "
                                   f"{self._owner_name()}: {made.output()[-300:].strip()}")
        log.debug("sandbox.started", kind=self.name, container=self._id[:12],
                  network=self._network)

    async def _image_for(self, ws: Workspace) -> tuple[str, dict[str, Any]]:
        """The image the sandbox runs (built or pulled if need be), and its inspection."""
        cfg: DockerConfig = self.config
        if ws.dockerfile is not None:
            if ws.build_timeout_s is not None:
                limit, setting = ws.build_timeout_s, "the task's workspace build_timeout_s"
            else:
                limit, setting = cfg.build_timeout_s, "sandbox.build_timeout_s"
            name = await self._daemon.build(ws.dockerfile, timeout_s=limit, setting=setting)
            return name, await self._daemon.has_image(name) or {}
        name = ws.image or cfg.image
        found = await self._daemon.has_image(name)
        if found is not None:
            return name, found
        if cfg.pull:
            await self._daemon.pull(name)
            return name, await self._daemon.has_image(name) or {}
        raise SandboxError(self._missing(name))

    def _missing(self, name: str) -> str:
        hint = ("build it with `bash .ci/setup --test`, or from Debian's packages as "
                "docs/sandboxes.md shows" if name == BASE_IMAGE else
                f"`docker pull {name}` or `docker load` it, or set sandbox.pull = true")
        return f"image {name!r} is not on the Docker daemon at {self._daemon.host}: {hint}"

    def _path(self, path: str) -> str:
        return path if path.startswith("/") else posixpath.join(self._workdir, path)

    def _container(self) -> str:
        if self._id is None or self._stopped:
            raise SandboxError("the sandbox is not running (not started, or removed)")
        return self._id

    async def exec(self, argv: Sequence[str], *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                   timeout_s: float | None = None, user: str | None = None,
                   output_bytes: int = OUTPUT_BYTES,
                   on_stdout: Callable[[bytes], None] | None = None) -> ExecResult:
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("exec takes a non-empty list of strings")
        cid = self._container()
        if self._disk_spent is not None:
            return ExecResult(exit_code=None, stopped=self._disk_spent)
        left = self._deadline - time.monotonic()
        if left <= 0:
            self._wall_stopped = self._wall_spent()
            return ExecResult(exit_code=None, stopped=self._wall_stopped)
        asked = EXEC_TIMEOUT_S if timeout_s is None else timeout_s
        limit = min(asked, left)
        tag = secrets.token_hex(16)
        environment = {**self._env, **(env or {}), PROGRAM_VAR: tag}
        data = stdin.encode() if isinstance(stdin, str) else stdin
        api = self._daemon.client
        try:
            created = await self._daemon.call(
                api.exec_create, cid, list(argv), stdin=data is not None,
                environment=[f"{k}={v}" for k, v in environment.items()],
                workdir=self._path(cwd) if cwd else self._workdir,
                user=user or self.config.user or "")
        except SandboxError as exc:
            raise await self._not_running(exc) from None
        exec_id = str(created["Id"])
        out, err = BoundedOutput(output_bytes, on_stdout), BoundedOutput(output_bytes)
        command = _Command(tag)
        self._running[tag] = command
        self._disk_due()
        t0 = time.monotonic()
        requested: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        stream = asyncio.ensure_future(
            self._daemon.exec_stream(exec_id, data, out, err, requested=requested))
        ended = asyncio.ensure_future(self._ended(exec_id, cid, stream, requested, command))
        timed_out = False
        try:
            try:
                code = await asyncio.wait_for(asyncio.shield(ended), limit)
            except TimeoutError:
                timed_out, code = True, None
        finally:
            del self._running[tag]
            forget_program(tag)
            await asyncio.shield(self._finish(exec_id, cid, command, stream, requested, ended))
        stdout, stderr, stopped = out.text(), err.text(), command.stopped
        if stopped is not None:
            timed_out, code = False, None
        elif timed_out and limit < asked:
            timed_out, stopped = False, self._wall_spent()
            self._wall_stopped = stopped
        elif code is not None and not command.leader:
            # It never started: the daemon says why on stdout, as its exit code 126.
            code, stdout, stderr = _not_started(argv[0], code, stdout, stderr)
        return ExecResult(exit_code=code, stdout=stdout, stderr=stderr, timed_out=timed_out,
                          stdout_cut=out.cut, stderr_cut=err.cut,
                          duration_s=time.monotonic() - t0, stopped=stopped)

    def _wall_spent(self) -> str:
        return f"the sandbox's wall time of {self.config.wall_s:g} s (sandbox.wall_s) is spent"

    async def _not_running(self, exc: SandboxError) -> SandboxError:
        """What to say when a command could not be made: the container gone or stopped, as
        the daemon tells it, else the daemon's own refusal."""
        try:
            info = await self._daemon.call(self._daemon.client.inspect_container, self._id)
        except SandboxError:
            return SandboxError("the sandbox's container is gone (removed outside interplay, "
                                "or its daemon restarted)")
        state = info.get("State") or {}
        if state.get("Running"):
            return exc
        why = "killed for want of memory" if state.get("OOMKilled") else \
            f"exit code {state.get('ExitCode')}"
        return SandboxError(f"the sandbox's container has stopped ({why}): no command can run "
                            f"in it")

    async def _ended(self, exec_id: str, cid: str, stream: asyncio.Future[None],
                     requested: asyncio.Future[None], command: _Command) -> int | None:
        """Wait until the command's own process has exited (not whatever still holds its
        output) and the daemon knows its exit code: the code, or None when the daemon never
        tells it. By a pidfd on the process when the daemon's /proc is this machine's, else
        by asking the daemon. The process's pid (this machine's) goes on ``command``."""
        api = self._daemon.client
        await asyncio.wait({requested, stream}, return_when=asyncio.FIRST_COMPLETED)
        if not requested.done():
            stream.result()  # it failed before the start was asked for: its error
            return None
        delay = 0.002
        # Between the start asked for and the process made, the daemon knows neither its
        # pid nor an exit code; one that could not start has an exit code and no pid.
        while True:
            info = await self._daemon.call(api.exec_inspect, exec_id)
            command.leader = int(info.get("Pid") or 0)
            if info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if command.leader:
                break
            if stream.done() and stream.exception() is not None:
                raise stream.exception()  # type: ignore[misc]
            await asyncio.sleep(delay)
            delay = min(2 * delay, 0.05)
        if _in_container(command.leader, cid):
            # The command's own process as this machine sees it: the requests it makes with
            # a trace's secret are its own (interplay.processes.caller).
            note_program(command.tag, command.leader)
        fd = _pidfd_of(command.leader, cid)
        if fd is not None:
            loop = asyncio.get_running_loop()
            gone = loop.create_future()
            loop.add_reader(fd, lambda: gone.done() or gone.set_result(None))
            try:
                # Asked once more: it may have exited before the pidfd was opened.
                info = await self._daemon.call(api.exec_inspect, exec_id)
                if info.get("Running"):
                    await gone
            finally:
                loop.remove_reader(fd)
                os.close(fd)
        else:
            while True:
                if not (await self._daemon.call(api.exec_inspect, exec_id)).get("Running"):
                    break
                await asyncio.sleep(0.1)
        # The daemon records the exit code a moment after the process is gone.
        delay, deadline = 0.002, time.monotonic() + 10
        while True:
            info = await self._daemon.call(api.exec_inspect, exec_id)
            if info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(delay)
            delay = min(2 * delay, 0.05)

    async def _finish(self, exec_id: str, cid: str, command: _Command,
                      stream: asyncio.Future[None], requested: asyncio.Future[None],
                      ended: asyncio.Future[int | None]) -> None:
        """A command's end (its exit, its time limit, a cancellation): what it left running
        goes, then its output's stream closes."""
        ended.cancel()
        if not command.leader and requested.done():
            # Asked to start and not seen started (its time limit or a cancellation came in
            # that instant): its pid, so that it cannot start after its end and run on.
            command.leader = await self._leader_of(exec_id)
        await asyncio.to_thread(_end_processes, command.tag, command.leader, cid,
                                self._procs_file)
        try:
            await asyncio.wait_for(asyncio.shield(stream), STREAM_GRACE_S)
        except Exception:  # its error, or still held open past the grace: what came is kept
            stream.cancel()
        self._disk_due()

    async def _leader_of(self, exec_id: str) -> int:
        deadline = time.monotonic() + 5
        with contextlib.suppress(SandboxError):
            while time.monotonic() < deadline:
                info = await self._daemon.call(self._daemon.client.exec_inspect, exec_id)
                if info.get("Pid") or info.get("ExitCode") is not None:
                    return int(info.get("Pid") or 0)
                await asyncio.sleep(0.01)
        return 0

    # -- disk ----------------------------------------------------------------------------------

    def _disk_due(self) -> None:
        """Check what the container has written, when a check is due: every DISK_CHECK_S
        while commands run, and once after each (so that short commands writing fast are
        caught by the next check, not only those running at one)."""
        if (self.config.disk_mb is None or self._stopped or self._disk_spent is not None
                or (self._disk_task is not None and not self._disk_task.done())):
            return
        wait = max(0.0, self._disk_checked + DISK_CHECK_S - time.monotonic())
        self._disk_task = asyncio.ensure_future(self._disk_watch(wait))

    async def _disk_watch(self, wait: float) -> None:
        while True:
            await asyncio.sleep(wait)
            if self._stopped or self._disk_spent is not None:
                return
            await self._check_disk()
            if not self._running:
                return
            wait = DISK_CHECK_S

    async def _check_disk(self) -> None:
        self._disk_checked = time.monotonic()
        limit = self.config.disk_mb * 1024 * 1024
        try:
            found = await self._daemon.call(self._daemon.client.containers, all=True,
                                            size=True, filters={"id": self._id})
        except SandboxError:
            return
        used = int((found[0] if found else {}).get("SizeRw") or 0)
        if used <= limit or self._disk_spent is not None:
            return
        self._disk_spent = (f"the sandbox's disk limit of {self.config.disk_mb} MB "
                            f"(sandbox.disk_mb) is spent")
        log.warning("sandbox.disk_spent", kind=self.name, container=(self._id or "")[:12],
                    bytes=used)
        running = list(self._running.values())
        for command in running:
            command.stopped = self._disk_spent
        await asyncio.gather(*(asyncio.to_thread(_end_processes, c.tag, c.leader,
                                                 self._id or "", self._procs_file)
                               for c in running))

    # -- files -----------------------------------------------------------------------------------

    async def read_file(self, path: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes:
        return await self._daemon.read_tar(self._container(), self._path(path), _file_of,
                                           max_bytes=max_bytes, file=True)

    async def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        content = data.encode() if isinstance(data, str) else data
        await self._daemon.put_tar(self._container(),
                                   engine.tar_of([(self._path(path), content, mode)]))
        await self._own(self._path(path))

    async def put(self, source: Path, target: str) -> None:
        cid = self._container()
        data = await asyncio.to_thread(engine.tar_folder, source, self._path(target))
        with data:
            await self._daemon.put_tar(cid, data)
        await self._own(self._path(target), tree=True)

    async def get(self, source: str, target: Path, *,
                  max_bytes: int = 1024 * 1024 * 1024) -> None:
        await self._daemon.read_tar(self._container(), self._path(source),
                                    lambda stream: _extract(stream, target),
                                    max_bytes=max_bytes)

    async def _own(self, path: str, *, tree: bool = False) -> None:
        """Give what was put at ``path`` to the task's ``workspace.user`` (else
        ``sandbox.user``), with the folders the daemon made for it below the working folder
        (``tree``: everything under it too): the daemon unpacks files as root, and commands
        run as that user must be able to change them. Nothing to do when commands run as the
        image's user."""
        user = self._owner
        if not user:
            return
        folders = []
        parent = posixpath.dirname(path)
        while parent.startswith(self._workdir.rstrip("/") + "/"):
            folders.append(parent)
            parent = posixpath.dirname(parent)
        commands = [["chown", "-R", user, path]] if tree else []
        if folders or not tree:
            commands.append(["chown", user, *([] if tree else [path]), *folders])
        for argv in commands:
            result = await self.exec(argv, user="0")
            if not result.ok:
                raise SandboxError(f"could not give {path} to {self._owner_name()}: "
                                   f"{result.output()[-300:].strip()}")

    def _owner_name(self) -> str:
        """Which setting names the owner, for an error: the task's, or sandbox.user."""
        cfg: DockerConfig = self.config
        if self._owner and self._owner != cfg.user:
            return f"the task's workspace user {self._owner!r}"
        return f"sandbox.user {self._owner!r}"

    # -- network ---------------------------------------------------------------------------------

    async def reach(self, url: str) -> str:
        parsed = urllib.parse.urlsplit(url)
        if parsed.hostname not in ("127.0.0.1", "localhost") or parsed.port is None:
            raise NotReachable(f"a sandbox reaches only interplay's own servers on this "
                               f"machine, not {parsed.hostname!r}")
        if self._network == "host":
            return url
        if self._network == "none" or self._forwarder is None:
            raise NotReachable("sandbox.network = \"none\" lets nothing inside reach "
                               "interplay's servers: set sandbox.network = \"model\" "
                               "(interplay's model boundary and tool gateway only)")
        self._container()  # removed: no namespace to listen in
        await self._forwarder.open("127.0.0.1", parsed.port)
        return url

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._disk_task is not None:
            self._disk_task.cancel()
        if self._forwarder is not None:
            await self._forwarder.close()
        if self._id is not None:
            try:
                await self._daemon.call(self._daemon.client.remove_container, self._id,
                                        force=True, v=True)
            except SandboxError as exc:
                # Left for the reaper (it carries the run's tag); the episode goes on.
                log.warning("sandbox.not_removed", kind=self.name, container=self._id[:12],
                            reason=str(exc)[:200])

    def record(self) -> dict[str, Any]:
        spent = self._disk_spent or self._wall_stopped
        return {"container": (self._id or "")[:12], "network": self._network,
                "limits": dict(self._limits),
                **({"stopped": spent} if spent is not None else {}),
                **({"forwarded_connections": self._forwarder.connections}
                   if self._forwarder is not None else {})}


@attrs.define
class _Command:
    """One command running in a sandbox: the tag in its environment, its process's pid on
    this machine once known (the leader of its session: what it starts stays in that
    session unless it leaves it, and keeps the tag unless it clears its environment), and
    why it was stopped, when the sandbox stopped it."""

    tag: str
    leader: int = 0
    stopped: str | None = None


def _not_started(program: str, code: int, stdout: str, stderr: str) -> tuple[int, str, str]:
    """A command the daemon could not start, as a shell tells it: 127 for a program not
    found, 126 for anything else that kept it from running (no permission, a working folder
    or user that is not there), the reason on stderr. The program never ran: what stdout
    holds is the daemon's reason."""
    said = stdout.strip().removesuffix(": unknown")
    for prefix in ("OCI runtime exec failed: ", "exec failed: ",
                   "unable to start container process: "):
        said = said.removeprefix(prefix)
    folder = re.search(r'chdir to cwd \("(.*)"\) set in config.json failed: (.*)', said)
    if folder is not None:
        return 126, "", f"cannot run {program} in {folder.group(1)}: {folder.group(2)}\n"
    own = re.search(r'^exec: "(.*)": (.*)$', said)
    if own is not None:
        why = own.group(2)
        return (127 if "not found" in why or "no such file" in why else 126), "", \
            f"{program}: {why}\n{stderr}"
    return code, "", f"{said}\n{stderr}" if said else stderr


def _procs_file(init_pid: int) -> str | None:
    """The file that lists the processes of the container whose init is ``init_pid`` (its
    pids cgroup, v1 or v2), when this machine shows it; None: every process is looked at."""
    try:
        with open(f"/proc/{init_pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        where = "/sys/fs/cgroup" if controllers == "" else \
            "/sys/fs/cgroup/pids" if "pids" in controllers.split(",") else None
        if where is not None and os.path.isfile(f"{where}{path}/cgroup.procs"):
            return f"{where}{path}/cgroup.procs"
    return None


def _command_processes(tag: str, leader: int, cid: str, procs_file: str | None) -> set[int]:
    """The live processes of one command in container ``cid``: those of its session (the
    session ``leader`` leads) and those carrying its tag."""
    entry = f"{PROGRAM_VAR}={tag}".encode()
    pids: list[int] | None = None
    if procs_file is not None:
        try:
            with open(procs_file) as f:
                pids = [int(line) for line in f.read().split()]
        except (OSError, ValueError):
            pids = None
    listed = pids is not None
    if pids is None:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    found: set[int] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields start after the last ")".
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) < 4 or fields[0] in (b"Z", b"X"):
            continue
        mine = bool(leader) and int(fields[3]) == leader
        if not mine:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    mine = entry in f.read().split(b"\0")
            except OSError:
                continue
        if mine and (listed or _in_container(pid, cid)):
            found.add(pid)
    return found


def _end_processes(tag: str, leader: int, cid: str, procs_file: str | None) -> None:
    """End what one command started and left running (:func:`_command_processes`), as the
    reaper ends a run's: stopped, scanning again until nothing new forks, then killed, and
    again while any is left (up to STREAM_GRACE_S). It blocks: call it in a thread."""
    def find(_groups: set[int]) -> set[int]:
        return _command_processes(tag, leader, cid, procs_file)

    if not find(set()):
        return
    sweep(set(), find, grace_s=0.0)
    deadline = time.monotonic() + STREAM_GRACE_S
    while find(set()) and time.monotonic() < deadline:
        time.sleep(0.01)
        # One forked between the last scan and the kill (a fork bomb's) is ended too.
        sweep(set(), find, grace_s=0.0)


def _in_container(pid: int, cid: str) -> bool:
    """Whether host process ``pid`` belongs to container ``cid`` (its cgroup names it): so a
    pid the daemon gives is never one of another process here."""
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as f:
            return cid.encode() in f.read()
    except OSError:
        return False


def _pidfd_of(pid: int, cid: str) -> int | None:
    if not pid or not hasattr(os, "pidfd_open") or not _in_container(pid, cid):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _file_of(stream: IO[bytes]) -> bytes:
    """The bytes of the one file a tar stream holds."""
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        member = tar.next()
        f = tar.extractfile(member) if member is not None and member.isfile() else None
        if f is None:
            raise FileNotFoundError(member.name if member is not None else "")
        return f.read()


def _extract(stream: IO[bytes], target: Path) -> None:
    """A tar stream of one path (a file, or a folder under its own name) unpacked into
    ``target``: a folder's contents into the folder, a file as ``target`` itself. Symbolic
    links are kept as the links they are (a virtualenv's ``python -> /usr/bin/python3``):
    nothing here follows one, and a member that would be written through one, or outside
    ``target``, or that is not a file, folder or link (a device, a fifo) is left out."""
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        first = tar.next()
        if first is None:
            raise FileNotFoundError(str(target))
        if first.isfile():
            f = tar.extractfile(first)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                if f is not None:
                    shutil.copyfileobj(f, out)
            return
        top = first.name.split("/", 1)[0]
        target.mkdir(parents=True, exist_ok=True)
        member: tarfile.TarInfo | None = first
        while member is not None:
            rel = member.name[len(top):].lstrip("/")
            if rel:
                member.name = rel
                tar.extract(member, target, filter=_as_data)
            member = tar.next()


def _as_data(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter, but a symbolic link keeps its target whatever it is (only
    its own name is checked); what the filter refuses is left out rather than failing the
    copy."""
    try:
        if member.issym():
            checked = tarfile.data_filter(member.replace(linkname=".", deep=False), dest)
            return checked.replace(linkname=member.linkname, deep=False)
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None
