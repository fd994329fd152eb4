"""The mini-swe-agent harness's settings and the command line, environment and config file of
one segment.

mini-swe-agent runs as its own command, ``mini``, non-interactively: its ``default`` agent
(no confirmations, no prompts) on one config file of the segment's own (``-c``): the config
specs of ``harness_config.config`` merged as ``mini -c`` merges them (``mini.yaml``: its
tool-calling setup), then, over them, the task (``run.task``), the model (``openai/`` and the
seat's model, through litellm at the trace's route of the interception server: Chat
Completions), the limits, and the environment that runs its commands
(:mod:`interplay_mini_swe_agent.environment`); its trajectory is saved where ``-o`` says.
The trace's secret reaches it in ``OPENAI_API_KEY`` alone, never in a file or its
trajectory. It is kept from this machine's settings of its own: its global config folder
(``MSWEA_GLOBAL_CONFIG_DIR``, whose ``.env`` it loads) is one of the trace's, and no
``MSWEA_*``, ``LITELLM_*`` or ``OPENAI_*`` variable of this process reaches it.

This module owns what mini-swe-agent is started with; it must not start it or read what it
did.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml

from interplay import InterplayError, ProgramConfig

#: The mini-swe-agent version this harness is tested against (its trajectory format and exit
#: statuses are read as this version writes them).
MINI_SWE_AGENT_VERSION = "2.4.6"
PACKAGE = "mini-swe-agent"
INSTALL_HINT = (f"install it into interplay's environment with `pip install "
                f"{PACKAGE}=={MINI_SWE_AGENT_VERSION}` (it comes with interplay-mini-swe-agent), "
                f"or set harness_config.binary to a `mini` of an environment that has "
                f"interplay-mini-swe-agent installed")
#: The environment class mini-swe-agent loads to run its commands.
ENVIRONMENT_CLASS = "interplay_mini_swe_agent.environment.SandboxEnvironment"
#: Where the env's instructions land in the system template.
INSTRUCTIONS = "\n\n{{ instructions }}"
#: Variables of this process's environment never passed on: another model, key, endpoint,
#: config folder, cost limit or retry policy of the user's would take it away from the trace.
_NOT_PASSED = ("MSWEA_", "LITELLM_", "OPENAI_")
#: Variables its commands never get on this machine (without a sandbox).
KEEP_OUT = ("OPENAI_API_KEY",)


def _positive(_: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be above 0 (or null), not {value!r}")


@attrs.define
class MiniSweAgentConfig(ProgramConfig):
    """Settings of the mini-swe-agent harness (a seat's ``harness_config``)."""

    #: mini-swe-agent's config specs, merged in order as ``mini -c`` merges them: a builtin
    #: name (``mini.yaml``, ``mini_textbased.yaml``), a path, or ``key=value``
    #: (``agent.step_limit=50``). Their agent templates and model settings are used; the
    #: model, its address, the environment and the task are the harness's.
    config: list[str] = attrs.Factory(lambda: ["mini.yaml"])
    #: Its model class: ``litellm`` (the model calls a ``bash`` tool, mini.yaml's way) or
    #: ``litellm_textbased`` (a fenced command in plain text, mini_textbased.yaml's way;
    #: name that config too).
    model_class: str = "litellm"
    #: Its limit on model calls in one segment (``agent.step_limit``); past it the segment
    #: ends as ``max_turns``. null: what the config says (mini.yaml: none).
    step_limit: int | None = attrs.field(default=None, validator=_positive)
    #: Its limit on the model's cost in dollars in one segment (``agent.cost_limit``), as
    #: litellm prices the model; past it the segment ends as ``max_cost``. null: what the
    #: config says (mini.yaml: 3). A model litellm does not price costs nothing.
    cost_limit: float | None = attrs.field(default=None, validator=_positive)
    #: Its own time limit on a segment in seconds (``agent.wall_time_limit_seconds``), seen
    #: before each model call: it stops then and saves its trajectory (the segment ends as a
    #: ``timeout`` naming this setting). ``timeout_s`` still kills it wherever it is.
    wall_time_limit_s: int | None = attrs.field(default=None, validator=_positive)
    #: Seconds one of its commands may run; then it and everything it started are stopped,
    #: and the model reads what it wrote and that it timed out (mini-swe-agent's own default
    #: is 30).
    command_timeout_s: int = attrs.field(default=60, validator=attrs.validators.gt(0))
    #: Bytes of each command's output kept (its middle left out past them; the model then
    #: reads mini-swe-agent's own head and tail of it).
    command_output_bytes: int = attrs.field(default=1024 * 1024,
                                            validator=attrs.validators.ge(1024))
    #: What runs each command inside the sandbox, the command as its last argument.
    shell: list[str] = attrs.Factory(lambda: ["bash", "-c"])
    #: Variables set for its commands, over its config's (mini.yaml: ``PAGER=cat``, ...).
    env: dict[str, str] = attrs.Factory(dict)


def installed_version() -> str | None:
    """The version of mini-swe-agent installed beside interplay, or None."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def builtin_config_dir() -> Path | None:
    """mini-swe-agent's own config folder, found without importing it (importing it makes
    its global config folder and loads the ``.env`` there into this process)."""
    spec = importlib.util.find_spec("minisweagent")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "config"


def read_specs(specs: Sequence[str]) -> list[dict[str, Any]]:
    """Each config spec as mini-swe-agent reads it (``key=value``; a path, relative to the
    current folder or ``MSWEA_CONFIG_DIR``; a builtin name; ``.yaml`` added when missing),
    read here, where the run starts (mini-swe-agent itself runs in the trace's own folder);
    InterplayError naming ``harness_config.config`` for one that is not found or does not
    parse."""
    out = []
    builtin = builtin_config_dir()
    for spec in specs:
        if "=" in spec:
            key, raw = spec.split("=", 1)
            try:
                value: Any = json.loads(raw)
            except ValueError:
                value = raw
            if not key or any(not part for part in key.split(".")):
                raise InterplayError(f"harness 'mini-swe-agent': config spec {spec!r} has an "
                                     f"empty key; fix harness_config.config")
            nested: dict[str, Any] = {}
            node = nested
            *parents, last = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
            out.append(nested)
            continue
        name = spec if spec.endswith(".yaml") else f"{spec}.yaml"
        candidates = [Path(name).expanduser(),
                      Path(os.environ.get("MSWEA_CONFIG_DIR", ".")) / name]
        if builtin is not None:
            candidates += [builtin / name, builtin / "extra" / name,
                           builtin / "benchmarks" / name]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            raise InterplayError(f"harness 'mini-swe-agent': config {spec!r} not found (a "
                                 f"builtin name such as mini.yaml, a file, or key=value); fix "
                                 f"harness_config.config")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise InterplayError(f"harness 'mini-swe-agent': config {str(path)!r} cannot be "
                                 f"read ({type(exc).__name__}); fix harness_config.config"
                                 ) from None
        if not isinstance(loaded, dict):
            raise InterplayError(f"harness 'mini-swe-agent': config {str(path)!r} is not a "
                                 f"mapping; fix harness_config.config")
        out.append(loaded)
    return out


def merged(configs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``configs`` merged, later ones over earlier ones, key by key (mini-swe-agent's way)."""
    out: dict[str, Any] = {}
    for config in configs:
        for key, value in config.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), dict):
                out[key] = merged([out[key], value])
            else:
                out[key] = dict(value) if isinstance(value, Mapping) else value
    return out


def segment_config(cfg: MiniSweAgentConfig, base: Mapping[str, Any], *, task: str,
                   system: str | None, model: str, base_url: str, socket: str | None,
                   cwd: str, request_timeout_s: float) -> dict[str, Any]:
    """The whole config of one segment: ``base`` (the specs of ``harness_config.config``
    merged) under the segment's own: the task, the model at ``base_url``, the limits, the
    environment (``socket``: the sandbox's bridge; None: this machine, in ``cwd``)."""
    agent: dict[str, Any] = {"agent_class": "default"}
    if cfg.step_limit is not None:
        agent["step_limit"] = cfg.step_limit
    if cfg.cost_limit is not None:
        agent["cost_limit"] = cfg.cost_limit
    if cfg.wall_time_limit_s is not None:
        agent["wall_time_limit_seconds"] = cfg.wall_time_limit_s
    if system:
        template = (base.get("agent") or {}).get("system_template") or ""
        agent["system_template"] = f"{template.rstrip()}{INSTRUCTIONS}" if template \
            else "{{ instructions }}"
    model_kwargs: dict[str, Any] = {"api_base": base_url, "timeout": request_timeout_s}
    environment: dict[str, Any] = {
        "environment_class": ENVIRONMENT_CLASS, "socket": socket or "", "cwd": cwd,
        "timeout": cfg.command_timeout_s, "instructions": system or "",
        "keep_out": [] if socket else list(KEEP_OUT)}
    if cfg.env:
        environment["env"] = dict(cfg.env)
    return merged([base, {"agent": agent,
            "model": {"model_class": cfg.model_class, "model_name": f"openai/{model}",
                      "model_kwargs": model_kwargs,
                      # Whatever the seat's model costs is the endpoint's business: litellm
                      # prices only the models it knows, and an unpriced one is no error.
                      "cost_tracking": "ignore_errors"},
            "environment": environment,
            "run": {"task": task}}])


def dump(config: Mapping[str, Any]) -> str:
    """A config as the YAML mini-swe-agent reads."""
    return yaml.safe_dump(dict(config), allow_unicode=True, sort_keys=False, width=1 << 20)


def argv(binary: str, cfg: MiniSweAgentConfig, *, config_file: str,
         trajectory: str) -> list[str]:
    """The ``mini`` command line of one segment: its whole config in ``config_file`` (the
    specs of ``harness_config.config`` merged, the segment's over them)."""
    return [binary, "-c", config_file, "-o", trajectory, *cfg.extra_args]


def environment(base: Mapping[str, str], *, home: str, secret: str,
                max_retries: int) -> dict[str, str]:
    """mini-swe-agent's environment: ``base`` (this process's) without the variables that
    would reconfigure it, the trace's secret as its key, its config folder ``home``."""
    env = {k: v for k, v in base.items() if not k.startswith(_NOT_PASSED)}
    env.update({
        "OPENAI_API_KEY": secret,
        "MSWEA_GLOBAL_CONFIG_DIR": home,
        # Set up already (else it asks for a model and a key on its terminal), and quiet.
        "MSWEA_CONFIGURED": "true",
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_COST_TRACKING": "ignore_errors",
        # The interception server retries the endpoint with the seat's policy already.
        "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": str(max_retries + 1),
        # litellm's price list from its own package, not fetched from the network.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # A failure's traceback without its local variables.
        "_TYPER_STANDARD_TRACEBACK": "1",
        "NO_COLOR": "1",
        "TERM": "dumb",
    })
    return env
