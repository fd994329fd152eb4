"""The Claude Code harness's settings and the command line, environment and files of one
Claude Code segment.

Claude Code runs headless (``claude -p``, its answer as ``stream-json`` events) pointed at the
trace's route through the interception server (``ANTHROPIC_BASE_URL``: the Messages route),
in a config home of the trace's own, with the
seat's model for every model name it may use, offline and quiet. The first segment is started
with a session id interplay chooses (``--session-id``); every later one resumes it
(``--resume``). The env's system prompt is read from a file (no argument length limit, not
shown by ``ps``), the tool gateway is its only MCP server (a config file naming the gateway,
with the trace's token; the trace's files are readable by its user alone),
and its own built-in tools are off unless the seat's settings name them. The prompt comes on
stdin. Also: finding the ``claude`` executable and reading its version.

This module owns what Claude Code is started with; it must not start it for a segment, read
what it did, or keep anything between segments.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import attrs

from interplay import ProgramConfig
from interplay.processes import find_program

#: The Claude Code CLI version this harness is tested against.
CLAUDE_CODE_VERSION = "2.1.328"
NPM_PACKAGE = "@anthropic-ai/claude-code"
INSTALL_HINT = (f"install Claude Code into the venv with `npm install --prefix .venv/npm "
                f"{NPM_PACKAGE}@{CLAUDE_CODE_VERSION}` and link "
                f".venv/npm/node_modules/.bin/claude into .venv/bin (or run `bash .ci/setup "
                f"--test`), or set harness_config.binary to its path")
#: The name Claude Code knows the tool gateway by: the model sees the env's tools as
#: ``mcp__interplay__<tool>``.
MCP_SERVER = "interplay"
#: Seconds Claude Code waits for the tool gateway to answer its handshake and tool list.
MCP_STARTUP_S = 30
#: Seconds Claude Code waits for a tool call beyond the slowest tool's own timeout, so that
#: the gateway's timeout (the text the chat harness gives the model too) always answers first.
MCP_CALL_MARGIN_S = 15
#: The model names Claude Code may ask for on its own (a smaller model for side tasks, a
#: sub-agent's): every one is the seat's model.
_MODEL_VARS = ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
               "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
               "ANTHROPIC_DEFAULT_FABLE_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL")
#: Variables of this process's environment never passed on: another endpoint, key, provider
#: (Bedrock, Vertex) or config home of the user's would take Claude Code away from the trace.
_NOT_PASSED = ("ANTHROPIC_", "CLAUDE_", "AWS_BEARER_TOKEN_BEDROCK")


#: Claude Code's own tools a seat working in a sandbox gets when its settings name none.
SANDBOX_TOOLS = ("Bash", "Read", "Edit", "Write", "Glob", "Grep")


@attrs.define
class ClaudeCodeConfig(ProgramConfig):
    """Settings of the Claude Code harness (a seat's ``harness_config``)."""

    #: Claude Code's own tools the model may use (``["Bash", "Read", "Edit"]``, ...), each
    #: allowed without asking. null: none on this machine (the seat's tools are the env's,
    #: through the tool gateway); inside the episode's sandbox, Bash, Read, Edit, Write, Glob
    #: and Grep, which then work on the task's workspace.
    builtin_tools: list[str] | None = None
    #: Claude Code's limit on model calls in one segment (``--max-turns``); None: no limit but
    #: ``timeout_s``.
    max_turns: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1)))
    #: Claude Code's minimal mode (``--bare``): no hooks, plugins, auto-memory, CLAUDE.md
    #: discovery or background fetches, so the seat is what interplay configures. False runs
    #: Claude Code as installed (it then reads a configured workdir's CLAUDE.md).
    bare: bool = True
    #: The output tokens Claude Code asks for per model call (``CLAUDE_CODE_MAX_OUTPUT_TOKENS``)
    #: unless the seat's sampling sets ``max_tokens``. Of a model it does not know it otherwise
    #: asks 32,000, which a server with a 32K window (vLLM's ``max_model_len``) refuses for
    #: any prompt. None: Claude Code's own choice.
    max_output_tokens: int | None = attrs.field(
        default=8192, validator=attrs.validators.optional(attrs.validators.ge(1)))

    def tools(self, inside: bool) -> list[str]:
        """The built-in tools it runs with, inside a sandbox or not."""
        if self.builtin_tools is not None:
            return list(self.builtin_tools)
        return list(SANDBOX_TOOLS) if inside else []


def argv(binary: str, cfg: ClaudeCodeConfig, *, model: str, session_id: str, resume: bool,
         system_prompt_file: str | None, mcp_config_file: str | None,
         settings_file: str | None = None, inside: bool = False) -> list[str]:
    """The ``claude`` command line of one segment (the prompt comes on stdin): a new session
    ``session_id``, or (``resume``) that session continued; ``inside``: in the episode's
    sandbox (its own tools on unless the settings say otherwise)."""
    tools = cfg.tools(inside)
    out = [binary, "-p", "--output-format", "stream-json", "--verbose", "--model", model,
           # Built-in tools off unless named (or in a sandbox), and only the MCP servers given
           # here: the seat's tools are the env's.
           "--tools", ",".join(tools), "--strict-mcp-config",
           # No user, project or local settings files: a configured workdir's .claude/ does
           # not reconfigure the seat.
           "--setting-sources", ""]
    if cfg.bare:
        out.append("--bare")
    out += ["--resume", session_id] if resume else ["--session-id", session_id]
    if system_prompt_file is not None:
        out += ["--system-prompt-file", system_prompt_file]
    allowed = list(tools)
    if mcp_config_file is not None:
        out += ["--mcp-config", mcp_config_file]
        allowed.append(f"mcp__{MCP_SERVER}")
    if allowed:
        # Headless, Claude Code asks no one: a tool it would ask about is refused. These it
        # may use without asking.
        out += ["--allowedTools", ",".join(allowed)]
    if cfg.max_turns is not None:
        out += ["--max-turns", str(cfg.max_turns)]
    if settings_file is not None:
        out += ["--settings", settings_file]
    return [*out, *cfg.extra_args]


def mcp_config(url: str, token: str, tool_timeout_s: float) -> dict[str, object]:
    """The MCP config naming the tool gateway as Claude Code's only server, with the trace's
    token (the file is the trace's, readable by Claude Code's user alone: its commands do not
    find the token in their environment), and a call may take the slowest tool's own timeout
    (``tool_timeout_s``) and a margin."""
    timeout_ms = (math.ceil(tool_timeout_s) + MCP_CALL_MARGIN_S) * 1000
    return {"mcpServers": {MCP_SERVER: {
        "type": "http", "url": url,
        "headers": {"Authorization": f"Bearer {token}"},
        "timeout": timeout_ms}}}


def environment(base: Mapping[str, str], *, home: str, base_url: str, model: str,
                wait_s: float, tool_timeout_s: float, max_retries: int,
                max_output_tokens: int | None) -> dict[str, str]:
    """Claude Code's environment for one segment: ``base`` (this process's on this machine;
    inside a sandbox, none) without anything that would point it elsewhere
    (:data:`_NOT_PASSED`), with the trace's config home and route, the seat's model under
    every name, and ``wait_s`` (the longer of the seat's and the harness's turn limits) as
    the longest it waits for an answer: its own request, first-byte and idle timeouts would
    otherwise end a slow model's call first. Neither the trace's secret nor the gateway's
    token is in it (the secret comes from :func:`settings`' key helper, the token in the MCP
    config): the commands Claude Code runs inherit its environment."""
    out = {k: v for k, v in base.items() if not k.startswith(_NOT_PASSED)}
    wait_ms = str(math.ceil(wait_s * 1000))
    out.update({
        "HOME": home, "CLAUDE_CONFIG_DIR": f"{home}/.claude",
        # Claude Code appends /v1/messages to its base URL.
        "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
        **dict.fromkeys(_MODEL_VARS, model),
        # Offline and quiet: no telemetry, update checks, error reports or other traffic.
        "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_RETRIES": str(max_retries),
        "API_TIMEOUT_MS": wait_ms, "CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS": wait_ms,
        "API_FORCE_IDLE_TIMEOUT": "0",
        # Every MCP tool loaded up front: a deferred tool is loaded only by a tool search,
        # which the seat does not have.
        "ENABLE_TOOL_SEARCH": "false",
        "MCP_TIMEOUT": str(MCP_STARTUP_S * 1000),
        "MCP_TOOL_TIMEOUT": str((math.ceil(tool_timeout_s) + MCP_CALL_MARGIN_S) * 1000),
    })
    if max_output_tokens is not None:
        out["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(max_output_tokens)
    return out


def settings(key_file: str) -> dict[str, object]:
    """Claude Code's settings for one segment: its API key read by a helper command from the
    trace's own file (``apiKeyHelper``), not from its environment, which the commands it runs
    inherit (its own scrubbing of their environment needs bubblewrap, which cannot run in a
    container)."""
    return {"apiKeyHelper": f"cat {key_file}"}


def find_claude(binary: str | None = None) -> str:
    """The ``claude`` executable: ``binary`` if given, else next to the running Python (the
    venv's bin), else on PATH. InterplayError with the install command when there is none."""
    return find_program("claude", binary, harness="claude-code", hint=INSTALL_HINT)


def seat_max_tokens(sampling: Mapping[str, object]) -> int | None:
    """The token limit ``sampling`` sets (under either Chat Completions name), if any."""
    for key in ("max_tokens", "max_completion_tokens"):
        value = sampling.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def dump_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)
