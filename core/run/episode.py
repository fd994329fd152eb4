"""Episodes: one task x rollout run through an env's steps, then scored.

Owns the episode context (seats, traces, results, randomness, clock: the run's implementation
of :class:`interplay.contracts.contexts.EpisodeContext`), the run-wide resources
an episode borrows (model clients, the interception server, the tool gateway, seat settings),
running the steps, and scoring. Every trace of every session opened is collected, also when a
step raises midway.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import cattrs

from interplay._plumbing.ids import new_id
from interplay.config import loading as config_mod
from interplay.config.endpoint import Endpoint, redact_url, seat_endpoint
from interplay.contracts.contexts import EpisodeStore
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.sandbox import Sandbox, SandboxError, SandboxNeeds
from interplay.errors import ErrorType, InterplayError, describe_exception, error_of
from interplay.log import get_logger
from interplay.plugins import host as plugins
from interplay.run import workspace
from interplay.run.agent import Agent
from interplay.values.clock import Clock
from interplay.values.records import Episode, EpisodeInfo, Reward, SandboxRecord, Task, Trace

if TYPE_CHECKING:
    from interplay.gateway import ToolGateway
    from interplay.interception import InterceptionServer, Limits
    from interplay.model.client import ModelClient, Models

log = get_logger("interplay.run.episode")


class RunResources:
    """What every episode of a run shares: model clients, the interception server and the tool
    gateway (each started on first use), the default endpoint, and the seat settings the run
    overrides."""

    def __init__(self, *, endpoint: Endpoint, models: Models | None = None,
                 seats: Mapping[str, Mapping[str, Any]] | None = None,
                 max_connections: int = 64, interception: Limits | None = None,
                 sandbox: Mapping[str, Any] | None = None) -> None:
        if models is None:
            from interplay.model.client import Models

            models = Models(max_connections=max_connections)
        self.endpoint = endpoint
        self.models = models
        self.seat_overrides = {k: dict(v) for k, v in (seats or {}).items()}
        self.interception_limits = interception
        self._interception: InterceptionServer | None = None
        self._interception_lock = asyncio.Lock()
        self._gateway: ToolGateway | None = None
        self._gateway_lock = asyncio.Lock()
        self._seat_cache: dict[tuple[str, str], SeatSpec] = {}
        self._laid: dict[int, tuple[Endpoint, Endpoint]] = {}
        #: The run's ``sandbox`` table: its ``kind`` and that backend's settings.
        self.sandbox_settings: dict[str, Any] = dict(sandbox or {})
        self._backends: dict[str, tuple[type[Sandbox], Any]] = {}

    def client(self, endpoint: Endpoint | None = None) -> ModelClient:
        """A client of ``endpoint`` laid over the run's (:meth:`Endpoint.over`: a judge's
        table that names only its model keeps the run's server), of the run's when None."""
        if endpoint is None:
            return self.models.client(self.endpoint)
        laid = self._laid.get(id(endpoint))
        if laid is None or laid[0] is not endpoint:
            laid = self._laid[id(endpoint)] = (endpoint, endpoint.over(self.endpoint))
        return self.models.client(laid[1])

    def seat(self, env: Env, seat: str) -> SeatSpec:
        """The seat's settings (:func:`seat_settings`): the env's defaults under the run's."""
        key = (env.name, seat)
        if key not in self._seat_cache:
            if seat not in env.seats:
                raise InterplayError(f"env {env.name!r} has no seat {seat!r}; "
                                     f"seats: {', '.join(env.seats)}")
            self._seat_cache[key] = seat_settings(env.seats[seat], self.endpoint,
                                                  self.seat_overrides.get(seat, {}), seat)
        return self._seat_cache[key]

    def sandbox_backend(self, env: Env, task: Task | None) -> tuple[type[Sandbox], Any] | None:
        """The sandbox backend an episode of ``env`` on ``task`` works in, with its settings
        (:func:`sandbox_kind`); None when it works in none."""
        kind = sandbox_kind(self.sandbox_settings, env, task)
        if kind is None:
            return None
        found = self._backends.get(kind)
        if found is None:
            found = self._backends[kind] = sandbox_backend(kind, self.sandbox_settings)
        return found

    async def interception(self) -> InterceptionServer:
        async with self._interception_lock:
            if self._interception is None:
                from interplay.interception import InterceptionServer

                server = InterceptionServer(limits=self.interception_limits)
                await server.start()
                self._interception = server
        return self._interception

    async def gateway(self) -> ToolGateway:
        """The run process's tool gateway (env tools over MCP for harness programs that run as
        processes). Its listener takes the interception server's limits."""
        async with self._gateway_lock:
            if self._gateway is None:
                from interplay.gateway import ToolGateway
                from interplay.interception import Limits

                limits = self.interception_limits or Limits()
                gateway = ToolGateway(max_body_bytes=limits.max_body_bytes,
                                      header_timeout_s=limits.header_timeout_s,
                                      body_timeout_s=limits.body_timeout_s)
                await gateway.start()
                self._gateway = gateway
        return self._gateway

    async def aclose(self) -> None:
        if self._interception is not None:
            await self._interception.stop()
            self._interception = None
        if self._gateway is not None:
            await self._gateway.stop()
            self._gateway = None
        await self.models.aclose()


def seat_settings(default: SeatSpec, endpoint: Endpoint, given: Mapping[str, Any],
                  seat: str) -> SeatSpec:
    """A seat's settings, from the env's defaults for it (``default``), the run's endpoint
    (``model.*``) and the run's settings of the seat (``seats.<seat>.*``, ``given``). One rule,
    each later layer changing only the keys it sets:

    - the seat's harness and its settings: the env's, under the run's; a run that gives the
      seat another harness starts from that harness's defaults (the env's ``harness_config``
      was written for its own harness);
    - the seat's endpoint: the run's ``model``, under the seat's own ``model`` table key by
      key (:func:`interplay.config.endpoint.seat_endpoint`); no table: the run's endpoint itself;
    - the seat's sampling, sent with every request: the env's defaults for the seat, then the
      endpoint's sampling (``model.sampling``, or ``seats.<seat>.model.sampling`` over it),
      then ``seats.<seat>.sampling``. What the run sets always wins over the env's defaults;
      a step's per-episode value (tau2's seed) is sent only where none of these sets it.
    """
    base = cattrs.Converter().unstructure(default)
    if base.get("model") is None:
        base.pop("model", None)
    if given.get("harness") not in (None, base.get("harness")):
        base["harness_config"] = {}
    merged = config_mod.merge(base, {k: v for k, v in given.items() if k != "sampling"})
    where = f"seats.{seat}"
    if isinstance(merged.get("model"), Mapping):
        merged["model"] = seat_endpoint(endpoint, merged["model"])
        own = config_mod.structure(merged["model"], Endpoint, path=f"{where}.model")
        endpoint_sampling = own.sampling
    else:
        endpoint_sampling = endpoint.sampling
    given_sampling = given.get("sampling", {})
    if not isinstance(given_sampling, Mapping):
        raise InterplayError(f"{where}.sampling: expected a table, got {given_sampling!r}")
    merged["sampling"] = {**base.get("sampling", {}), **endpoint_sampling, **given_sampling}
    return config_mod.structure(merged, SeatSpec, path=where)


def sandbox_kind(settings: Mapping[str, Any], env: Env, task: Task | None) -> str | None:
    """Which sandbox backend an episode works in: the run's ``sandbox.kind``; unset,
    ``docker`` when the env needs a sandbox or the task brings a workspace (else none);
    ``"none"``: none."""
    kind = str(settings.get("kind") or "")
    if kind == "none":
        return None
    if kind:
        return kind
    if env.needs_sandbox or (task is not None and task.workspace is not None):
        return "docker"
    return None


def sandbox_backend(kind: str, settings: Mapping[str, Any]) -> tuple[type[Sandbox], Any]:
    """The backend registered as ``kind`` and the run's settings for it (``sandbox.*`` but
    ``kind``), checked."""
    try:
        cls = plugins.get("sandboxes", kind)
    except InterplayError as exc:
        raise InterplayError(f"sandbox.kind: {exc.message}") from None
    own = {k: v for k, v in settings.items() if k != "kind"}
    return cls, config_mod.structure(own, cls.Config, path="sandbox")


def seat_harness(spec: SeatSpec, seat: str) -> tuple[type[Any], Any]:
    """The harness class a seat is filled with and its settings (``harness_config`` over the
    harness's own defaults, checked)."""
    cls = plugins.get("harnesses", spec.harness)
    return cls, config_mod.structure(spec.harness_config, cls.Config,
                                     path=f"seats.{seat}.harness_config")


class LiveEpisodeContext:
    """What an env's steps reach during one episode: the run's
    :class:`interplay.contracts.contexts.EpisodeContext`, with the env, the run's resources and the
    agents it made."""

    def __init__(self, *, env: Env, task: Task, info: EpisodeInfo,
                 resources: RunResources, clock: Clock | None = None) -> None:
        self.env = env
        self.task = task
        self.info = info
        self.resources = resources
        self._rng: random.Random | None = None
        self.clock = clock or Clock()
        #: The env's own results (payoffs, a timeline); stored on the episode.
        self.results: dict[str, Any] = {}
        #: Metrics steps report (turn counts, forfeits); merged into the episode's metrics.
        self.metrics: dict[str, float] = {}
        self.traces: list[Trace] = []
        #: The episode's own state by type; emptied by ``release`` when the episode ends.
        self.store = EpisodeStore()
        self._agents: dict[str, Agent] = {}
        #: The error a step ended the episode in without raising (``fail``): type and text.
        self.failure: tuple[str, str] | None = None
        #: The episode's sandbox once started (or its start tried), with its record.
        self._ready: workspace.Ready | None = None
        self._sandbox_lock = asyncio.Lock()

    @property
    def rng(self) -> random.Random:
        """This episode's random source, seeded by (seed, task, rollout). Made on first use: a
        Random holds 2.5 KB of state, and most episodes never draw from it."""
        if self._rng is None:
            seed = self.info.seed if self.info.seed is not None else 0
            self._rng = random.Random(f"{seed}:{self.info.task_idx}:{self.info.rollout}")
        return self._rng

    def fail(self, error_type: str, error: str) -> None:
        if self.failure is None:
            self.failure = (error_type, error)

    def sandboxed(self, seat: str) -> bool:
        """Whether the agent in ``seat`` works in the episode's sandbox."""
        return seat in self.env.sandbox_seats and \
            self.resources.sandbox_backend(self.env, self.task) is not None

    async def sandbox(self) -> Sandbox | None:
        """The episode's sandbox, started with the task's workspace on first use (a start
        that failed raises its SandboxError again); None when the episode has none."""
        backend = self.resources.sandbox_backend(self.env, self.task)
        if backend is None:
            return None
        async with self._sandbox_lock:
            if self._ready is None:
                cls, settings = backend
                self._ready = workspace.made(cls, settings)
                labels = {"episode": self.info.episode_id, "env": self.env.name,
                          "task": str(self.info.task_idx), "rollout": str(self.info.rollout)}
                await workspace.prepare(self._ready, self.task.workspace, self.sandbox_needs(),
                                        labels)
            elif self._ready.record.error is not None:
                raise SandboxError(self._ready.record.error)
        return self._ready.sandbox

    async def seat_sandbox(self, seat: str) -> Sandbox | None:
        """The episode's sandbox as the agent in ``seat`` reaches it (its commands run as the
        task's workspace user, when it names one); None when that seat works in none."""
        if not self.sandboxed(seat):
            return None
        sandbox = await self.sandbox()
        user = self.task.workspace.user if self.task.workspace is not None else None
        if sandbox is None or not user:
            return sandbox
        return workspace.AsUser(sandbox, user)

    def sandbox_needs(self) -> list[SandboxNeeds]:
        """What the harnesses of the seats that work in the sandbox need of it."""
        out = []
        for seat in sorted(self.env.sandbox_seats & set(self.env.seats)):
            cls, settings = seat_harness(self.resources.seat(self.env, seat), seat)
            out.append(cls(settings).sandbox_needs())
        return out

    @property
    def sandbox_record(self) -> SandboxRecord | None:
        """The record of the episode's sandbox, once its start was tried."""
        return self._ready.record if self._ready is not None else None

    async def workspace_changes(self) -> None:
        """What the episode changed in its sandbox's workspace, read once (nothing when it
        has no sandbox, or its start failed)."""
        if self._ready is not None and self._ready.record.error is None:
            try:
                await workspace.changes(self._ready)
            except SandboxError as exc:
                self._ready.record.error = f"reading what changed: {exc}"

    async def close_sandbox(self) -> None:
        """Remove the episode's sandbox (idempotent)."""
        if self._ready is not None:
            await workspace.stop(self._ready)

    def release(self) -> None:
        """Drop this episode's agents (the episode is over; they point back here) and its
        store (its state ends with it, whoever still holds the context)."""
        for agent in self._agents.values():
            agent.episode = None
        self._agents.clear()
        self.store.clear()

    def add_trace(self, trace: Trace) -> None:
        self.traces.append(trace)

    def drop_trace(self, trace: Trace) -> None:
        self.traces = [t for t in self.traces if t is not trace]

    def agent(self, seat: str, *, name: str | None = None) -> Agent:
        """The agent filling ``seat`` in this episode (made on first use)."""
        key = name or seat
        if key in self._agents:
            return self._agents[key]
        spec = self.resources.seat(self.env, seat)
        harness_cls, harness_cfg = seat_harness(spec, seat)
        endpoint = spec.model or self.resources.endpoint
        agent = Agent(name=key, seat=seat, harness=harness_cls(harness_cfg),
                      client=self.resources.client(endpoint), spec=spec, episode=self,
                      tools=self.env.tools(seat, self))
        self._agents[key] = agent
        return agent


def new_episode_id() -> str:
    return new_id(8)


async def run_episode(env: Env, task: Task, *, resources: RunResources, rollout: int = 0,
                      seed: int | None = None, episode_id: str | None = None) -> Episode:
    """Run ``task`` through ``env``'s steps, then score it. Never raises for what the env's
    code or a model did: the error is recorded on the episode."""
    info = EpisodeInfo(episode_id=episode_id or new_episode_id(), env=env.name,
                       task_idx=task.idx, rollout=rollout, seed=seed)
    ctx = LiveEpisodeContext(env=env, task=task, info=info, resources=resources)
    try:
        return await _run(ctx, env, task)
    finally:
        # After scoring (the verifiers ran commands in it), however the episode ended.
        await asyncio.shield(ctx.close_sandbox())
        # Agents point back at the context that holds them: break the cycle, so a finished
        # episode is freed when its last reference goes rather than at the next full garbage
        # collection (with 1000 live episodes, a collection of seconds' worth of garbage).
        ctx.release()


async def _run(ctx: LiveEpisodeContext, env: Env, task: Task) -> Episode:
    info = ctx.info
    episode = Episode(info=info, task=task, started_at=time.time())
    t0 = time.monotonic()
    log.debug("episode.start", episode_id=info.episode_id, env=env.name, task_idx=task.idx,
              rollout=info.rollout)
    step: Any = None
    try:
        for step in env.run_steps():
            await step.run(ctx)
    except asyncio.CancelledError:
        _mark_open_traces(ctx, "cancelled")
        raise
    except Exception as exc:
        # A step's bug is at the line of the step's own code that raised.
        episode.error_type, episode.error = error_of(
            exc, ErrorType.ENV_ERROR, owner=step,
            by=f"step {step.name!r}" if step is not None else "")
        log.warning("episode.step_failed", episode_id=info.episode_id, env=env.name,
                    error_type=episode.error_type, exception_type=type(exc).__name__)
    if episode.error is None and ctx.failure is not None:
        # The step's own end: an error it recorded rather than raised (a turn that stopped
        # short leaves no error type on its trace, so the traces alone would miss it).
        episode.error_type, episode.error = ctx.failure
        log.info("episode.step_ended_in_error", episode_id=info.episode_id, env=env.name,
                 error_type=episode.error_type)
    _mark_open_traces(ctx, "error" if episode.error else "episode_ended")
    episode.traces = list(ctx.traces)
    episode.results = ctx.results
    await ctx.workspace_changes()
    episode.sandbox = ctx.sandbox_record
    if episode.error_type in (None, ErrorType.USER_ERROR):
        # A seat's own failure (its model call, its turn's time) is the cause, also of a
        # user sim that could not answer because its seat's model failed.
        for trace in episode.traces:
            if trace.error_type is not None:
                episode.error = seat_error(ctx, env, trace)
                episode.error_type = trace.error_type
                break
    await score(episode, env, ctx)
    episode.metrics = {**_numbers(ctx.metrics, episode), **episode.metrics}
    episode.wall_s = time.monotonic() - t0
    log.debug("episode.end", episode_id=info.episode_id, env=env.name, wall_s=episode.wall_s,
              error_type=episode.error_type)
    return episode


def seat_error(ctx: LiveEpisodeContext, env: Env, trace: Trace) -> str:
    """A trace's error, naming its seat, and the seat's own endpoint when it has one (its
    ``seats.SEAT.model``): which seat and which endpoint failed, not only how."""
    seat = trace.seat or trace.agent
    where = f"seat {seat!r}"
    try:
        spec = ctx.resources.seat(env, seat)
    except InterplayError:
        spec = None
    if spec is not None and spec.model is not None:
        url = redact_url(spec.model.base_url) if spec.model.base_url else "the embedded model"
        where += f" (its own endpoint seats.{seat}.model, {url})"
    return f"{where}: {trace.error}"


def _numbers(metrics: dict[str, Any], episode: Episode) -> dict[str, float]:
    """A step's metrics as numbers; one that is not a number (a step's mistake) is left out
    and makes the episode an env_error, rather than vanishing from the summary unseen."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, int | float):
            out[key] = float(value)
        elif episode.error is None:
            episode.error = (f"ctx.metrics[{key!r}] is {type(value).__name__} {value!r}; "
                             f"a step's metrics are numbers")
            episode.error_type = ErrorType.ENV_ERROR
    return out


def _mark_open_traces(ctx: LiveEpisodeContext, stop_condition: str) -> None:
    for trace in ctx.traces:
        if trace.stop_condition is None:
            trace.stop_condition = stop_condition
        if trace.ended_at is None:
            trace.ended_at = time.time()


async def score(episode: Episode, env: Env, ctx: LiveEpisodeContext) -> None:
    """Run the env's verifiers and spread their rewards onto the episode and its traces.

    An episode that ended in an error before it was scored (a model fault, a user sim that
    failed, an env that raised) is given to no verifier: a score of what a fault cut short is
    not the model's, and a judge's call on it would be spent on nothing. One whose verifier
    failed gets no reward, on itself or its traces: the verifiers that did answer are kept in
    ``rewards`` to read, but their mean without the failed one would be a score nobody gave
    (three failed judges read as 1 ± 0). The run's figures leave such episodes out
    (:mod:`interplay.run.summary`)."""
    rewards: list[Reward] = []
    if episode.error_type is not None:
        log.debug("episode.not_scored", episode_id=episode.info.episode_id,
                  error_type=episode.error_type)
        episode.rewards = []
        episode.reward = None
        for trace in episode.traces:
            trace.rewards, trace.reward = [], None
        return
    for verifier in env.run_verifiers():
        try:
            out = await verifier.score(episode, ctx)
            problem = _bad_rewards(out)
        except Exception as exc:
            problem = describe_exception(exc, verifier)
            why = {"exception_type": type(exc).__name__}
        else:
            if problem is None:
                rewards.extend([out] if isinstance(out, Reward) else out)
                continue
            why = {"reason_code": "bad_reward"}
        log.warning("episode.verifier_failed", verifier=verifier.name,
                    episode_id=episode.info.episode_id, error_type=ErrorType.VERIFIER_ERROR, **why)
        episode.metrics[f"{verifier.name}_error"] = 1.0
        if episode.error is None:
            episode.error = f"verifier {verifier.name}: {problem}"
            episode.error_type = ErrorType.VERIFIER_ERROR
    episode.rewards = rewards
    scored = episode.error_type is None
    shared = [r for r in rewards if r.seat is None]
    episode.reward = _weighted(shared) if scored else None
    for r in rewards:
        key = r.name if r.seat is None else f"{r.name}/{r.seat}"
        episode.metrics[key] = r.value
    for trace in episode.traces:
        own = [r for r in rewards if r.seat is None or r.seat == trace.seat]
        if not trace.trainable:
            own = [r for r in own if r.seat is not None]
        trace.rewards = own
        trace.reward = _weighted(own) if scored else None


def _bad_rewards(out: Any) -> str | None:
    """What is wrong with a verifier's output (a Reward or a list of them with finite values
    and weights), or None."""
    items = [out] if isinstance(out, Reward) else out
    if not isinstance(items, list | tuple) or not all(isinstance(r, Reward) for r in items):
        return (f"score() returned {type(out).__name__}; "
                "expected a Reward or a list of Rewards")
    for r in items:
        for field in ("value", "weight"):
            number = getattr(r, field)
            if not isinstance(number, int | float) or not math.isfinite(number):
                return f"reward {r.name!r} has {field} {number!r}; expected a finite number"
    return None


def _weighted(rewards: list[Reward]) -> float | None:
    weighted = [r for r in rewards if r.weight > 0]
    if not weighted:
        return None
    # Each value times its share of the weight: a mean of finite values stays finite however
    # large the values and weights (a plain sum of value x weight overflows to infinity).
    top = max(r.weight for r in weighted)
    shares = [r.weight / top for r in weighted]
    total = math.fsum(shares)
    return math.fsum(r.value * (s / total) for r, s in zip(weighted, shares, strict=True))
