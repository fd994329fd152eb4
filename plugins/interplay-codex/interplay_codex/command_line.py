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
from collections.abc import Mapping, Sequence
from typing import Literal

import attrs

from interplay import ProgramConfig
from interplay.processes import find_program, owner_tag

#: The codex CLI version this harness is tested against.
CODEX_VERSION = "0.169.0"
NPM_PACKAGE = "@openai/codex"
INSTALL_HINT = (f"install the codex CLI into the venv with "
                f"`npm install --prefix .venv/npm {NPM_PACKAGE}@{CODEX_VERSION}` and link "
                f".venv/npm/node_modules/.bin/codex into .venv/bin (or run `bash .ci/setup "
                f"--test`), or set harness_config.binary to its path")
#: The environment variable that carries the trace's secret to codex (its provider's env_key).
KEY_VAR = "INTERPLAY_CODEX_KEY"
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
class CodexConfig(ProgramConfig):
    """Settings of the codex harness (a seat's ``harness_config``)."""

    #: codex's own sandbox for the shell commands the model runs; null: "workspace-write" on
    #: this machine, "danger-full-access" inside the episode's sandbox (the container is the
    #: sandbox there, and codex's own cannot work inside one).
    sandbox: Sandbox | None = None


def argv(binary: str, cfg: CodexConfig, *, base_url: str, model: str,
         instructions: str | None, subcommand: Sequence[str],
         run_tag: tuple[str, str] | None = None, tools_url: str | None = None,
         tool_timeout_s: float = 30.0, inside: bool = False) -> list[str]:
    """The codex command line of one segment (the prompt comes on stdin: ``-``);
    ``instructions`` are codex's developer instructions; ``subcommand`` is empty for a fresh
    session or ``["resume", thread_id]``; ``run_tag`` (variable, value), the segment's tag, is
    set in the commands' environment by codex itself; ``tools_url`` is the tool gateway codex
    is given as an MCP server (its token in :data:`TOKEN_VAR`), with calls allowed up to
    ``tool_timeout_s`` (the slowest tool's own timeout); ``inside``: codex runs in the
    episode's sandbox."""
    sandbox = cfg.sandbox or ("danger-full-access" if inside else "workspace-write")
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
           "-s", sandbox,
           # The commands it runs get neither the trace's secret nor the gateway's token
           # (codex's own defaults leave out *KEY*, *TOKEN*; named here so a setting that
           # lifts those defaults does not hand them on).
           "-c", f"shell_environment_policy.exclude=[{toml_string(KEY_VAR)}, "
                 f"{toml_string(TOKEN_VAR)}]",
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
        # tags the commands: with this segment's tag (codex runs them in sessions of their
        # own; the tag finds them at the segment's end), and with the run's, which ends them
        # if the run is killed.
        out += ["-c", f"shell_environment_policy.set.{run_tag[0]}={toml_string(run_tag[1])}"]
        owner = owner_tag()
        if owner is not None:
            out += ["-c", f"shell_environment_policy.set.{owner[0]}={toml_string(owner[1])}"]
    out += list(cfg.extra_args)
    # The prompt goes on stdin: no argv length limit, and text starting with "-" stays text.
    return [*out, *subcommand, "-"]


def environment(base: Mapping[str, str], *, home: str, secret: str,
                tools_token: str | None) -> dict[str, str]:
    """codex's environment for one segment: ``base`` (this process's on this machine; inside
    a sandbox, none), with its CODEX_HOME, the trace's secret and, when the seat has tools,
    the gateway token."""
    out = {**base, "CODEX_HOME": home, KEY_VAR: secret}
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
