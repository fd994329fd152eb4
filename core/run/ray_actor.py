"""What runs on a Ray node for ``--executor ray``: :class:`EpisodeActor`, an async actor that
runs many episodes at once on its own event loop, with its own model clients and its own
interception server on the node's 127.0.0.1 for the harness programs it starts there.

It loads the plugins and the config as the driver did, checks that the run's model endpoints
can be connected to from its node, and reports what it found; the driver
(:mod:`interplay.run.ray_executor`) decides whether the run can go on. It hands back each
episode as its line in ``episodes.jsonl`` and never touches the results folder. Importing it
needs no Ray: ``ray.remote`` makes the class an actor when a run starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from interplay import log as log_mod
from interplay.errors import InterplayError
from interplay.plugins import host as plugins
from interplay.run import config, results
from interplay.run.episode import RunResources
from interplay.run.executor import collector_tuned_for_runs, prepare_process, run_one
from interplay.values.records import Task

if TYPE_CHECKING:
    from interplay.config.endpoint import Endpoint
    from interplay.contracts.env import Env
    from interplay.run.config import RunConfig

_PROBE_TIMEOUT_S = 5.0


class EpisodeActor:
    """Runs episodes on a Ray node, many at once on the actor's event loop."""

    def __init__(self, setup: Mapping[str, Any]) -> None:
        self._setup = setup
        self._env: Env | None = None
        self._seed = int(setup["seed"])
        self._resources: RunResources | None = None
        self._running: set[asyncio.Task[Any]] = set()
        self._tuned = contextlib.ExitStack()

    async def ready(self) -> dict[str, Any]:
        """Load the plugins and the config as the driver did and check what the episodes will
        reach; report what this node has (the driver decides whether it can run)."""
        setup = self._setup
        report: dict[str, Any] = {"host": _node_ip(), "hostname": socket.gethostname(),
                                  "pid": os.getpid(),
                                  "plugins": {}, "failed": {}, "unreachable": {}}
        prepare_process()
        os.environ.update(setup["environ"])
        for key in setup["unset"]:
            os.environ.pop(key, None)
        log_mod.configure(**setup["log"])
        try:
            host = plugins.reset(load_entry_points=bool(setup["entry_points"]))
            for info in host.plugin_infos(include_builtins=False):
                if info.error is None:
                    report["plugins"][info.name] = [info.package, info.version]
                else:
                    report["failed"][info.name] = info.error
            cfg, env, _ = config.resolve(setup["config"])
        except Exception as exc:
            report["error"] = f"{type(exc).__name__}: {exc}"
            return report
        self._env = env
        share = int(setup["share"])
        self._resources = RunResources(endpoint=cfg.model, seats=cfg.seats,
                                       interception=cfg.interception, sandbox=cfg.sandbox,
                                       max_connections=share * max(1, len(env.seats)))
        try:
            # The seats' programs, where the episodes will run.
            config.check_harnesses(env, self._resources)
        except InterplayError as exc:
            report["error"] = str(exc)
            return report
        for endpoint in endpoints(cfg, env, self._resources):
            reason = await _unreachable(str(endpoint.base_url))
            if reason:
                report["unreachable"][str(endpoint.base_url)] = reason
        self._tuned.enter_context(collector_tuned_for_runs())
        return report

    async def run(self, task: Task, rollout: int,
                  ) -> tuple[dict[str, Any], bytes, bytes | None]:
        """One episode: its slim record, its line in episodes.jsonl and its side file's
        content (None when its line is whole)."""
        assert self._env is not None
        me = asyncio.current_task()
        if me is not None:
            self._running.add(me)
        try:
            episode = await run_one(self._env, task, rollout, resources=self._resources,
                                    seed=self._seed)
        finally:
            self._running.discard(me)  # type: ignore[arg-type]
        return (results.slim_episode(episode), *results.episode_parts(episode))

    async def stop(self) -> None:
        """Cancel the running episodes and let go of what they shared."""
        for job in list(self._running):
            job.cancel()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        if self._resources is not None:
            await self._resources.aclose()
        self._tuned.close()


def _node_ip() -> str:
    import ray

    return str(ray.util.get_node_ip_address())


async def _unreachable(url: str) -> str | None:
    """Why ``url``'s host cannot be connected to from here (through the proxy the model client
    would use), or None when it can. Only a connection: what answers is the episodes' to see."""
    parts = urllib.parse.urlsplit(url)
    target = parts
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        target = urllib.parse.urlsplit(proxy)
    host = target.hostname or ""
    port = target.port or (443 if target.scheme == "https" else 80)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                           _PROBE_TIMEOUT_S)
    except TimeoutError:
        return f"no answer within {_PROBE_TIMEOUT_S:g} s"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


def endpoints(cfg: RunConfig, env: Env, resources: RunResources | None = None) -> list[Endpoint]:
    """The endpoints the run's episodes call: the run's model and any seat's own."""
    resources = resources or RunResources(endpoint=cfg.model, seats=cfg.seats)
    found = [cfg.model] + [m for s in env.seats if (m := resources.seat(env, s).model)]
    return [e for i, e in enumerate(found) if e.base_url and e not in found[:i]]
