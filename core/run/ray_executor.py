"""Episodes on a Ray cluster: ``interplay eval --executor ray [--ray-address ADDRESS]``, the
``ray`` executor (:mod:`interplay.run.executor`).

The driver (the ``interplay eval`` process) connects to the cluster (``ray.init``, within
``ray_connect_timeout_s``, its event loop free to answer a signal meanwhile; with no address
Ray starts a local cluster on this machine, which ends with the run), starts one async actor
(:class:`~interplay.run.ray_actor.EpisodeActor`) per CPU the cluster has free, at most one per
episode of ``-c``, spread over the nodes, and gives each its share of ``-c``. Async actors
rather than one Ray task per episode: a task holds a worker process for its whole length, so
1,000 episodes at once would take 1,000 processes, where an actor's event loop runs hundreds.

The driver stays the only writer of the results folder, exactly as with ``-w``
(:mod:`interplay.run.workers`): it hands (task, rollout) pairs to actors as they have room, the
task itself travelling with its pair (a taskset file need not be on every node), and appends
each finished episode's line, which the actor made. Seeds come from (seed, task, rollout), so
an episode does not depend on where it ran.

Faults: an actor that dies (its process killed, its node lost) costs only the episodes it was
running, recorded as ``worker_error``; its pairs not yet started go to the others. A plugin
that does not load on a node, a model endpoint a node cannot reach, or a runtime_env a node
cannot set up stops the run before any episode, in one line that names the node. Ctrl-C or
SIGTERM cancels the actors' episodes (their harnesses clean up) and kills the actors; a driver
killed outright takes its actors along (Ray ends a job's actors with its driver) and, when it
started the local cluster, the cluster too: the cluster's processes carry this process's tag
(:mod:`interplay.processes`).

This module owns the cluster connection, the actors' lifetimes and the hand-out of pairs; it
must not write the results folder (the runner does, with what it reports to the sink). Ray is
imported only when a run uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from interplay import log as log_mod
from interplay import processes
from interplay.errors import ErrorType, InterplayError
from interplay.plugins import host as plugins
from interplay.run.executor import Finished, Sink, Work, lost_episode, shares
from interplay.run.ray_actor import EpisodeActor, endpoints
from interplay.values.records import Task

if TYPE_CHECKING:
    from interplay.contracts.env import Env
    from interplay.run.config import RunConfig

log = log_mod.get_logger("interplay.run.ray")

INSTALL_HINT = "--executor ray needs Ray; install it with: pip install 'interplay[ray]'"
#: Environment variables of the driver the actors need as they are here, wherever they run.
PLUGIN_VARS = ("INTERPLAY_LOAD_PLUGINS", "INTERPLAY_BLOCK_PLUGINS")
_STOP_GRACE_S = 10.0
_PLACING_NOTE_S = 60.0


def require_ray() -> None:
    """Raise the one-line install hint when Ray is not installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise InterplayError(INSTALL_HINT) from None


# -- the driver -----------------------------------------------------------------------------------


class _Actor:
    def __init__(self, handle: Any, capacity: int) -> None:
        self.handle = handle
        self.capacity = capacity
        #: How errors name the actor's node ("node 10.0.0.3 (gpu-07)") and how logs do.
        self.node = "node ?"
        self.host = "?"
        self.ready = False
        self.dead = False


class RayExecutor:
    """Runs the episodes on Ray actors, ``work.concurrency`` at once in all. A Ray already
    initialized in this process (a trainer's) is used as it is."""

    def __init__(self, cfg: RunConfig) -> None:
        """Refuse what cannot work on Ray, before anything starts."""
        if cfg.model.base_url is None:
            raise InterplayError("executor: the embedded model runs in this process and cannot "
                                 "be reached from a Ray cluster; give --base-url")
        if cfg.workers > 1:
            raise InterplayError("workers: with --executor ray the episodes are spread over "
                                 "the cluster's CPUs (one actor each, sharing -c); give -w 1")
        if not cfg.ray_connect_timeout_s > 0:
            raise InterplayError(f"ray_connect_timeout_s: must be above 0, got "
                                 f"{cfg.ray_connect_timeout_s:g}")
        require_ray()
        self.cfg = cfg

    async def run(self, work: Work, sink: Sink) -> None:
        if not work.pairs:
            return
        import ray

        cfg = self.cfg
        connected_here = not ray.is_initialized()
        connection = await _connect(ray, cfg.ray_address, cfg.ray_connect_timeout_s) \
            if connected_here else None
        pool: list[_Actor] = []
        try:
            pool = _start_actors(ray, cfg, work)
            await _check_actors(ray, pool)
            await _dispatch(ray, pool, work, sink)
        finally:
            await asyncio.shield(_stop(ray, pool))
            if connection is not None:
                ray.shutdown()
                connection.set()


async def _connect(ray: Any, address: str | None, timeout_s: float) -> threading.Event:
    """``ray.init``: to the cluster at ``address`` (else ``RAY_ADDRESS``, which ``ray job
    submit`` sets) within ``timeout_s``, or a new local cluster whose processes carry this
    process's tag, so they end with it however it ends (Ray's own fate-sharing leaves some of
    them running after a ``kill -9`` of the driver).

    An address is first dialled here (nothing listening there fails at the deadline, in one
    line), then ``ray.init`` runs in a thread of its own while this loop waits for it up to
    the same deadline: Ray keeps trying a cluster that does not answer for some ten minutes,
    and the loop must stay free to answer Ctrl-C or SIGTERM (the run then writes its
    summary). A ``ray.init`` given up on is left to its daemon thread.

    That thread lives until the returned event is set (after ``ray.shutdown``): the local
    cluster's processes are started from it, and Ray has them killed when the *thread* that
    started them ends (``PR_SET_PDEATHSIG``)."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    if address is not None:
        await _dial(address, _bootstrap(address), deadline, timeout_s)
    done: asyncio.Future[None] = loop.create_future()
    release = threading.Event()

    def settle(exc: BaseException | None) -> None:
        if not done.done():
            if exc is None:
                done.set_result(None)
            else:
                done.set_exception(exc)

    def connect() -> None:
        try:
            _init(ray, address)
        except BaseException as exc:
            outcome: BaseException | None = exc
        else:
            outcome = None
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, outcome)
        if outcome is None:
            release.wait()

    threading.Thread(target=connect, name="interplay-ray-connect", daemon=True).start()
    try:
        if address is None:
            await asyncio.shield(done)  # a cluster of this machine's own, starting
        else:
            async with asyncio.timeout(max(0.0, deadline - loop.time())):
                await asyncio.shield(done)
    except TimeoutError:
        raise InterplayError(
            f"Ray address {address}: the cluster did not answer within {timeout_s:g} s "
            "(ray_connect_timeout_s); is it a Ray head's address (its GCS port, 6379 unless "
            "`ray start --port` said otherwise), and does this machine hold its token "
            "(RAY_AUTH_MODE=token, RAY_AUTH_TOKEN)?") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        if address is None:
            raise
        raise InterplayError(
            f"Ray address {address}: cannot connect ({_first_line(exc)}); is the "
            "cluster up (`ray start --head`), and does this machine hold its token "
            "(RAY_AUTH_MODE=token, RAY_AUTH_TOKEN)?") from None
    log.info("ray.connected", cluster_url=address or "local",
             cpus=ray.cluster_resources().get("CPU", 0))
    return release


def _bootstrap(address: str) -> tuple[str, int] | None:
    """Where ``ray.init(address)`` will dial (Ray's own reading of the address: ``auto`` finds
    the cluster this machine runs, ``localhost`` becomes this node's address); None when that
    cannot be told here (Ray's connect, under the deadline, then says what is wrong)."""
    if "://" in address:  # ray://HOST:PORT, the Ray Client's server
        parts = urlsplit(address)
        return (parts.hostname, parts.port or 10001) if parts.hostname else None
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        return None
    try:
        canonical = canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError) as exc:  # "auto" with no cluster here, a bad form
        raise InterplayError(f"Ray address {address}: {_first_line(exc)}") from None
    if not canonical:
        return None
    host, _, port = canonical.rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() else None


async def _dial(address: str, where: tuple[str, int] | None, deadline: float,
                timeout_s: float) -> None:
    """Wait until something listens at ``where`` (a cluster still starting is waited for),
    or fail in one line at ``deadline``."""
    if where is None:
        return
    loop = asyncio.get_running_loop()
    host, port = where
    while True:
        left = deadline - loop.time()
        try:
            async with asyncio.timeout(max(0.0, left)):
                _, writer = await asyncio.open_connection(host, port)
            writer.close()
            return
        except (OSError, TimeoutError):
            if loop.time() >= deadline:
                raise InterplayError(
                    f"Ray address {address}: nothing answered at {host}:{port} within "
                    f"{timeout_s:g} s (ray_connect_timeout_s); is the cluster up (`ray start "
                    "--head`), and its port open to this machine?") from None
            await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))


class _DropLine(logging.Filter):
    """Drops one of Ray's log lines that is not the user's news."""

    def __init__(self, start: str) -> None:
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.start)


def _init(ray: Any, address: str | None) -> None:
    """``ray.init`` as the run needs it (in the connecting thread)."""
    options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": True}
    # Outside the main thread Ray installs no SIGTERM handler of its own (the run's own, which
    # cancels, writes the summary and stops the actors, stays), and warns that it did not.
    worker_log = logging.getLogger("ray._private.worker")
    unwarned = _DropLine("SIGTERM handler is not set")
    worker_log.addFilter(unwarned)
    try:
        if address is None:
            tag = processes.owner_tag()
            # Ray warns, on every start, that it chose token authentication for the cluster:
            # the right choice for one that lives as long as the run, and not the user's news.
            quiet = logging.getLogger("ray._private.authentication.authentication_token_setup")
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:
                # SPT_NOENV: Ray's processes set their titles without overwriting their
                # environment, where the reaper looks for the tag.
                with _environment({"SPT_NOENV": "1", **dict([tag] if tag else [])}):
                    ray.init(address="local", include_dashboard=False, **options)
            finally:
                quiet.setLevel(level)
        else:
            ray.init(address=address, **options)
    finally:
        worker_log.removeFilter(unwarned)


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _start_actors(ray: Any, cfg: RunConfig, work: Work) -> list[_Actor]:
    total_cpus = ray.cluster_resources().get("CPU", 0)
    if total_cpus < 1:
        raise InterplayError("the Ray cluster has no CPU to run actors on; start its nodes "
                             "with CPUs (`ray start --num-cpus N`)")
    free = int(ray.available_resources().get("CPU", 0))
    concurrency = work.concurrency
    episodes = len(work.pairs)
    count = max(1, min(free, concurrency, episodes))
    environ = {k: os.environ[k] for k in (*PLUGIN_VARS, *_key_vars(cfg, work.env))
               if k in os.environ}
    setup = {"config": dict(work.resolved), "log": log_mod.settings(), "seed": work.seed,
             "entry_points": plugins.host().loads_entry_points, "environ": environ,
             "unset": [k for k in PLUGIN_VARS if k not in os.environ]}
    actor_cls = ray.remote(EpisodeActor)
    pool = []
    for share in shares(concurrency, count):
        options: dict[str, Any] = {
            # One control call (stop) beside the share of -c.
            "num_cpus": 1, "max_concurrency": share + 1, "max_restarts": 0,
            "scheduling_strategy": "SPREAD"}
        if cfg.ray_runtime_env:
            options["runtime_env"] = cfg.ray_runtime_env
        pool.append(_Actor(actor_cls.options(**options).remote({**setup, "share": share}),
                           share))
    log.info("ray.actors_started", actors=len(pool), concurrency=concurrency,
             episodes=episodes)
    return pool


def _key_vars(cfg: RunConfig, env: Env) -> set[str]:
    """The API-key variables the run's endpoints read: sent to the actors, whose nodes may not
    have them."""
    return {e.api_key_var for e in endpoints(cfg, env) if e.api_key_var}


async def _check_actors(ray: Any, pool: Sequence[_Actor]) -> None:
    """Wait for every actor to load; stop the run, naming the node, when one cannot run it."""
    readying = asyncio.gather(*(a.handle.ready.remote() for a in pool), return_exceptions=True)
    waited = 0.0
    try:
        while not readying.done():
            # An actor waits for a free CPU as long as the cluster has none: say so now and
            # then.
            await asyncio.wait([readying], timeout=_PLACING_NOTE_S)
            waited += _PLACING_NOTE_S
            if not readying.done():
                log.warning("ray.actors_waiting", actors=len(pool), waited_s=waited)
    finally:
        readying.cancel()
    reports = readying.result()
    mine = plugins.host()
    driver_plugins = {i.name: (i.package, i.version)
                      for i in mine.plugin_infos(include_builtins=False) if i.error is None}
    problems: list[str] = []
    for actor, report in zip(pool, reports, strict=True):
        if isinstance(report, BaseException):
            if not isinstance(report, ray.exceptions.RayError):
                raise report
            if isinstance(report, ray.exceptions.RuntimeEnvSetupError):
                # Ray's message ends with the node's own error, after its traceback.
                lines = [ln for ln in str(report).splitlines() if ln.strip()]
                node = next((ln.split("]")[0].strip("[ ") for ln in lines
                             if ln.startswith("[Node ")), "a node")
                problems.append(f"ray_runtime_env could not be set up on {node.lower()} "
                                f"({lines[-1].strip() if lines else 'no reason given'})")
            else:
                problems.append(f"a Ray actor could not start ({_first_line(report)})")
            continue
        actor.ready = True
        actor.host = report["host"]
        actor.node = where = f"node {report['host']} ({report['hostname']})"
        lacking = len(problems)
        for name, (package, version) in driver_plugins.items():
            failed = report["failed"].get(name)
            if failed:
                problems.append(f"plugin {name} ({package}) failed to load on {where}: {failed}")
            elif name not in report["plugins"]:
                problems.append(f"plugin {name} ({package} {version}) is not installed on "
                                f"{where}; install it on every node (or ship it with "
                                "ray_runtime_env)")
            elif report["plugins"][name][1] != version:
                # The node's version: the driver's is what `interplay plugins` shows here.
                log.warning("ray.plugin_version_differs", plugin=name, package=package,
                            version=report["plugins"][name][1], host=report["host"])
        if report.get("error") and len(problems) == lacking:
            # (A config that names what a missing plugin registers fails as a consequence.)
            problems.append(f"on {where}: {report['error']}")
        for url, reason in report["unreachable"].items():
            problems.append(f"the model endpoint {log_mod.scrub_location(url)} cannot be "
                            f"reached from {where} ({reason}); every node must reach it")
        log.info("ray.actor_ready", host=report["host"], pid=report["pid"],
                 capacity=actor.capacity)
    problems = list(dict.fromkeys(problems))  # two actors of one node say the same
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InterplayError(f"{problems[0]}{more}")


async def _dispatch(ray: Any, pool: Sequence[_Actor], work: Work, sink: Sink) -> None:
    """Each actor's slots take the next pair as they free up, so a slower actor gets fewer.
    A pair whose actor died is recorded as a ``worker_error`` episode; the rest go on."""
    queue: Iterator[tuple[Task, int]] = iter(work.pairs)

    async def slot(actor: _Actor) -> None:
        while not actor.dead:
            pair = next(queue, None)
            if pair is None:
                return
            task, rollout = pair
            started = time.time()
            try:
                slim, line, side = await actor.handle.run.remote(task, rollout)
            except ray.exceptions.RayError as exc:
                if isinstance(exc, ray.exceptions.RayActorError) and not actor.dead:
                    actor.dead = True
                    log.warning("ray.actor_lost", host=actor.host,
                                error_type=ErrorType.WORKER_ERROR,
                                exception_type=type(exc).__name__)
                sink.episode(lost_episode(
                    work, task, rollout, started,
                    f"the Ray actor running it on {actor.node} failed ({_first_line(exc)})"))
                continue
            sink.line(Finished(task.idx, rollout, line, slim, side))

    slots = [asyncio.ensure_future(slot(a)) for a in pool for _ in range(a.capacity)]
    try:
        await asyncio.gather(*slots)
    finally:
        for s in slots:
            s.cancel()
        await asyncio.gather(*slots, return_exceptions=True)
    if next(queue, None) is not None:
        raise InterplayError("every Ray actor died before the run ended (see the errors "
                             "above); continue with --resume DIR --retry-errors")


async def _stop(ray: Any, pool: Sequence[_Actor]) -> None:
    """Cancel what the actors still run (their harnesses stop what they started), then kill
    them: nothing of this run stays on the cluster."""
    # One still starting is killed at once: its stop() would wait for it to be placed.
    live = [a for a in pool if a.ready and not a.dead]
    if live:
        stopping = asyncio.gather(*(a.handle.stop.remote() for a in live),
                                  return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping, _STOP_GRACE_S)
    for actor in pool:
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
