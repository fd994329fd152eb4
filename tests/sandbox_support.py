"""What the sandbox tests share: whether a Docker daemon answers here (:data:`needs_docker`,
which skips a test saying why where none does), the containers a test made, found by its own
label and never anyone else's, a plugin a run in a subprocess loads (an env whose one step runs
a command in the episode's sandbox, named uniquely per test so its containers carry its name),
and HTTP servers on 127.0.0.1 in threads of their own (what a program inside may or may not
reach)."""

from __future__ import annotations

import http.server
import json
import os
import secrets
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: The daemon the tests use: DOCKER_HOST's, else the default socket (what the backend uses).
DOCKER_HOST = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
BASE_IMAGE = "interplay-base:bookworm"


def _docker_missing() -> str | None:
    """Why the docker backend cannot be tested here, or None."""
    try:
        import docker
    except ModuleNotFoundError:
        return "the Docker SDK for Python is not installed (pip install 'interplay[docker]')"
    try:
        client = docker.APIClient(base_url=DOCKER_HOST, version="auto", timeout=10)
        client.ping()
    except Exception as exc:
        return (f"no Docker daemon answers at {DOCKER_HOST} ({type(exc).__name__}); "
                f"`bash .ci/setup --test` installs and starts one")
    try:
        client.inspect_image(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        return f"the image {BASE_IMAGE} is not built (`bash .ci/setup --test` builds it)"
    finally:
        client.close()
    return None


WHY_NO_DOCKER = _docker_missing()
#: A test against the real daemon: skipped, saying why, where none answers.
needs_docker = pytest.mark.skipif(WHY_NO_DOCKER is not None, reason=WHY_NO_DOCKER or "")
#: A test of the ``model`` network: it enters a container's network namespace (root).
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="network 'model' needs root (it enters a container's "
                                       "network namespace)")


def api() -> Any:
    """A client of the test daemon (the SDK's low-level one)."""
    import docker

    return docker.APIClient(base_url=DOCKER_HOST, version="auto", timeout=60)


def labelled(key: str, value: str) -> list[dict[str, Any]]:
    """The containers, running or not, labelled ``key=value``."""
    client = api()
    try:
        return client.containers(all=True, filters={"label": f"{key}={value}"})  # type: ignore[no-any-return]
    finally:
        client.close()


def remove_labelled(key: str, value: str) -> None:
    """Remove the containers labelled ``key=value`` (a test's own, after it)."""
    client = api()
    try:
        for c in client.containers(all=True, filters={"label": f"{key}={value}"}):
            client.remove_container(c["Id"], force=True, v=True)
    finally:
        client.close()


def wait_for(predicate: Callable[[], bool], what: str, within_s: float = 120.0) -> None:
    """Wait until ``predicate()`` (a bound for a failure, not a measure of speed)."""
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# -- a plugin for runs in a subprocess ------------------------------------------------------

PLUGIN = '''"""A test's env: each episode runs one shell command in its sandbox."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from interplay import Env, Register, Step, Task, Workspace, hookimpl


@attrs.define
class ProbeConfig:
    #: The shell command each episode runs in its sandbox ("{{idx}}" is its task's index).
    command: str = "true"
    #: How many tasks the env has.
    tasks: int = 1
    #: The command's time limit.
    timeout_s: float = 600.0
    #: The image each task names (none: the sandbox's own).
    image: str | None = None


class Work(Step):
    name = "{name}-work"
    writes = frozenset({{"exit_code", "output", "ending"}})

    def __init__(self, probe: ProbeConfig) -> None:
        super().__init__()
        self.probe = probe

    async def run(self, ctx: Any) -> None:
        sandbox = await ctx.sandbox()
        command = self.probe.command.replace("{{idx}}", str(ctx.task.idx))
        result = await sandbox.exec(["sh", "-c", command], timeout_s=self.probe.timeout_s)
        ctx.results["exit_code"] = result.exit_code
        ctx.results["output"] = result.output()
        ctx.results["ending"] = result.ending()


class Probe(Env):
    name = "{name}"
    Config: ClassVar[type] = ProbeConfig
    needs_sandbox = True

    def tasks(self) -> list[Task]:
        workspace = Workspace(image=self.config.image) if self.config.image else None
        return [Task(idx=i, prompt="work", workspace=workspace)
                for i in range(self.config.tasks)]

    def steps(self) -> list[Step]:
        return [Work(self.config)]

    def verifiers(self) -> list[Any]:
        return []


@hookimpl
def register_envs(register: Register) -> None:
    register(Probe)
'''


class ProbePlugin:
    """A plugin written into ``folder`` as an installed distribution (a module and its
    ``dist-info`` with the entry point), found by a subprocess given :meth:`env`. Its env,
    :attr:`name`, is unique to the test: each container of its episodes carries the label
    ``interplay.env=NAME``."""

    def __init__(self, folder: Path) -> None:
        self.name = f"probe-{secrets.token_hex(4)}"
        module = self.name.replace("-", "_")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{module}.py").write_text(PLUGIN.format(name=self.name))
        info = folder / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[interplay]\n{module} = {module}\n")
        self.folder = folder
        self.entry_point = module

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a subprocess that loads this plugin and no other."""
        path = os.pathsep.join(p for p in (str(self.folder), os.environ.get("PYTHONPATH"))
                               if p)
        return {**os.environ, "PYTHONPATH": path, "INTERPLAY_LOAD_PLUGINS": self.entry_point,
                **extra}

    def containers(self) -> list[dict[str, Any]]:
        """Its episodes' containers on the test daemon, running or not."""
        return labelled("interplay.env", self.name)

    def remove_containers(self) -> None:
        remove_labelled("interplay.env", self.name)

    def eval_argv(self, *args: str) -> list[str]:
        """``interplay eval NAME ARGS`` as the running interpreter starts it."""
        return [sys.executable, "-m", "interplay.cli", "eval", self.name, *args]


def records(out: Path) -> list[dict[str, Any]]:
    path = out / "episodes.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- servers on this machine ----------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.server.server_address[1]}".encode()  # type: ignore[index]
        self._send(body)

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        self._send(self.rfile.read(size))

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Threaded(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256


@contextmanager
def http_server() -> Iterator[str]:
    """An HTTP server on a free 127.0.0.1 port of this machine, in a thread: GET says which
    port it is, POST echoes its body. Its base URL."""
    server = _Threaded(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
