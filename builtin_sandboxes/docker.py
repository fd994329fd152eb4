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
import io
import os
import posixpath
import secrets
import signal
import sys
import tarfile
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import attrs

from interplay.builtin_sandboxes import engine
from interplay.builtin_sandboxes.netns import Forwarder
from interplay.log import get_logger
from interplay.processes import (
    PROGRAM_VAR,
    end_tagged,
    forget_program,
    note_program,
    owner_tag,
    reap_with,
)
from interplay.records import Workspace
from interplay.sandbox import (
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

log = get_logger("interplay.sandbox.docker")

Network = Literal["none", "model", "host"]
#: The image a sandbox starts from when neither the task nor the settings name one: Debian
#: 12 with python3, bash and git, built from Debian's packages (docs/sandboxes.md).
BASE_IMAGE = "interplay-base:bookworm"
#: Seconds between checks of what a container has written, while commands run in it.
DISK_CHECK_S = 2.0
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
        self._image: str | None = None
        self._network: str = "none"
        self._env: dict[str, str] = {}
        self._forwarder: Forwarder | None = None
        self._deadline = 0.0
        #: The tags of the commands running, each with why it was stopped (None: it was not).
        self._running: dict[str, str | None] = {}
        self._disk_task: asyncio.Task[None] | None = None
        self._disk_spent: str | None = None
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
                f"--iptables=false, docs/sandboxes.md), name another with sandbox.host, or "
                f"set sandbox.kind = \"local\" to run in a folder of this machine, without "
                f"isolation"]

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

    async def start(self, plan: SandboxPlan) -> None:
        cfg: DockerConfig = self.config
        ws = plan.workspace
        self._image = await self._image_for(ws)
        inspected = await self._daemon.has_image(self._image) or {}
        own_dir = (inspected.get("Config") or {}).get("WorkingDir") or ""
        self._workdir = ws.workdir or own_dir or "/workspace"
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
        created = await self._daemon.call(
            api.create_container, self._image, command=["sleep", "infinity"],
            working_dir=self._workdir, labels=labels, host_config=host_config,
            environment=self._env, hostname="sandbox", detach=True)
        self._id = str(created["Id"])
        await self._daemon.call(api.start, self._id)
        state = (await self._daemon.call(api.inspect_container, self._id)).get("State") or {}
        if not state.get("Running"):
            raise SandboxError(f"the container of image {self._image!r} did not keep running "
                               f"(exit code {state.get('ExitCode')}): the image needs "
                               f"`sleep` (coreutils or busybox)")
        self._deadline = time.monotonic() + cfg.wall_s
        if self._network == "model":
            self._forwarder = Forwarder(int(state["Pid"]))
        log.debug("sandbox.started", kind=self.name, container=self._id[:12],
                  network=self._network)

    async def _image_for(self, ws: Workspace) -> str:
        cfg: DockerConfig = self.config
        if ws.dockerfile is not None:
            return await self._daemon.build(ws.dockerfile, timeout_s=cfg.build_timeout_s)
        name = ws.image or cfg.image
        if await self._daemon.has_image(name) is not None:
            return name
        if cfg.pull:
            await self._daemon.pull(name)
            return name
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
            return ExecResult(exit_code=None, stopped=self._wall_spent())
        asked = EXEC_TIMEOUT_S if timeout_s is None else timeout_s
        limit = min(asked, left)
        tag = secrets.token_hex(16)
        environment = {**self._env, **(env or {}), PROGRAM_VAR: tag}
        data = stdin.encode() if isinstance(stdin, str) else stdin
        api = self._daemon.client
        created = await self._daemon.call(
            api.exec_create, cid, list(argv), stdin=data is not None,
            environment=[f"{k}={v}" for k, v in environment.items()],
            workdir=self._path(cwd) if cwd else self._workdir,
            user=user or self.config.user or "")
        exec_id = str(created["Id"])
        out, err = BoundedOutput(output_bytes, on_stdout), BoundedOutput(output_bytes)
        self._running[tag] = None
        self._watch_disk()
        t0 = time.monotonic()
        stream = asyncio.ensure_future(self._daemon.exec_stream(exec_id, data, out, err))
        exited = asyncio.ensure_future(self._exited(exec_id, cid, tag, stream))
        timed_out = False
        try:
            done, _ = await asyncio.wait({stream, exited}, timeout=limit,
                                         return_when=asyncio.FIRST_COMPLETED)
            timed_out = not done
        finally:
            # Its end (an exit, its time limit, a cancellation): what it left running goes,
            # found by its tag; then its output's stream closes.
            await asyncio.shield(self._end(exec_id, tag, cid))
            try:
                await asyncio.wait_for(asyncio.shield(stream), 10)
            except (TimeoutError, SandboxError):
                stream.cancel()
            except asyncio.CancelledError:
                stream.cancel()
                raise
            exited.cancel()
            forget_program(tag)
        reason = self._running.pop(tag, None)
        inspected = await self._daemon.call(api.exec_inspect, exec_id)
        code = inspected.get("ExitCode")
        stopped = None
        if reason is not None:
            timed_out, stopped, code = False, reason, None
        elif timed_out:
            code = None
            if limit < asked:
                timed_out, stopped = False, self._wall_spent()
        failure = stream.exception() if stream.done() and not stream.cancelled() else None
        if failure is not None and code is None and not timed_out and stopped is None:
            raise failure
        return ExecResult(exit_code=code if isinstance(code, int) else None,
                          stdout=out.text(), stderr=err.text(), timed_out=timed_out,
                          stdout_cut=out.cut, stderr_cut=err.cut,
                          duration_s=time.monotonic() - t0, stopped=stopped)

    def _wall_spent(self) -> str:
        return f"the sandbox's wall time of {self.config.wall_s:g} s (sandbox.wall_s) is spent"

    async def _exited(self, exec_id: str, cid: str, tag: str,
                      stream: asyncio.Future[None]) -> int | None:
        """Wait until the command's own process has exited (not what it left holding its
        output): by a pidfd on it when the daemon's /proc is this machine's, else by asking
        the daemon. Its host pid, when known."""
        api = self._daemon.client
        pid = 0
        for _ in range(200):
            info = await self._daemon.call(api.exec_inspect, exec_id)
            pid = int(info.get("Pid") or 0)
            if not info.get("Running") and (pid or stream.done()):
                return pid or None
            if pid:
                break
            await asyncio.sleep(0.005)
        if pid and _in_container(pid, cid):
            # The command's own process as this machine sees it: the requests it makes with
            # a trace's secret are its own (interplay.processes.caller).
            note_program(tag, pid)
        fd = _pidfd_of(pid, cid)
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
            return pid
        while True:
            if not (await self._daemon.call(api.exec_inspect, exec_id)).get("Running"):
                return pid or None
            await asyncio.sleep(0.2)

    async def _end(self, exec_id: str, tag: str, cid: str) -> None:
        await asyncio.to_thread(end_tagged, PROGRAM_VAR, tag, grace_s=0.0)
        # One that cleared its environment (env -i) still goes, by its own pid.
        with contextlib.suppress(Exception):
            info = await self._daemon.call(self._daemon.client.exec_inspect, exec_id)
            pid = int(info.get("Pid") or 0)
            if info.get("Running") and pid and _in_container(pid, cid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    # -- disk ----------------------------------------------------------------------------------

    def _watch_disk(self) -> None:
        if self.config.disk_mb is None or (self._disk_task and not self._disk_task.done()):
            return
        self._disk_task = asyncio.ensure_future(self._disk_watch())

    async def _disk_watch(self) -> None:
        limit = self.config.disk_mb * 1024 * 1024
        api = self._daemon.client
        while self._running and self._id is not None and not self._stopped:
            await asyncio.sleep(DISK_CHECK_S)
            try:
                info = await self._daemon.call(api.inspect_container, self._id, size=True)
            except SandboxError:
                return
            used = int(info.get("SizeRw") or 0)
            if used > limit:
                self._disk_spent = (f"the sandbox's disk limit of {self.config.disk_mb} MB "
                                    f"(sandbox.disk_mb) is spent")
                log.warning("sandbox.disk_spent", kind=self.name, container=self._id[:12],
                            bytes=used)
                for tag in list(self._running):
                    self._running[tag] = self._disk_spent
                    await asyncio.to_thread(end_tagged, PROGRAM_VAR, tag, grace_s=0.0)
                return

    # -- files -----------------------------------------------------------------------------------

    async def read_file(self, path: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes:
        data, _ = await self._daemon.get_tar(self._container(), self._path(path),
                                                max_bytes=max_bytes + 64 * 1024)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = next((m for m in tar.getmembers()), None)
            if member is None or not member.isfile():
                raise IsADirectoryError(path) if member is not None and member.isdir() \
                    else FileNotFoundError(path)
            if member.size > max_bytes:
                raise SandboxError(f"{path} is {member.size} bytes, more than the "
                                   f"{max_bytes} asked for")
            f = tar.extractfile(member)
            return f.read() if f is not None else b""

    async def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        content = data.encode() if isinstance(data, str) else data
        await self._daemon.put_tar(self._container(),
                                   engine.tar_of([(self._path(path), content, mode)]))

    async def put(self, source: Path, target: str) -> None:
        data = await asyncio.to_thread(engine.tar_folder, source, self._path(target))
        await self._daemon.put_tar(self._container(), data)

    async def get(self, source: str, target: Path, *,
                  max_bytes: int = 1024 * 1024 * 1024) -> None:
        data, _ = await self._daemon.get_tar(self._container(), self._path(source),
                                             max_bytes=max_bytes)
        await asyncio.to_thread(_extract, data, target)

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
        return {"container": (self._id or "")[:12], "network": self._network,
                "limits": dict(self._limits),
                **({"forwarded_connections": self._forwarder.connections}
                   if self._forwarder is not None else {})}


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


def _extract(data: bytes, target: Path) -> None:
    """A tar of one path (a file, or a folder under its own name) unpacked into ``target``:
    a folder's contents into the folder, a file as ``target`` itself."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        if not members:
            raise FileNotFoundError(str(target))
        top = members[0].name.split("/", 1)[0]
        if members[0].isfile() and len(members) == 1:
            target.parent.mkdir(parents=True, exist_ok=True)
            f = tar.extractfile(members[0])
            target.write_bytes(f.read() if f is not None else b"")
            return
        target.mkdir(parents=True, exist_ok=True)
        keep = []
        for m in members:
            rel = m.name[len(top):].lstrip("/")
            if not rel:
                continue
            m.name = rel
            keep.append(m)
        tar.extractall(target, members=keep, filter="data")
