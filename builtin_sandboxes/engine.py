"""A Docker Engine as the docker sandbox reaches it: through the Docker SDK for Python (the
Engine API's own client: API version negotiation, ``DOCKER_HOST`` and its TLS settings, build
contexts, archives; Podman's Docker-compatible socket answers it too), its calls run in a pool
of threads of their own, since the SDK blocks; and an exec's output, which may run for minutes,
read on the event loop from the attach stream this module opens itself (the Engine API's
``POST /exec/{id}/start`` upgraded to a raw stream, its frames demultiplexed), so a slow
command holds no thread and no byte of its output is lost to a buffered reader.

Also: images by name or built from a Dockerfile, cached by the content of its build context;
and the tar archives files travel in.

This module owns talking to the daemon; it must not decide what a sandbox runs (the
:mod:`~interplay.builtin_sandboxes.docker` backend does).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import errno
import hashlib
import io
import json
import os
import posixpath
import ssl
import tarfile
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from interplay.contracts.sandbox import BoundedOutput, SandboxError
from interplay.errors import InterplayError
from interplay.log import get_logger

log = get_logger("interplay.contracts.sandbox.docker")

T = TypeVar("T")

#: Where the daemon is when neither the settings nor ``DOCKER_HOST`` say.
DEFAULT_HOST = "unix:///var/run/docker.sock"
INSTALL_HINT = ("the docker sandbox needs the Docker SDK for Python: "
                "pip install 'interplay[docker]'")
#: The label every container a run makes carries: the run's owner tag (the reaper's).
OWNER_LABEL = "interplay.owner"
#: The repository images built from a task's Dockerfile are tagged in.
BUILT_REPOSITORY = "interplay-built"
#: Threads that make the SDK's (blocking) calls, for every episode of a process.
THREADS = 32


def sdk() -> Any:
    try:
        import docker
    except ModuleNotFoundError:
        raise InterplayError(INSTALL_HINT) from None
    return docker


def host_of(configured: str | None) -> str:
    """The daemon's address: the setting, else ``DOCKER_HOST``, else the default socket."""
    return configured or os.environ.get("DOCKER_HOST") or DEFAULT_HOST


class Daemon:
    """One daemon, as every episode of this process reaches it (:func:`daemon`)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._client: Any = None
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(THREADS,
                                                           thread_name_prefix="docker")
        #: Build locks by image tag, each with the event loop it belongs to: one build of a
        #: context at a time in this process. A lock is bound to one loop, and a process may
        #: run several one after another (each asyncio.run of a rollout API's caller).
        self._building: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}

    @property
    def client(self) -> Any:
        """The SDK's low-level client (made on first use; its version negotiated)."""
        with self._lock:
            if self._client is None:
                docker = sdk()
                tls = None
                if os.environ.get("DOCKER_TLS_VERIFY") and not self.host.startswith("unix:"):
                    tls = docker.tls.TLSConfig(**_tls_files())
                self._client = docker.APIClient(base_url=self.host, version="auto",
                                                timeout=120, tls=tls,
                                                max_pool_size=THREADS)
            return self._client

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in this daemon's threads; the SDK's errors become one-line
        SandboxErrors naming the daemon."""
        loop = asyncio.get_running_loop()

        def run() -> T:
            return fn(*args, **kwargs)

        try:
            return await loop.run_in_executor(self._pool, run)
        except SandboxError:
            raise
        except Exception as exc:
            raise self.error(exc) from None

    def error(self, exc: BaseException) -> SandboxError:
        docker = sdk()
        if isinstance(exc, docker.errors.APIError):
            why = exc.explanation if exc.explanation else str(exc)
            if isinstance(why, bytes):
                why = why.decode(errors="replace")
            return SandboxError(f"the Docker daemon at {self.host} refused: "
                                f"{str(why).strip().splitlines()[0] if why else exc}")
        if isinstance(exc, docker.errors.DockerException | OSError):
            return SandboxError(f"cannot reach the Docker daemon at {self.host} "
                                f"({unreachable(exc)}); is it running?")
        return SandboxError(f"the Docker daemon at {self.host}: {type(exc).__name__}: "
                            f"{_first_line(exc)}")

    def ping(self) -> str | None:
        """Why the daemon does not answer (one clause), or None when it does."""
        try:
            self.client.ping()
        except InterplayError as exc:
            return exc.message
        except Exception as exc:
            return unreachable(exc)
        return None

    # -- exec --------------------------------------------------------------------------------

    async def exec_stream(self, exec_id: str, stdin: bytes | None, stdout: BoundedOutput,
                          stderr: BoundedOutput, *,
                          requested: asyncio.Future[None] | None = None) -> None:
        """Start exec ``exec_id`` attached, feed it ``stdin`` (then close its stdin), and read
        its frames into ``stdout`` and ``stderr`` until the stream ends (the command and
        whatever held its output are gone). ``requested`` is resolved once the start has been
        asked for (from then on the command may run). Cancelled, it closes the stream."""
        reader, writer = await self._open()
        try:
            version = self.client.api_version
            body = json.dumps({"Detach": False, "Tty": False}).encode()
            writer.write(
                f"POST /v{version}/exec/{exec_id}/start HTTP/1.1\r\n"
                f"Host: docker\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
                .encode() + body)
            if requested is not None and not requested.done():
                requested.set_result(None)
            await writer.drain()
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                raise SandboxError(f"the Docker daemon at {self.host} closed the connection "
                                   f"before starting a command") from None
            status = head.split(b" ", 2)[1:2]
            if status not in ([b"101"], [b"200"]):
                raise SandboxError(f"the Docker daemon at {self.host} would not start the "
                                   f"command: {head.splitlines()[0].decode(errors='replace')}")
            # Fed while its output is read: a command that writes as it reads (cat) would
            # otherwise fill its output's buffers and stop reading, and the feed wait forever.
            feeding = asyncio.ensure_future(_feed(writer, stdin))
            try:
                while True:
                    try:
                        frame = await reader.readexactly(8)
                    except asyncio.IncompleteReadError:
                        return
                    size = int.from_bytes(frame[4:8], "big")
                    sink = stderr if frame[0] == 2 else stdout
                    while size > 0:
                        chunk = await reader.read(min(size, 1 << 16))
                        if not chunk:
                            return
                        sink.add(chunk)
                        size -= len(chunk)
            finally:
                feeding.cancel()
        except (ConnectionError, asyncio.LimitOverrunError) as exc:
            raise SandboxError(f"the Docker daemon at {self.host} dropped a command's "
                               f"output stream ({type(exc).__name__})") from None
        finally:
            writer.close()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        url = urllib.parse.urlparse(self.host)
        try:
            if url.scheme in ("unix", "http+unix"):
                return await asyncio.open_unix_connection(url.path, limit=1 << 20)
            context = None
            if url.scheme == "https" or os.environ.get("DOCKER_TLS_VERIFY"):
                files = _tls_files()
                context = ssl.create_default_context(cafile=files.get("ca_cert"))
                if files.get("client_cert"):
                    context.load_cert_chain(*files["client_cert"])
            return await asyncio.open_connection(url.hostname, url.port or 2375, ssl=context,
                                                 limit=1 << 20)
        except OSError as exc:
            raise SandboxError(f"cannot reach the Docker daemon at {self.host} "
                               f"({exc.strerror or type(exc).__name__}); is it running?") from None

    # -- images ------------------------------------------------------------------------------

    async def has_image(self, name: str) -> dict[str, Any] | None:
        """The image's inspection, or None when the daemon has no image of that name."""
        docker = sdk()

        def inspect() -> dict[str, Any] | None:
            try:
                return self.client.inspect_image(name)  # type: ignore[no-any-return]
            except docker.errors.ImageNotFound:
                return None

        return await self.call(inspect)

    async def pull(self, name: str) -> None:
        repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else \
            (name, "", "latest")
        await self.call(self.client.pull, repository, tag=tag or "latest")

    async def build(self, path: str, *, timeout_s: float,
                    setting: str = "sandbox.build_timeout_s") -> str:
        """The image built from the Dockerfile at ``path`` (its folder the build context),
        tagged by the context's content: built once, found again after. SandboxError with
        the build's last lines when it fails, naming ``setting`` when it takes longer than
        ``timeout_s``."""
        dockerfile = Path(path)
        context = dockerfile.parent
        digest = await asyncio.to_thread(context_digest, context, dockerfile.name)
        tag = f"{BUILT_REPOSITORY}:{digest[:20]}"
        loop = asyncio.get_running_loop()
        held = self._building.get(tag)
        if held is None or held[0] is not loop:
            held = self._building[tag] = (loop, asyncio.Lock())
        async with held[1]:
            if await self.has_image(tag) is not None:
                return tag
            log.info("sandbox.image_build", image=tag, context_path=str(context))
            lines: list[str] = []
            deadline = time.monotonic() + timeout_s
            late: list[bool] = []

            def run() -> str | None:
                # The build's network is the host's (the daemon has no bridge): a Dockerfile's
                # RUN apt-get reaches what this machine reaches. Past the deadline the stream
                # is closed, and the daemon cancels a build whose client went (nothing is
                # tagged): at its next line, or when a step says nothing for timeout_s.
                stream = self.client.build(path=str(context), dockerfile=dockerfile.name,
                                           tag=tag, rm=True, forcerm=True, decode=True,
                                           network_mode="host", timeout=timeout_s,
                                           labels={"interplay.context": digest})
                try:
                    for event in stream:
                        if time.monotonic() > deadline:
                            late.append(True)
                            return None
                        if not isinstance(event, dict):
                            continue
                        if "error" in event:
                            return str(event.get("error") or "").strip()
                        text = event.get("stream")
                        if isinstance(text, str) and text.strip():
                            lines.extend(t for t in text.splitlines() if t.strip())
                            del lines[:-20]
                except Exception:
                    if time.monotonic() >= deadline:  # the read's own limit: a silent step
                        late.append(True)
                        return None
                    raise
                finally:
                    stream.close()
                return None

            try:
                failure = await asyncio.wait_for(self.call(run), timeout_s)
            except TimeoutError:
                late.append(True)
            if late:
                raise SandboxError(f"Dockerfile {str(dockerfile)!r} did not build within "
                                   f"{timeout_s:g} s ({setting})")
            if failure is not None:
                last = " | ".join(lines[-3:])
                raise SandboxError(f"Dockerfile {str(dockerfile)!r} does not build: {failure}"
                                   + (f" (its last lines: {last})" if last else ""))
            return tag

    # -- archives ----------------------------------------------------------------------------

    async def put_tar(self, container: str, data: bytes | IO[bytes]) -> None:
        """Unpack ``data`` (a tar whose names are paths from ``/``, as bytes or a file read
        from where it is) in ``container``."""
        ok = await self.call(self.client.put_archive, container, "/", data)
        if not ok:
            raise SandboxError(f"the Docker daemon at {self.host} would not take the files")

    async def read_tar(self, container: str, path: str, read: Callable[[IO[bytes]], T], *,
                       max_bytes: int, file: bool = False) -> T:
        """``read(stream)`` of the tar of ``path`` in ``container`` as it arrives (in this
        daemon's threads; what it returns is returned). A symbolic link at ``path`` is
        followed (a link inside a folder stays a link). ``file``: ``path`` must be a file of
        at most ``max_bytes`` (IsADirectoryError, or SandboxError, told before any of it is
        read); else the stream raises SandboxError once it has given ``max_bytes``.
        FileNotFoundError when there is no such path.

        The archive's response is closed before this returns, however ``read`` ends: the
        daemon holds the container's lock while it streams one, and every later call on the
        container (a file put in) would wait until it is closed."""
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._pool, self._archive, container, path, read, max_bytes, file)
        except (FileNotFoundError, IsADirectoryError, SandboxError):
            raise
        except Exception as exc:
            raise self.error(exc) from None

    def _archive(self, container: str, path: str, read: Callable[[IO[bytes]], T],
                 max_bytes: int, file: bool) -> T:
        docker = sdk()
        client = self.client
        url = (f"{client.base_url}/v{client.api_version}/containers/"
               f"{urllib.parse.quote(container, safe='')}/archive")
        asked = path
        for _ in range(_LINKS_FOLLOWED):
            response = client.get(url, params={"path": path}, stream=True,
                                  headers={"Accept-Encoding": "identity"})
            with contextlib.closing(response):
                if response.status_code == 404:
                    if "no such container" in response.text.lower():
                        raise SandboxError("the sandbox's container is gone (removed outside "
                                           "interplay, or its daemon restarted)")
                    raise FileNotFoundError(asked)
                if response.status_code >= 400:
                    raise docker.errors.APIError(str(response.status_code), response=response,
                                                 explanation=response.text)
                stat = _path_stat(response.headers.get("X-Docker-Container-Path-Stat"))
                mode = int(stat.get("mode") or 0)
                if mode & _MODE_SYMLINK:
                    target = str(stat.get("linkTarget") or "")
                    path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
                    continue
                size = int(stat.get("size") or 0)
                if file and mode & _MODE_DIR:
                    raise IsADirectoryError(asked)
                if file and size > max_bytes:
                    raise SandboxError(f"{asked} is {size} bytes, more than the {max_bytes} "
                                       f"asked for")
                bound = max_bytes + _TAR_SLACK if file else max_bytes
                return read(_Bounded(response.raw, bound, asked, max_bytes))
        raise SandboxError(f"{asked}: more than {_LINKS_FOLLOWED} symbolic links in a row")


class _Bounded(io.RawIOBase):
    """A response's body read as a file, SandboxError once more than ``bound`` bytes came."""

    def __init__(self, raw: Any, bound: int, path: str, asked: int) -> None:
        self.raw = raw
        self.bound = bound
        self.path = path
        self.asked = asked
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        self.total += len(data)
        if self.total > self.bound:
            raise SandboxError(f"{self.path} holds more than {self.asked} bytes (the most "
                               f"asked for)")
        buffer[:len(data)] = data
        return len(data)


#: How many symbolic links in a row a path is followed through (Linux's own limit).
_LINKS_FOLLOWED = 40
#: The Engine API's stat of a path: Go's os.FileMode bits.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
#: A file's tar holds its header and padding beside its bytes.
_TAR_SLACK = 64 * 1024


def _path_stat(header: str | None) -> dict[str, Any]:
    if not header:
        return {}
    try:
        found = json.loads(base64.b64decode(header))
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


async def _feed(writer: asyncio.StreamWriter, data: bytes | None) -> None:
    """``data`` to a command's stdin, then its end. A command that exits without reading it
    all just does not get the rest."""
    try:
        view = memoryview(data or b"")
        for start in range(0, len(view), 1 << 16):
            writer.write(view[start:start + (1 << 16)])
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:  # the command's stdin is closed (it exited): the rest is not for it
        pass


_daemons: dict[str, Daemon] = {}
_daemons_lock = threading.Lock()


def daemon(host: str | None) -> Daemon:
    """This process's :class:`Daemon` for ``host`` (see :func:`host_of`)."""
    where = host_of(host)
    with _daemons_lock:
        found = _daemons.get(where)
        if found is None:
            found = _daemons[where] = Daemon(where)
        return found


def _forget_daemons() -> None:
    """A forked child makes its own clients: the parent's threads and connections are not
    its own."""
    global _daemons_lock
    _daemons.clear()
    _daemons_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_daemons)


def _tls_files() -> dict[str, Any]:
    where = Path(os.environ.get("DOCKER_CERT_PATH") or Path.home() / ".docker")
    out: dict[str, Any] = {}
    if (where / "ca.pem").is_file():
        out["ca_cert"] = str(where / "ca.pem")
        out["verify"] = True
    if (where / "cert.pem").is_file() and (where / "key.pem").is_file():
        out["client_cert"] = (str(where / "cert.pem"), str(where / "key.pem"))
    return out


#: What a failure to connect means, by the errno at its root.
_UNREACHABLE = {errno.ENOENT: "no such socket", errno.ECONNREFUSED: "nothing listens there",
                errno.EACCES: "permission denied: run as root or join its group",
                errno.ETIMEDOUT: "timed out", errno.EHOSTUNREACH: "no route to it"}


def unreachable(exc: BaseException) -> str:
    """Why a connection to a daemon failed, in a few words: what the OS error at the root of
    the client's chain of exceptions means, else the exception's first line."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        found = todo.pop()
        if id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, OSError) and found.errno in _UNREACHABLE:
            return _UNREACHABLE[found.errno]
        todo.extend(a for a in found.args if isinstance(a, BaseException))
        todo.extend(e for e in (found.__cause__, found.__context__) if e is not None)
        reason = getattr(found, "reason", None)  # urllib3's errors keep theirs here
        if isinstance(reason, BaseException):
            todo.append(reason)
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def context_digest(context: Path, dockerfile: str) -> str:
    """SHA-256 of a build context: every file's path, mode and content, in order, and the
    Dockerfile's name (what a build reads; a ``.dockerignore`` is content like the rest).
    SandboxError when there is no such Dockerfile."""
    if not (context / dockerfile).is_file():
        raise SandboxError(f"Dockerfile {str(context / dockerfile)!r} does not exist")
    h = hashlib.sha256(dockerfile.encode() + b"\0")
    for path in sorted(_files(context)):
        rel = path.relative_to(context).as_posix()
        st = path.lstat()
        h.update(rel.encode() + b"\0" + oct(st.st_mode).encode() + b"\0")
        if path.is_symlink():
            h.update(os.readlink(path).encode())
        else:
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def _files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            yield Path(dirpath) / name


def tar_of(entries: Sequence[tuple[str, bytes, int]]) -> bytes:
    """A tar of files ``(path from /, content, mode)``, their folders made as they go."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, content, mode in entries:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(content)
            info.mode = mode
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def tar_folder(source: Path, target: str) -> IO[bytes]:
    """A tar of the file or folder ``source`` placed at ``target`` (a folder's contents under
    ``target``), symlinks kept as links, in a temporary file (a folder may be large)."""
    if not source.exists():
        raise FileNotFoundError(str(source))
    out = tempfile.TemporaryFile()
    base = target.strip("/")
    try:
        with tarfile.open(fileobj=out, mode="w") as tar:
            if source.is_dir():
                tar.add(str(source), arcname=base or ".", recursive=True)
            else:
                tar.add(str(source), arcname=base)
        out.seek(0)
    except BaseException:
        out.close()
        raise
    return out


def labels_filter(labels: Mapping[str, str]) -> dict[str, list[str]]:
    return {"label": [f"{k}={v}" for k, v in labels.items()]}
