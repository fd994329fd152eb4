"""The ``openenv`` env: an OpenEnv environment played in one chat session.

Each episode opens its own session on the server (``/ws``), resets it with the episode's seed,
and sends the observation to the ``assistant`` seat; each reply is made into an action of the
env's schema and stepped; step's reward is added up and its ``done`` ends the episode. A reply
with nothing to step is never stepped: an empty one gets the current observation again, one
that does not parse (or that the server refuses as invalid) gets the reason, each within
``reask_budget`` per step. A server that fails ends the episode with an ``error_type`` naming
how (:mod:`interplay_openenv.session`); the run goes on.

The server is the one at ``base_url``, or an app this env serves locally for the run
(:mod:`interplay_openenv.server`): started when the env loads, stopped when the env is closed or
collected, or when the process exits, and killed with the run.
"""

from __future__ import annotations

import importlib.util
import math
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import attrs

from interplay import (
    ChatSession,
    Env,
    Episode,
    EpisodeContext,
    InterplayError,
    Reward,
    SeatSpec,
    Step,
    Task,
    Verifier,
    get_logger,
)
from interplay.values import TasksetSource, load_taskset
from interplay_openenv.schema import ActionError, ActionSchema, render
from interplay_openenv.server import LocalServer, app_path
from interplay_openenv.session import (
    ActionRefused,
    EnvFailure,
    Session,
    client_class,
    fetch_schema,
)

log = get_logger("interplay.openenv")

SEAT = "assistant"
RESULTS_KEY = "openenv"
SEED_SOURCES = ("episode", "task")
DEFAULT_SYSTEM_PROMPT = ("You are acting in an environment. Each message shows what the "
                         "environment observes; each reply of yours is your next action.")


@attrs.define
class OpenEnvConfig:
    #: The URL of a running OpenEnv server (http://host:port).
    base_url: str = ""
    #: Or an app to serve locally for the run: ``package.server.app:app``, or the package
    #: alone (OpenEnv's layout puts its app at ``package.server.app:app``).
    app: str = ""
    #: Episodes the env offers as tasks (``interplay eval -n`` takes the first n), when no
    #: taskset is given.
    tasks: int = 1000
    #: A taskset (a JSONL file, or a dataset: ``interplay.values.DatasetTaskset``); a row's
    #: ``info.reset`` holds keyword arguments for that task's reset.
    taskset: TasksetSource = ""
    #: Keyword arguments for every reset (a row's ``info.reset`` goes over them).
    reset_kwargs: dict[str, Any] = attrs.Factory(dict)
    #: Where reset's seed comes from: "episode" (the episode's seed, derived from the run's
    #: --seed, the task and the rollout) or "task" (the task's info.seed, else its index).
    seed_from: str = "episode"
    #: Steps after which an episode that is not done ends (``ended_by = "max_steps"``).
    max_steps: int = 50
    #: Times a reply with nothing to step (empty, unparsable, refused as invalid) is asked for
    #: again before the episode ends (``ended_by = "no_action"``); 0 ends it at the first.
    reask_budget: int = 2
    #: Show this field of each observation ("" shows its only field, or all of it as JSON).
    observation_field: str = ""
    #: The assistant's system prompt ("" for none).
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    #: Seconds to wait for the server to accept a connection (its schema, each episode's session).
    connect_timeout_s: float = 10.0
    #: How long one reset or step may take on the server.
    message_timeout_s: float = 60.0
    #: How long an episode waits for a session on a server at its capacity.
    capacity_wait_s: float = 600.0
    #: How long a local app may take to answer GET /health.
    start_timeout_s: float = 60.0


def config_problems(cfg: OpenEnvConfig) -> list[str]:
    problems = []
    if bool(cfg.base_url) == bool(cfg.app):
        problems.append("set exactly one of base_url (a running OpenEnv server, e.g. "
                        "--set env.base_url=http://127.0.0.1:8000) and app (an app to serve "
                        "for the run, e.g. --set env.app=interplay_openenv.demo:app)")
    if cfg.base_url and not cfg.base_url.startswith(("http://", "https://")):
        problems.append(f"base_url must start with http:// or https://, got {cfg.base_url!r}")
    if cfg.seed_from not in SEED_SOURCES:
        problems.append(f"seed_from must be one of {', '.join(SEED_SOURCES)}, "
                        f"got {cfg.seed_from!r}")
    if cfg.max_steps < 1:
        problems.append(f"max_steps must be at least 1, got {cfg.max_steps}")
    if cfg.reask_budget < 0:
        problems.append(f"reask_budget must be 0 or more, got {cfg.reask_budget}")
    if cfg.tasks < 1:
        problems.append(f"tasks must be at least 1, got {cfg.tasks}")
    for name in ("connect_timeout_s", "message_timeout_s", "capacity_wait_s",
                 "start_timeout_s"):
        value = getattr(cfg, name)
        if not (math.isfinite(value) and value > 0):
            problems.append(f"{name} must be a positive number of seconds, got {value}")
    return problems


def _app_problem(app: str) -> str | None:
    module = app_path(app).split(":", 1)[0]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        found, why = None, str(exc)
    else:
        why = f"no module named {module!r}"
    if found is None:
        return (f"app {app!r}: {why}; install the environment's package, or name its app as "
                f"package.server.app:app")
    return None


class EnvServer:
    """Where an env's episodes find their server, and the action schema it declared: shared by
    every episode of the env (in this process)."""

    def __init__(self, cfg: OpenEnvConfig) -> None:
        self._cfg = cfg
        self._local: LocalServer | None = None
        self._schema: ActionSchema | None = None

    def base_url(self) -> str:
        """The server's URL; a local app is started on first use (blocking: the env starts it
        when it loads)."""
        if self._cfg.base_url:
            return self._cfg.base_url.rstrip("/")
        if self._local is None:
            local = LocalServer(self._cfg.app, start_timeout_s=self._cfg.start_timeout_s)
            local.start()
            self._local = local
            # Stopped with the env, or at exit at the latest (finalizers run then).
            weakref.finalize(self, local.stop)
        return self._local.url

    async def schema(self, base_url: str) -> ActionSchema:
        if self._schema is None:
            self._schema = await fetch_schema(base_url, self._cfg.connect_timeout_s)
        return self._schema

    def close(self) -> None:
        if self._local is not None:
            self._local.stop()
            self._local = None


#: Why a reply was not stepped, and the metric that counts it.
REFUSALS = {"empty": "empty_replies", "unparsed": "unparsed_replies",
            "refused": "refused_actions"}


@attrs.frozen
class _NotStepped:
    """A reply that was not stepped: why (a key of REFUSALS), and what the agent is told."""

    kind: str
    message: str


class OpenEnvEpisode(Step):
    """Reset an OpenEnv environment, then step it with the assistant's replies until done."""

    name = "openenv"
    Config: ClassVar[type] = OpenEnvConfig
    writes = frozenset({RESULTS_KEY})

    def __init__(self, config: OpenEnvConfig, server: EnvServer) -> None:
        super().__init__(config)
        self.server = server

    def check(self, steps: Sequence[Step]) -> list[str]:
        return config_problems(self.config)

    async def run(self, ctx: EpisodeContext) -> None:
        cfg: OpenEnvConfig = self.config
        seed = (int(ctx.task.info.get("seed", ctx.task.idx)) if cfg.seed_from == "task"
                else ctx.info.seed if ctx.info.seed is not None else 0)
        record: dict[str, Any] = {"base_url": None, "seed": seed, "steps": [], "reward": None,
                                  "done": False, "ended_by": None, "error": None}
        ctx.results[RESULTS_KEY] = record
        tally = dict.fromkeys(REFUSALS.values(), 0)
        try:
            async with ctx.agent(SEAT).chat(ctx.task) as chat:
                try:
                    ended_by = await self._play(ctx, chat, seed, record, tally)
                except EnvFailure as exc:
                    # The server failed, not the agent: the episode carries how, and no
                    # reward is made up for it.
                    ended_by = "env_error"
                    record.update(error=str(exc), reward=None)
                    chat.trace.error, chat.trace.error_type = str(exc), exc.error_type
                    log.warning("openenv.env_failed", episode_id=ctx.info.episode_id,
                                error_type=exc.error_type)
                record["ended_by"] = ended_by
                chat.stop(ended_by)
        finally:
            ctx.metrics["steps"] = float(sum(1 for s in record["steps"]
                                             if s["action"] is not None))
            ctx.metrics["done"] = float(record["done"])
            for metric, n in tally.items():
                ctx.metrics[metric] = float(n)

    async def _play(self, ctx: EpisodeContext, chat: ChatSession, seed: int,
                    record: dict[str, Any], tally: dict[str, int]) -> str:
        """Reset, then step until the episode ends; how it ended."""
        cfg: OpenEnvConfig = self.config
        base_url = self.server.base_url()
        record["base_url"] = base_url
        schema = await self.server.schema(base_url)
        reset = {"seed": seed, "episode_id": ctx.info.episode_id, **cfg.reset_kwargs,
                 **dict(ctx.task.info.get("reset") or {})}
        record["reward"] = 0.0
        async with Session(base_url, connect_timeout_s=cfg.connect_timeout_s,
                           message_timeout_s=cfg.message_timeout_s,
                           capacity_wait_s=cfg.capacity_wait_s) as session:
            result = await session.reset(**reset)
            observation = self._render(result.observation)
            message = f"{schema.instructions()}\n\n{observation}"
            while not result.done:
                if len(record["steps"]) >= cfg.max_steps:
                    return "max_steps"
                refused: list[str] = []
                entry: dict[str, Any] = {"action": None, "reward": None, "done": False,
                                         "refused": refused}
                record["steps"].append(entry)
                for _ in range(cfg.reask_budget + 1):
                    reply = await chat.turn(message)
                    if reply.stopped:
                        return "assistant_stopped"
                    stepped = await self._step(session, schema, reply.text, observation)
                    if isinstance(stepped, _NotStepped):
                        refused.append(stepped.kind)
                        tally[REFUSALS[stepped.kind]] += 1
                        message = stepped.message
                        continue
                    action, result = stepped
                    break
                else:
                    return "no_action"
                entry.update(action=action, reward=result.reward, done=result.done)
                record["reward"] += float(result.reward or 0.0)
                record["done"] = result.done
                observation = self._render(result.observation)
                message = observation
        return "done"

    async def _step(self, session: Session, schema: ActionSchema, text: str,
                    observation: str) -> tuple[dict[str, Any], Any] | _NotStepped:
        """Step the action in ``text``: the action and the result, or why it was not."""
        if not text.strip():
            return _NotStepped("empty", "Your reply was empty, so nothing was sent to the "
                               f"environment. The observation again:\n\n{observation}")
        try:
            action = schema.parse(text)
        except ActionError as exc:
            return _NotStepped("unparsed", f"Nothing was sent to the environment: {exc}")
        try:
            return action, await session.step(action)
        except ActionRefused as exc:
            return _NotStepped("refused", f"The environment refused that action as invalid "
                               f"({exc}); nothing was stepped. {schema.instructions()}")

    def _render(self, observation: dict[str, Any]) -> str:
        field = self.config.observation_field
        if field and field not in observation:
            raise InterplayError(f"env.observation_field: the observation has no field "
                                 f"{field!r}; its fields: {', '.join(observation) or 'none'}")
        return render(observation, field)


class EpisodeReward(Verifier):
    """The environment's rewards, summed over the episode."""

    name = "openenv"

    def check(self, steps: Sequence[Step]) -> list[str]:
        if any(RESULTS_KEY in step.writes for step in steps):
            return []
        return [f"reads ctx.results[{RESULTS_KEY!r}] but no step writes it"]

    async def score(self, episode: Episode, ctx: EpisodeContext) -> list[Reward]:
        record = episode.results.get(RESULTS_KEY) or {}
        total = record.get("reward")
        if total is None:
            return []  # the server failed: the episode carries its error_type
        steps = sum(1 for s in record.get("steps") or () if s.get("action") is not None)
        return [Reward(self.name, float(total),
                       reason=f"{steps} steps, ended by {record.get('ended_by')}")]


class OpenEnvEnv(Env):
    """OpenEnv environments (set env.base_url or env.app): reset, step and reward, played in
    a chat session."""

    name = "openenv"
    Config: ClassVar[type] = OpenEnvConfig
    seats = {SEAT: SeatSpec(harness="null")}

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.server = EnvServer(self.config)

    def tasks(self) -> Iterable[Task]:
        cfg: OpenEnvConfig = self.config
        if cfg.taskset:
            tasks = load_taskset(cfg.taskset)
            return [t if t.system_prompt else attrs.evolve(t, system_prompt=cfg.system_prompt
                                                           or None) for t in tasks]
        return (Task(idx=i, prompt=None, system_prompt=cfg.system_prompt or None)
                for i in range(cfg.tasks))

    def steps(self) -> list[Step]:
        return [OpenEnvEpisode(self.config, self.server)]

    def verifiers(self) -> list[Verifier]:
        return [EpisodeReward()]

    def check(self) -> None:
        cfg: OpenEnvConfig = self.config
        problems = config_problems(cfg)
        if not problems and cfg.app:
            problem = _app_problem(cfg.app)
            problems += [problem] if problem else []
        if problems:
            raise InterplayError(f"env {self.name!r}: {problems[0]}")
        super().check()
        # Seconds of importing openenv-core (gradio comes with it): paid now, not by the
        # first episode with others waiting.
        client_class()
        if cfg.app:
            self.server.base_url()  # a local app that does not start is refused now

    def close(self) -> None:
        """Stop the local server, if this env started one."""
        self.server.close()
