"""The codex harness's settings and the command line and environment of one codex segment.

codex runs as ``codex exec`` (or ``codex exec resume <thread_id>``) with a model provider named
``interplay`` pointed at the trace's route through the interception server (Responses API, the
trace's secret in :data:`KEY_VAR`), the tool gateway as its MCP server :data:`MCP_SERVER` when
the seat has tools (its token in :data:`TOKEN_VAR`), every setting a ``-c`` override (no file
is written), and the prompt on stdin. Also: finding the codex executable.

This module owns what codex is started with; it must not start codex, read what it did, or
keep anything between segments.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import attrs

from interplay import find_program, owner_tag

#: The codex CLI version this harness is tested against.
CODEX_VERSION = "0.169.0"
NPM_PACKAGE = "@openai/codex"
INSTALL_HINT = (f"install the codex CLI into the venv with "
                f"`npm install --prefix .venv/npm {NPM_PACKAGE}@{CODEX_VERSION}` and link "
                f".venv/npm/node_modules/.bin/codex into .venv/bin (or run `bash .ci/setup "
                f"--test`), or set harness_config.binary to its path")
#: The environment variable that carries the trace's secret to codex (its provider's env_key).
KEY_VAR = "INTERPLAY_CODEX_KEY"
#: The environment variable that tags every process of one codex run (codex passes it to the
#: commands it runs, which pass it on), so the ones that left codex's process tree (``setsid``,
#: double forks; codex itself only ends their process group) are found and killed at the end.
RUN_VAR = "INTERPLAY_CODEX_RUN"
PROVIDER = "interplay"
#: The name codex knows the tool gateway by (``mcp_servers.<name>``): the model sees the env's
#: tools in the namespace ``mcp__<name>`` (``mcp__interplay__message_user`` to a Chat
#: Completions model, through the interception server).
MCP_SERVER = "interplay"
#: What the names of the env's tools start with, as the model is offered them.
TOOL_PREFIX = f"mcp__{MCP_SERVER}__"
#: The environment variable that carries the trace's tool-gateway token to codex (its MCP
#: server's ``bearer_token_env_var``).
TOKEN_VAR = "INTERPLAY_MCP_TOKEN"
#: Seconds codex waits for the tool gateway to answer its handshake and tool list.
MCP_STARTUP_S = 30
#: Seconds codex waits for a tool call beyond the slowest tool's own timeout, so that the
#: gateway's timeout (the text the chat harness gives the model too) always answers first.
MCP_CALL_MARGIN_S = 15

Sandbox = Literal["read-only", "workspace-write", "danger-full-access"]


@attrs.define
class CodexConfig:
    """Settings of the codex harness (a seat's ``harness_config``)."""

    #: The codex executable; None looks next to the running Python (the venv's bin) and then
    #: on PATH.
    binary: str | None = None
    #: codex's sandbox for the shell commands the model runs.
    sandbox: Sandbox = "workspace-write"
    #: Wall-time limit of one segment; past it codex's process tree is killed.
    timeout_s: float = attrs.field(default=600.0, validator=attrs.validators.gt(0))
    #: Extra arguments for ``codex exec`` (placed before the prompt, also on resume), e.g.
    #: ``["-c", "model_reasoning_effort=\"low\""]``.
    extra_args: list[str] = attrs.Factory(list)
    #: The directory codex works in (created if missing, kept). None gives every trace a fresh
    #: temp dir, removed when the trace closes.
    workdir: str | None = None
    #: Where the per-trace directories (CODEX_HOME, and the workdir unless configured) are
    #: made. None is the system temp dir.
    state_dir: str | None = None
    #: codex's own request and stream retries against the interception server (which already
    #: retries the real endpoint).
    max_retries: int = attrs.field(default=0, validator=attrs.validators.ge(0))


def argv(binary: str, cfg: CodexConfig, *, base_url: str, model: str,
         instructions: str | None, subcommand: Sequence[str], run_tag: str | None = None,
         tools_url: str | None = None, tool_timeout_s: float = 30.0) -> list[str]:
    """The codex command line of one segment (the prompt comes on stdin: ``-``);
    ``instructions`` are codex's developer instructions; ``subcommand`` is empty for a fresh
    session or ``["resume", thread_id]``; ``run_tag`` is set as :data:`RUN_VAR` in the
    commands' environment; ``tools_url`` is the tool gateway codex is given as an MCP server
    (its token in :data:`TOKEN_VAR`), with calls allowed up to ``tool_timeout_s`` (the slowest
    tool's own timeout)."""
    p = f"model_providers.{PROVIDER}"
    out = [binary, "exec", "--skip-git-repo-check", "--json",
           "-c", f"model_provider={PROVIDER}",
           "-c", f"{p}.name={PROVIDER}",
           "-c", f"{p}.base_url={toml_string(base_url)}",
           "-c", f"{p}.wire_api=responses",
           "-c", f"{p}.env_key={KEY_VAR}",
           "-c", f"{p}.request_max_retries={cfg.max_retries}",
           "-c", f"{p}.stream_max_retries={cfg.max_retries}",
           # Offline: no analytics and no plugin fetches, so the interception server (and the
           # tool gateway, when the seat has tools) is all codex connects to.
           "-c", "analytics.enabled=false", "--disable", "plugins",
           # No snapshot of the machine's login shell at start: codex waits for it before it
           # exits, so a profile that stalls (pyenv's rehash, waiting 60 s on a lock a killed
           # shell left) stalled every segment, whether or not the model ran a command.
           "--disable", "shell_snapshot",
           # Before `resume`, which has no -s of its own and otherwise drops to read-only.
           "-s", cfg.sandbox,
           "-m", model]
    if instructions:
        out += ["-c", f"developer_instructions={toml_string(instructions)}"]
    if tools_url is not None:
        m = f"mcp_servers.{MCP_SERVER}"
        out += ["-c", f"{m}.url={toml_string(tools_url)}",
                "-c", f"{m}.bearer_token_env_var={TOKEN_VAR}",
                # codex exec never asks: without this, every call of an MCP tool is refused
                # ("requires approval, but approval policy is never").
                "-c", f"{m}.default_tools_approval_mode=\"approve\"",
                "-c", f"{m}.startup_timeout_sec={MCP_STARTUP_S}",
                "-c", f"{m}.tool_timeout_sec={math.ceil(tool_timeout_s) + MCP_CALL_MARGIN_S}"]
    if run_tag is not None:
        # Set by codex itself too, so a shell_environment_policy that inherits nothing still
        # tags the commands: with this segment's tag, and with the run's, which ends them if
        # the run is killed.
        out += ["-c", f"shell_environment_policy.set.{RUN_VAR}={toml_string(run_tag)}"]
        owner = owner_tag()
        if owner is not None:
            out += ["-c", f"shell_environment_policy.set.{owner[0]}={toml_string(owner[1])}"]
    out += list(cfg.extra_args)
    # The prompt goes on stdin: no argv length limit, and text starting with "-" stays text.
    return [*out, *subcommand, "-"]


def environment(*, home: Path, secret: str, run_tag: str,
                tools_token: str | None) -> dict[str, str]:
    """codex's environment for one segment: this process's, with its CODEX_HOME, the trace's
    secret, the segment's tag and, when the seat has tools, the gateway token."""
    out = {**os.environ, "CODEX_HOME": str(home), KEY_VAR: secret, RUN_VAR: run_tag}
    if tools_token is not None:
        out[TOKEN_VAR] = tools_token
    return out


def find_codex(binary: str | None = None) -> str:
    """The codex executable: ``binary`` if given, else next to the running Python (the venv's
    bin), else on PATH. InterplayError with the install command when there is none."""
    return find_program("codex", binary, harness="codex", hint=INSTALL_HINT)


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (``-c key=value`` parses its value as TOML)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
