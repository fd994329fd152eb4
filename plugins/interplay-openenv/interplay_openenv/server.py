"""An OpenEnv app served locally for a run: uvicorn on a free 127.0.0.1 port, ready once it
answers ``GET /health``, stopped with the env (or at exit), and ended with the run however the
run ends (``interplay.processes.popen``: the run's reaper ends it after a ``kill -9`` too).

The app is named as uvicorn names it (``package.server.app:app``), or by its package alone
(``package``: OpenEnv's layout puts the app at ``package.server.app:app``); uvicorn imports it
with the working directory on the path, as ``uvicorn package.server.app:app`` would. A server
that does not start is one line: the app, and the last line it wrote.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from interplay import InterplayError, get_logger
from interplay.processes import popen

log = get_logger("interplay.openenv")

#: Where OpenEnv's layout (``openenv init``) puts an environment's app.
APP_IN_PACKAGE = ".server.app:app"
_STOP_GRACE_S = 5.0


def app_path(app: str) -> str:
    """``module:attribute`` for an app given either way."""
    return app if ":" in app else f"{app}{APP_IN_PACKAGE}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalServer:
    """One OpenEnv app served by a child process (``python -m uvicorn``)."""

    def __init__(self, app: str, *, start_timeout_s: float) -> None:
        self.app = app_path(app)
        self.start_timeout_s = start_timeout_s
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> str:
        """Start the app and wait until it answers; its base URL."""
        if self._proc is not None:
            return self.url
        for attempt in range(3):
            port = _free_port()
            fd, name = tempfile.mkstemp(prefix="interplay-openenv-", suffix=".log")
            self._log = Path(name)
            with os.fdopen(fd, "wb") as out:
                self._proc = popen(
                    [sys.executable, "-m", "uvicorn", self.app, "--host", "127.0.0.1",
                     "--port", str(port), "--log-level", "warning"],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            self.url = f"http://127.0.0.1:{port}"
            problem = self._wait_ready()
            if problem is None:
                log.info("openenv.server_started", app=self.app, url=self.url, pid=self.pid)
                return self.url
            self.stop()
            # Another process took the port between our probe and the server's bind: again.
            if "address already in use" not in problem.lower() or attempt == 2:
                raise InterplayError(f"env.app: the OpenEnv app {self.app!r} did not start: "
                                     f"{problem}")
        raise AssertionError("unreachable")

    def _wait_ready(self) -> str | None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        with httpx.Client(timeout=1.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                code = self._proc.poll()
                if code is not None:
                    return f"it exited with code {code}: {self._last_line()}"
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.url}/health").status_code == 200:
                        return None
                time.sleep(0.05)
        return (f"it did not answer GET /health within {self.start_timeout_s:g} s "
                f"(env.start_timeout_s); last output: {self._last_line()}")

    def _last_line(self) -> str:
        if self._log is None or not self._log.exists():
            return "(none)"
        lines = [ln.strip() for ln in self._log.read_text(errors="replace").splitlines()
                 if ln.strip()]
        return lines[-1] if lines else "(none)"

    def stop(self) -> None:
        """Stop the server and what it started (idempotent): SIGTERM to its process group,
        then SIGKILL after a grace period."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            log.info("openenv.server_stopped", app=self.app, pid=proc.pid)
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None


def _signal_group(pgid: int, sig: int) -> None:
    # popen starts the server in a session of its own: its process group is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
