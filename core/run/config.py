"""A run's config: :class:`RunConfig` (a TOML file, flags, ``--set`` overrides), the
env it names loaded and checked, every seat resolved before any model call, and the
differences that refuse a resume. Nothing here runs an episode or touches the results folder.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import cattrs

from interplay.config import loading as config_mod
from interplay.config.endpoint import Endpoint, redact_url, sampling_problem
from interplay.contracts.env import Env
from interplay.errors import InterplayError
from interplay.interception.limits import Limits
from interplay.log import get_logger
from interplay.run.loader import load_env, options_given
from interplay.values.records import Task

log = get_logger("interplay.run")

#: Fields that may differ between a run and its resumption: where it writes, how fast, and
#: what its interception server takes from a client.
RESUME_IGNORED = frozenset({"output", "concurrency", "workers", "retry_errors", "executor",
                            "ray_address", "ray_runtime_env", "ray_connect_timeout_s",
                            "interception"})
#: An endpoint's settings that may differ on resumption (``model.*``, ``seats.<seat>.model.*``):
#: how its server is reached and how long a call may take, never which model answers or what
#: is sent to it. The errors they cause (a timeout, a refused certificate, a bad key, a proxy)
#: are mended on the run itself: `--resume DIR --retry-errors --set model.timeout_s=300`.
RESUME_REACH = frozenset({"timeout_s", "first_byte_timeout_s", "max_retries", "retry_max_s",
                          "transport", "proxy", "ca_bundle", "client_cert", "client_key",
                          "api_key_var", "headers"})


def resume_may_change(key: str) -> bool:
    """Whether the dotted config key ``key`` may differ between a run and its resumption:
    :data:`RESUME_IGNORED`, an endpoint's :data:`RESUME_REACH` settings, or a seat's
    ``timeout_s`` (how long its turn may take, which decides timeouts, never a score)."""
    parts = key.split(".")
    if parts[0] in RESUME_IGNORED:
        return True
    if parts[0] == "model":
        return len(parts) > 1 and parts[1] in RESUME_REACH
    if parts[0] == "seats" and len(parts) > 2:
        if parts[2] == "timeout_s":
            return True
        return parts[2] == "model" and len(parts) > 3 and parts[3] in RESUME_REACH
    return False


DEFAULT_CONCURRENCY = 8


@attrs.define
class RunConfig:
    """Everything that decides what a run computes (plus where and how fast).

    ``env`` holds the env's name under ``name`` and the env's own settings beside it
    (``--set env.relay.max_turns=4``), structured into the env's ``Config`` class.
    ``seats`` overrides the env's seat settings (``--set seats.assistant.harness=null``).
    """

    #: The env (its registered name, or a TOML or scenario file, under ``name``) and its
    #: settings beside it: its own (`interplay describe envs NAME`) and those every env takes
    #: (user_sim, user_sim_settings, verifiers, own_verifiers).
    env: dict[str, Any] = attrs.Factory(dict)
    #: Tasks to run (the first n of the taskset); None runs them all.
    n: int | None = None
    #: Episodes per task. pass@k and pass^k are given for k = 1, 2, 4, ... below it and for
    #: k = it (counting the scored rollouts of the task that has fewest): -r 6 gives k = 1, 2,
    #: 4, 6.
    rollouts: int = 1
    #: Episodes at once; None: 8, or 1 on the embedded local model, which answers one
    #: request at a time (more would only queue calls into their timeouts).
    concurrency: int | None = None
    #: Processes that run the episodes (the -c episodes are spread over them); past a few
    #: thousand model calls a second one process is the bottleneck (interplay.run.workers).
    workers: int = 1
    #: Where the episodes run, by the name of an executor (interplay.run.executor.EXECUTORS):
    #: "local" (this machine: one process, or ``workers``) or "ray" (actors on a Ray cluster).
    #: Checked, with the settings that go with it, by interplay.run.executor.executor_for.
    executor: str = "local"
    #: The Ray cluster to run on ("auto", "HOST:PORT", "ray://HOST:PORT"); None: the one
    #: RAY_ADDRESS names, else a local cluster started for the run.
    ray_address: str | None = None
    #: A Ray runtime_env for the actors (pip packages, env_vars, a working_dir to ship).
    ray_runtime_env: dict[str, Any] = attrs.Factory(dict)
    #: Seconds the driver waits for the cluster at ``ray_address`` to answer before it stops
    #: the run in one line (Ray itself would keep trying for some ten minutes).
    ray_connect_timeout_s: float = 20.0
    #: The run's seed: each episode's seed is derived from it, the task and the rollout.
    seed: int = 0
    #: The endpoint every seat calls unless it names its own (`interplay describe model`);
    #: no base_url: the embedded local model.
    model: Endpoint = attrs.Factory(Endpoint)
    #: Each seat's settings over the env's defaults for it, by seat name (harness,
    #: harness_config, model, sampling, trainable, retries, timeout_s): a seat's model table
    #: starts from the run's model, key by key.
    seats: dict[str, dict[str, Any]] = attrs.Factory(dict)
    #: What the interception server takes from the harness programs that talk to it.
    interception: Limits = attrs.Factory(Limits)
    #: Where the agents work: the sandbox backend under ``kind`` (`interplay list
    #: sandboxes`: docker, local, a plugin's; "none": no sandbox; unset: docker for an env
    #: or task that needs one, else none) and that backend's settings beside it (`interplay
    #: describe sandboxes NAME`), e.g. {kind = "docker", network = "model", cpus = 2}.
    sandbox: dict[str, Any] = attrs.Factory(dict)
    #: An episode passes (for pass@k and pass^k) when its reward is at least this.
    pass_threshold: float = 1.0
    #: The results folder; None: results/ENV-TIMESTAMP.
    output: str | None = None
    #: On resume, run again the episodes that ended in an error (their new record supersedes
    #: the old one; the old line stays in episodes.jsonl).
    retry_errors: bool = False

    @property
    def env_name(self) -> str:
        return str(self.env.get("name") or "")

    def env_settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.env.items() if k != "name"}


#: The command-line flag of ``interplay eval`` that sets each key of the run's config (the
#: rest are set by ``--config FILE`` or ``--set KEY=VALUE``); `interplay describe run` shows
#: them and the CLI builds its config from them.
FLAGS: dict[str, str] = {
    "env": "ENV, eval's first argument (env.name)", "n": "-n", "rollouts": "-r, --rollouts",
    "concurrency": "-c, --concurrency", "workers": "-w, --workers", "executor": "--executor",
    "ray_address": "--ray-address", "seed": "-s, --seed", "model.model": "-m, --model",
    "model.base_url": "--base-url", "model.api_key_var": "--api-key-var",
    "pass_threshold": "--pass-threshold", "output": "-o, --output",
    "sandbox.kind": "--sandbox",
    "retry_errors": "--retry-errors (with --resume)"}


def episode_seed(seed: int, task_idx: int, rollout: int) -> int:
    """The seed of one episode, derived from the run's seed and the (task, rollout) pair alone,
    so it does not depend on scheduling or on what a resumed run already holds."""
    digest = hashlib.sha256(f"{seed}:{task_idx}:{rollout}".encode()).digest()
    return int.from_bytes(digest[:4], "big")




def resolve(data: Mapping[str, Any]) -> tuple[RunConfig, Env, dict[str, Any]]:
    """Structure ``data`` into a RunConfig, load and check its env, and return the resolved
    config as plain data (the env's settings with every default filled in)."""
    cfg = config_mod.structure(data, RunConfig)
    if cfg.n is not None and cfg.n < 1:
        raise InterplayError(f"n: must be at least 1, got {cfg.n}")
    if cfg.rollouts < 1:
        raise InterplayError(f"rollouts: must be at least 1, got {cfg.rollouts}")
    if cfg.concurrency is None:
        cfg.concurrency = 1 if cfg.model.base_url is None else DEFAULT_CONCURRENCY
    if cfg.concurrency < 1:
        raise InterplayError(f"concurrency: must be at least 1, got {cfg.concurrency}")
    if cfg.workers < 1:
        raise InterplayError(f"workers: must be at least 1, got {cfg.workers}")
    if not math.isfinite(cfg.pass_threshold):
        # NaN passes nothing and fails nothing: every pass@k would silently read 0.
        raise InterplayError(f"pass_threshold: must be a finite number, got "
                             f"{cfg.pass_threshold}")
    kind = cfg.sandbox.get("kind", "")
    if not isinstance(kind, str):
        raise InterplayError(f"sandbox.kind: expected the name of a sandbox backend, got "
                             f"{kind!r}")
    if kind not in ("", "none"):
        from interplay.run.episode import sandbox_backend

        sandbox_backend(kind, cfg.sandbox)  # an unknown backend or a bad setting: refused now
    elif len(cfg.sandbox) > (1 if "kind" in cfg.sandbox else 0):
        extra = sorted(k for k in cfg.sandbox if k != "kind")[0]
        raise InterplayError(f"sandbox.{extra}: set sandbox.kind too (the backend whose "
                             f"setting it is: `interplay list sandboxes`)")
    env = load_env(cfg.env_name, cfg.env_settings())
    unknown = set(cfg.seats) - set(env.seats)
    if unknown:
        raise InterplayError(f"seats.{sorted(unknown)[0]}: env {env.name!r} has no such seat; "
                             f"seats: {', '.join(env.seats)}")
    env.check()
    from interplay.run.episode import RunResources

    check_seats(env, RunResources(endpoint=cfg.model, seats=cfg.seats, sandbox=cfg.sandbox))
    plain = cattrs.Converter()
    resolved = plain.unstructure(cfg)
    resolved["env"] = {"name": cfg.env_name, **plain.unstructure(env.config),
                       **options_given(env)}
    return cfg, env, resolved


def resolved_seats(env: Env, cfg: RunConfig) -> dict[str, Any]:
    """Every seat of ``env`` as this run fills it (the env's defaults, the run's model and
    the run's seat settings: :func:`interplay.run.episode.seat_settings`), its
    ``harness_config`` with the harness's own defaults filled in (the harness reads them
    so), as plain data with credentials masked: what config.json records under ``seats``."""
    from interplay.run.episode import RunResources, seat_harness

    resources = RunResources(endpoint=cfg.model, seats=cfg.seats, sandbox=cfg.sandbox)
    plain = cattrs.Converter()
    out = {}
    for seat in env.seats:
        filled = resources.seat(env, seat)
        spec = plain.unstructure(filled)
        spec["harness_config"] = plain.unstructure(seat_harness(filled, seat)[1])
        if spec.get("model") is None:
            spec["model"] = plain.unstructure(cfg.model)
            spec["model_is_the_runs"] = True
        out[seat] = spec
    return without_credentials(out)


#: Request fields the harness and the model client set; sampling settings cannot override them.
RESERVED_SAMPLING = ("messages", "model", "stream", "tools")


def check_seats(env: Env, resources: Any) -> None:
    """Resolve every seat now (harness names, harness settings, sampling) so a typo fails
    before any model is called; then the env's steps check the seats as resolved."""
    from interplay.run.episode import seat_harness

    for seat in env.seats:
        spec = resources.seat(env, seat)
        endpoint = spec.model or resources.endpoint
        for where, sampling in ((f"seats.{seat}.sampling", spec.sampling),
                                ("model.sampling", endpoint.sampling if endpoint else {})):
            for key in RESERVED_SAMPLING:
                if key in sampling:
                    raise InterplayError(f"{where}.{key}: the harness sets {key!r} itself; "
                                         "remove it from the sampling settings")
            if problem := sampling_problem(sampling, where):
                raise InterplayError(problem)
        seat_harness(spec, seat)
    env.check_seats({seat: resources.seat(env, seat) for seat in env.seats})


def check_harnesses(env: Env, resources: Any, tasks: Sequence[Task] | None = None) -> None:
    """Ask every seat's harness whether it can run here (:meth:`interplay.Harness.check`),
    and the sandbox the episodes work in (:func:`check_sandbox`), before any episode starts:
    the first problem is the run's one-line error."""
    from interplay.run.episode import seat_harness

    for seat in env.seats:
        cls, settings = seat_harness(resources.seat(env, seat), seat)
        for problem in cls(settings).check():
            raise InterplayError(f"seats.{seat}: {problem}")
    check_sandbox(env, resources, tasks)


def check_sandbox(env: Env, resources: Any, tasks: Sequence[Task] | None = None) -> None:
    """Refuse a run whose episodes cannot get the sandbox they work in, in one line saying
    what to install or set: an env (or a task of ``tasks``) that needs one where the run
    gives none, a backend that cannot run here (no daemon), a workspace or a seat's harness
    the backend cannot serve, a sandbox named for an env none of whose seats works in one."""
    from interplay.contracts.sandbox import SandboxNeeds
    from interplay.run.episode import seat_harness
    from interplay.values.records import Workspace

    settings = resources.sandbox_settings
    given = str(settings.get("kind") or "")
    with_workspace = [t for t in tasks or () if t.workspace is not None]
    if given == "none":
        if env.needs_sandbox or with_workspace:
            what = (f"env {env.name!r} needs a sandbox" if env.needs_sandbox else
                    f"task {with_workspace[0].idx} brings a workspace")
            raise InterplayError(f"sandbox.kind = \"none\": {what}; run it with --sandbox "
                                 f"docker (a Docker Engine) or --sandbox local (a folder of "
                                 f"this machine, no isolation)")
        return
    backend = resources.sandbox_backend(env, with_workspace[0] if with_workspace else None)
    if backend is None:
        return
    seats = sorted(env.sandbox_seats & set(env.seats))
    if not seats:
        raise InterplayError(f"sandbox.kind = {given or 'docker'!r}: no seat of env "
                             f"{env.name!r} works in a sandbox (its seats: "
                             f"{', '.join(env.seats)}); leave sandbox.kind unset")
    cls, cfg = backend
    sandbox = cls(cfg)
    for problem in sandbox.check():
        raise InterplayError(problem)
    needs = {}
    for seat in seats:
        harness, harness_cfg = seat_harness(resources.seat(env, seat), seat)
        needs[seat] = harness(harness_cfg).sandbox_needs()
    for task in with_workspace or [None]:
        workspace = (task.workspace if task is not None else None) or Workspace()
        where = f"task {task.idx}: " if task is not None else ""
        # What the workspace alone cannot have (its image) is the task's; the rest a seat's.
        for problem in sandbox.problems(workspace, SandboxNeeds()):
            raise InterplayError(f"{where}{problem}")
        for seat, need in needs.items():
            for problem in sandbox.problems(workspace, need):
                raise InterplayError(f"seats.{seat}: {where}{problem}")


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``)."""
    if isinstance(data, Mapping) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


#: Keys whose values are URLs that may carry credentials (``user:password@``).
_URL_KEYS = frozenset({"base_url", "proxy"})
_MASKED = "://***@"
#: What config.json keeps of an endpoint's header value (any of them may be a credential).
MASKED_HEADER = "***"


def _is_endpoint(data: Mapping[str, Any]) -> bool:
    return "base_url" in data and isinstance(data.get("headers"), Mapping)


def without_credentials(data: Any) -> Any:
    """``data`` (a resolved config, plain data) with the credentials of every endpoint
    masked: its URL's (``http://***@host``) and the values of its ``headers``
    (:data:`MASKED_HEADER`; their names kept): what config.json keeps, since results folders
    are shared and shown (``interplay view``, reports)."""
    if isinstance(data, Mapping):
        out = {k: redact_url(v) if k in _URL_KEYS and isinstance(v, str)
               else without_credentials(v) for k, v in data.items()}
        if _is_endpoint(data):
            out["headers"] = {name: MASKED_HEADER for name in data["headers"]}
        return out
    if isinstance(data, list):
        return [without_credentials(v) for v in data]
    return data


def masked_credentials(data: Any, prefix: str = "") -> list[str]:
    """The dotted keys of ``data`` whose credentials are masked (as config.json keeps them:
    a URL's, a header's value): a run resumed from it must be given them again."""
    items: Any = (data.items() if isinstance(data, Mapping) else
                  enumerate(data) if isinstance(data, list) else ())
    found = []
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        if key in _URL_KEYS and isinstance(value, str) and _MASKED in value:
            found.append(path)
        elif key == "headers" and isinstance(data, Mapping) and _is_endpoint(data):
            found += [f"{path}.{name}" for name, v in value.items() if v == MASKED_HEADER]
        else:
            found += masked_credentials(value, path)
    return found


def give_again(key: str, *, base_url_flag: bool = True) -> str:
    """What to do about a masked credential at ``key`` (:func:`masked_credentials`): one
    clause, without where it was refused (``base_url_flag``: the command takes --base-url)."""
    if ".headers." in key:
        return (f"{key}: config.json does not keep a header's value; give it again "
                f"(--set {key}=...)")
    hint = "--base-url or " if key == "model.base_url" and base_url_flag else ""
    return (f"{key} had credentials, which config.json does not keep; give them again "
            f"({hint}--set {key}=...)")


def reach_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a setting of how an endpoint is reached, or a seat's time limit, differs
    (what a resumed run may change and its config.json then records)."""
    a, b = flatten(old), flatten(new)
    return any(a.get(k) != b.get(k) for k in set(a) | set(b)
               if k.split(".")[0] in ("model", "seats") and resume_may_change(k))


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose values differ, ignoring where the run writes and how fast it runs."""
    a, b = flatten(old), flatten(new)
    return sorted(k for k in set(a) | set(b)
                  if not resume_may_change(k) and a.get(k) != b.get(k))

