"""The command: ``interplay view [FOLDER]``, and :class:`Viewer`, the server it runs (what
the tests and benchmarks start too)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import sys
import threading
from pathlib import Path
from typing import Any

from interplay._plumbing.listener import AsgiServer
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.view.app import make_app
from interplay.view.folder import Hub, RunsFolder, watch

log = get_logger("interplay.view")

#: The port tried first (its address can be bookmarked); when taken, the system's choice.
DEFAULT_PORT = 7557
#: Connections the view holds at most (each live page holds one for its events).
MAX_CONNECTIONS = 256


def _refusal(message: str, code: str | None) -> dict[str, Any]:
    return {"error": message, "code": code}


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Viewer:
    """``interplay view`` over ``root``: the app, its listener, and what follows the
    folder. ``async with Viewer(...) as v:`` serves at ``v.url`` until the block ends."""

    def __init__(self, root: str | Path, *, host: str = "127.0.0.1", port: int = 0,
                 poll_s: float | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise InterplayError(f"{root}: no such folder; name the folder that holds your "
                                 f"runs (the -o folders of `interplay eval`)")
        self.host, self.port, self.poll_s = host, port, poll_s
        self.folder = RunsFolder(self.root)
        self.hub = Hub()
        self._stop = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self.server: AsgiServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host = self.server.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.server.port}/"

    async def __aenter__(self) -> Viewer:
        await asyncio.to_thread(self.folder.scan)
        self.hub.loop = asyncio.get_running_loop()
        self.folder.on_read = lambda key: self.hub.publish(
            {"kind": "run", "run": key, "reading": True})
        allowed = None
        if loopback(self.host):
            allowed = ["127.0.0.1", "localhost", "::1", "[::1]"]
        app = make_app(self.folder, self.hub, allowed_hosts=allowed)
        self.server = AsgiServer(app, host=self.host, port=self.port, graceful_s=1.0,
                                 max_connections=MAX_CONNECTIONS, refusal=_refusal)
        try:
            await self.server.start()
        except OSError as exc:
            if self.port != DEFAULT_PORT or exc.errno != errno.EADDRINUSE:
                shown = f"[{self.host}]" if ":" in self.host else self.host
                raise InterplayError(f"cannot serve on {shown}:{self.port} "
                                     f"({exc.strerror or exc}); choose another --port or "
                                     f"--host") from None
            # The usual port is taken (another view): the system's choice.
            self.server = AsgiServer(app, host=self.host, port=0, graceful_s=1.0,
                                     max_connections=MAX_CONNECTIONS, refusal=_refusal)
            await self.server.start()
        self._watcher = asyncio.create_task(watch(self.folder, self.hub, self._stop,
                                                  poll_s=self.poll_s))
        # What a run's first page needs and takes seconds to import (matplotlib, the
        # plugins), made ready while the list is shown.
        threading.Thread(target=_warm, name="interplay-view-warm", daemon=True).start()
        log.info("view.start", output_path=str(self.folder.root), port=self.server.port,
                 runs=len(self.folder.runs))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        self.hub.close()
        if self._watcher is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._watcher, 10)
        if self.server is not None:
            await self.server.stop()


def _warm() -> None:
    from interplay.plugins import host as plugins
    from interplay.report import charts

    try:
        plugins.registry()  # a run's page reads which of its verifiers are judges
        charts.reward_distribution({1.0: 1})  # matplotlib imported, its fonts read
    except Exception:  # a plugin that fails is reported where it is used
        log.debug("view.warm_failed")


def add_view(sub: Any) -> None:
    p = sub.add_parser(
        "view", help="a local web page of every run under a folder, live while they run",
        description="Serve every run under FOLDER (the -o folders of `interplay eval`) as a "
        "read-only web page on this machine: the runs with their scores, each run's report "
        "with its episodes, and two runs side by side; runs in progress update as their "
        "episodes land. Nothing is fetched from the network.")
    p.add_argument("folder", nargs="?", default="results",
                   help="the folder that holds the runs (default: results)")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to serve on (default 127.0.0.1: this machine only, as "
                   "::1 is over IPv6; 0.0.0.0 or :: lets anyone who reaches this machine read "
                   "every run: there is no login)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"the port (default {DEFAULT_PORT}, or a free one when it is taken; "
                   f"0: a free one)")
    p.add_argument("--poll", type=float, default=None, metavar="SECONDS",
                   help="look for changes every SECONDS rather than wait for the system's "
                   "file events (a network filesystem, whose changes made elsewhere send none)")
    p.set_defaults(func=cmd_view)


def cmd_view(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise InterplayError(f"--port: expected 0 to 65535, got {args.port}")
    if args.poll is not None and not 0.1 <= args.poll <= 3600:
        raise InterplayError(f"--poll: expected 0.1 to 3600 seconds, got {args.poll}")
    viewer = Viewer(args.folder, host=args.host, port=args.port, poll_s=args.poll)

    async def serve() -> None:
        async with viewer:
            print(f"interplay view: {len(viewer.folder.runs)} run(s) under "
                  f"{viewer.folder.root}", file=sys.stderr)
            if not loopback(args.host):
                print(f"interplay view: serving on {args.host}: anyone who can reach this "
                      f"machine on port {viewer.server.port if viewer.server else args.port} "
                      f"can read every run under it (transcripts, configs); there is no "
                      f"login", file=sys.stderr)
            print(f"view: {viewer.url}", flush=True)
            await asyncio.Event().wait()

    from interplay._plumbing import aio as _aio

    with contextlib.suppress(KeyboardInterrupt):
        _aio.run(serve())
    return 0
