"""The records interplay stores and passes around, and their JSON form.

Messages keep the OpenAI chat shape (tool calls included) so they go on the wire as they are.
Every stored top-level record (Trace, Episode) carries ``schema_version``. JSON goes through a
converter built by :func:`make_converter`, never cattrs' global one.

This module holds plain data: no I/O, no model calls, no logging. The fast way an episode's
line is written, with the JSON its records already hold spliced in, is
:mod:`~interplay.values.splicing`'s: a field added to ModelCall or Trace is a key there too (the
round-trip tests hold the two to one form).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Mapping
from typing import Any, Literal

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from interplay._plumbing import codec as _codec
from interplay.errors import InterplayError

SCHEMA_VERSION = 1

Role = Literal["system", "developer", "user", "assistant", "tool"]
_ROLES = ("system", "developer", "user", "assistant", "tool")


def _check_role(_: Any, __: Any, role: Any) -> None:
    # A plain function rather than attrs' in_ validator, a class: two messages are made per
    # model call.
    if role not in _ROLES:
        raise ValueError(f"message role must be one of {', '.join(_ROLES)}; got {role!r}")


@attrs.frozen
class ToolCall:
    """A tool call as the model made it; ``arguments`` is the JSON text it produced."""

    #: The call's id, as the model gave it (a tool message answers it by tool_call_id).
    id: str
    #: The tool's name.
    name: str
    #: The arguments as the JSON text the model wrote.
    arguments: str = "{}"

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; raises ValueError when they are not a JSON object."""
        value = _codec.loads(self.arguments or "{}")
        if not isinstance(value, dict):
            raise ValueError("tool arguments must be a JSON object")
        return value


@attrs.frozen
class Message:
    """One chat message in the OpenAI shape."""

    role: str = attrs.field(validator=_check_role)
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    # The wire form, made on first use and shared by every request that carries this message:
    # a conversation resent on every call would otherwise be converted and encoded again each
    # time (and held once per recorded request).
    _wire: dict[str, Any] | None = attrs.field(default=None, init=False, eq=False, hash=False,
                                               repr=False)
    _wire_json: bytes | None = attrs.field(default=None, init=False, eq=False, hash=False,
                                           repr=False)

    def wire(self) -> dict[str, Any]:
        """The OpenAI dict of this message, made once and shared: read it, never change it
        (:meth:`to_openai` gives a fresh one to change)."""
        wire = self._wire
        if wire is None:
            wire = message_to_openai(self)
            object.__setattr__(self, "_wire", wire)
        return wire

    def wire_json(self) -> bytes:
        """:meth:`wire` as compact UTF-8 JSON, encoded once."""
        data = self._wire_json
        if data is None:
            data = _codec.dumps_kept(self.wire())
            object.__setattr__(self, "_wire_json", data)
        return data

    @property
    def text(self) -> str:
        """The message's text: the content string, or its text parts joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(
            str(part.get("text", "")) for part in self.content if isinstance(part, Mapping)
        )

    def to_openai(self) -> dict[str, Any]:
        return message_to_openai(self)

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> Message:
        return message_from_openai(data)


def message_to_openai(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.name is not None:
        out["name"] = m.name
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def message_from_openai(data: Mapping[str, Any]) -> Message:
    if not isinstance(data, Mapping):
        raise InterplayError(f"a message must be an object, got {type(data).__name__}")
    role = data.get("role")
    if role not in _ROLES:
        raise InterplayError(f"message role must be one of {', '.join(_ROLES)}; got {role!r}")
    raw_calls = data.get("tool_calls") or ()
    if not isinstance(raw_calls, list | tuple):
        raise InterplayError(f"message tool_calls must be a list, got {type(raw_calls).__name__}")
    calls = []
    for i, raw in enumerate(raw_calls):
        if not isinstance(raw, Mapping):
            raise InterplayError(f"message tool_calls[{i}] must be an object, "
                                 f"got {type(raw).__name__}")
        fn = raw.get("function") or {}
        if not isinstance(fn, Mapping):
            raise InterplayError(f"message tool_calls[{i}].function must be an object, "
                                 f"got {type(fn).__name__}")
        args = fn.get("arguments", "{}")
        calls.append(ToolCall(id=str(raw.get("id", "")), name=str(fn.get("name", "")),
                              arguments=args if isinstance(args, str)
                              else _codec.dumps(args).decode()))
    content = data.get("content")
    if content is not None and not isinstance(content, str | list):
        raise InterplayError("message content must be a string, a list of parts, or null")
    for key in ("name", "tool_call_id"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise InterplayError(f"message {key} must be a string, got {type(value).__name__}")
    return Message(role=role, content=content, name=data.get("name"),
                   tool_calls=tuple(calls), tool_call_id=data.get("tool_call_id"))


@attrs.frozen
class Repo:
    """A git repository a task's workspace starts from, checked out on this machine and put
    into the sandbox (so it needs no network inside)."""

    #: The repository: a folder on this machine, or a URL ``git clone`` reads (offline: a
    #: folder or a ``file://`` URL); a relative path is read from the taskset's folder.
    url: str
    #: The commit (or tag, or branch) to check out; null: the repository's default head.
    commit: str | None = None


@attrs.frozen
class Workspace:
    """What a task brings to the sandbox its agent works in: an image (by name, or built from
    a Dockerfile), files, a folder, a git repository at a commit, setup commands. Everything
    is in place before the agent's first segment; what the agent changed in ``workdir`` is
    recorded on the episode (:class:`SandboxRecord`). Relative paths are read from the
    taskset's folder."""

    #: The image the sandbox starts from, by a name its backend knows (docker: an image on
    #: the daemon); null: the backend's default (docker: sandbox.image).
    image: str | None = None
    #: A Dockerfile the image is built from instead (its folder is the build context), built
    #: once per content and cached.
    dockerfile: str | None = None
    #: Seconds that Dockerfile may take to build, over the backend's setting (null: the
    #: backend's; docker: sandbox.build_timeout_s).
    build_timeout_s: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.gt(0)))
    #: The folder the agent works in, inside the sandbox: its commands' working folder and
    #: where files, folder and repo go; null: the image's own working folder, else
    #: /workspace.
    workdir: str | None = None
    #: Files written before the agent starts: path (relative to workdir, or absolute) ->
    #: text.
    files: dict[str, str] = attrs.Factory(dict)
    #: A folder on this machine whose contents are copied into workdir.
    folder: str | None = None
    #: A git repository checked out into workdir (before folder and files go in).
    repo: Repo | None = None
    #: Shell commands (bash -c) run in workdir, in order, after files, folder and repo are
    #: in; each must exit 0, or the episode ends as a sandbox_error saying which failed.
    setup: list[str] = attrs.Factory(list)
    #: Environment variables of every command run in the sandbox.
    env: dict[str, str] = attrs.Factory(dict)
    #: CPUs for this task's sandbox, over the backend's setting (null: the backend's).
    cpus: float | None = None
    #: Memory in MB for this task's sandbox, over the backend's setting (null: the
    #: backend's).
    memory_mb: int | None = None
    #: The user (a name or uid the image knows) the agent's commands run as inside, when
    #: they name none: its harness's program and tools; the task's files, folder and repo are
    #: given to this user, as are files the agent's tools write. Setup commands and the
    #: verifiers' run as the sandbox's own user (docker: sandbox.user, else the image's)
    #: unless they name one. Null: the sandbox's own user for the agent too.
    user: str | None = None

    def resolved(self, base: str | None) -> Workspace:
        """This workspace with its relative paths (dockerfile, folder, a repo's folder) read
        from ``base`` (the taskset's folder; None: left relative) and ``~`` expanded."""
        def at(path: str | None) -> str | None:
            if path is None or "://" in path:
                return path
            if path.startswith("~"):
                return os.path.expanduser(path)
            if path.startswith("/") or base is None:
                return path
            return f"{base.rstrip('/')}/{path}"

        repo = self.repo if self.repo is None else attrs.evolve(self.repo, url=at(self.repo.url))
        return attrs.evolve(self, dockerfile=at(self.dockerfile), folder=at(self.folder),
                            repo=repo)


@attrs.frozen
class Task:
    """One row of a taskset.

    ``prompt`` is text (one user message), a list of messages, or None (the task waits for the
    first user message). ``system_prompt`` becomes a synthesized system message.
    """

    #: The row's number in the taskset (a JSONL line's position unless the row gives one); episodes
    #: and rollouts are keyed by it.
    idx: int
    #: What the agent is sent first: text (one user message), a list of {role, content} messages, or
    #: null (the task waits for a first message, e.g. from a modeled user).
    prompt: str | tuple[Message, ...] | None = None
    #: A system message put before the prompt (null: none).
    system_prompt: str | None = None
    #: The reference answer verifiers compare with (exact, contains, regex; a rubric may show it to
    #: its judge).
    answer: Any = None
    #: Anything else the env's steps and verifiers read (e.g. a user's persona, a starting world);
    #: each env's describe names the keys its example row holds.
    info: dict[str, Any] = attrs.Factory(dict)
    #: What the task brings to the sandbox its agent works in (an image, files, a repository,
    #: setup commands); null: nothing of its own (the run's sandbox, if any, starts empty).
    workspace: Workspace | None = None
    # The messages synthesized from system_prompt and a text prompt, made once (so their wire
    # forms are too, and every request and the trace hold the same ones).
    _system: Message | None = attrs.field(default=None, init=False, eq=False, hash=False,
                                          repr=False)
    _user: Message | None = attrs.field(default=None, init=False, eq=False, hash=False,
                                        repr=False)

    def with_prompt(self, prompt: str | tuple[Message, ...] | None, *,
                    system: Message | None = None) -> Task:
        """This task with another prompt. ``system`` is the message :meth:`messages` made from
        ``system_prompt`` before: it is reused, not made (and encoded) again, when it still
        matches."""
        # Made directly: attrs.evolve looks the fields up on every call, once per model call here.
        task = Task(self.idx, prompt, self.system_prompt, self.answer, self.info,
                    self.workspace)
        if system is not None and system.role == "system" and system.content == self.system_prompt:
            object.__setattr__(task, "_system", system)
        return task

    def messages(self) -> list[Message]:
        """The opening messages: the system prompt, then the prompt."""
        out: list[Message] = []
        if self.system_prompt:
            system = self._system
            if system is None or system.content != self.system_prompt:
                system = Message("system", self.system_prompt)
                object.__setattr__(self, "_system", system)
            out.append(system)
        if isinstance(self.prompt, str):
            user = self._user
            if user is None or user.content != self.prompt:
                user = Message("user", self.prompt)
                object.__setattr__(self, "_user", user)
            out.append(user)
        elif self.prompt:
            out.extend(self.prompt)
        return out


@attrs.frozen
class Usage:
    """Tokens one model call used, as the endpoint reported them (zeros when it did not);
    usages add up with ``+``."""

    #: Tokens the endpoint read.
    prompt_tokens: int = 0
    #: Tokens it wrote.
    completion_tokens: int = 0
    #: Their sum, as the endpoint reported it.
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens,
                     self.completion_tokens + other.completion_tokens,
                     self.total_tokens + other.total_tokens)


def _as_ids(value: Any) -> array | None:
    if value is None or (isinstance(value, array) and value.typecode == "i"):
        return value
    return array("i", value)


def _as_floats(value: Any) -> array | None:
    if value is None or (isinstance(value, array) and value.typecode == "d"):
        return value
    return array("d", value)


@attrs.define
class Tokens:
    """What a model call's endpoint returned of its tokens, asked for by token capture
    (``Endpoint.capture_tokens``) on a trainable seat's calls.

    ``prompt_ids`` are the ids the endpoint read, ``completion_ids`` the ids it sampled (a stop
    token included when the endpoint returns it), ``logprobs`` one log-probability per
    completion id, as the endpoint computed it. A list the endpoint did not return is None and
    named in ``missing``: nothing here is re-tokenized or made up after the fact. ``warnings``
    say what does not fit (ids without logprobs, counts that differ from each other or from
    the call's usage). ``diverged_at`` is set on a call whose prompt does not begin with the
    previous call's prompt and completion ids: the index of its first id that differs (the
    endpoint re-tokenized the conversation instead of continuing from the ids it sampled, or
    an earlier turn's text changed); such a trace is no one training sequence.

    The numbers are kept as arrays (``array('i')`` of ids, ``array('d')`` of logprobs; given
    as lists, they are converted): a run holds every call of every live episode, and a list of
    a long prompt's ids would cost nine times the memory. ``list(...)`` one for a list; in an
    episode line each is a plain JSON list.
    """

    prompt_ids: array | None = attrs.field(default=None, converter=_as_ids)
    completion_ids: array | None = attrs.field(default=None, converter=_as_ids)
    logprobs: array | None = attrs.field(default=None, converter=_as_floats)
    #: The lists the endpoint did not return (prompt_ids, completion_ids, logprobs).
    missing: list[str] = attrs.Factory(list)
    #: What does not fit (ids without logprobs, counts that differ).
    warnings: list[str] = attrs.Factory(list)
    diverged_at: int | None = None

    @property
    def complete(self) -> bool:
        """Whether prompt ids, completion ids and logprobs are all here."""
        return (self.prompt_ids is not None and self.completion_ids is not None
                and self.logprobs is not None)


def _parsed(value: bytes | None) -> Any:
    return None if value is None else _codec.loads(value)


def listed(value: array | None) -> list[Any] | None:
    """An array of ids or logprobs as the JSON list it is stored as."""
    return None if value is None else value.tolist()


def _json_bytes(value: bytes | Mapping[str, Any] | None, _: Any = None) -> bytes | None:
    return value if value is None or isinstance(value, bytes) else _codec.dumps_kept(value)


@attrs.define
class ModelCall:
    """One request to a model and what came of it.

    ``response`` is the answer's body: JSON bytes as the endpoint sent them (for a streamed
    call, the chat.completion its chunks add up to; for a failed one, the error body when it
    is a JSON object). Bytes, not a parsed dict: a parsed chat.completion costs several times
    its bytes in objects, and a run keeps every call of every live episode.
    :meth:`parsed_response` parses it.
    """

    #: The call's id in the trace.
    id: str
    #: chat.completions or responses: the API the request spoke.
    api: str = "chat.completions"
    #: The model the request named.
    model: str = ""
    #: The request's JSON as it was sent (messages, tools, sampling).
    request: dict[str, Any] = attrs.Factory(dict)
    response: bytes | None = attrs.field(default=None, eq=_parsed)
    #: The tokens it used, as the endpoint reported them; null when it did not.
    usage: Usage | None = None
    #: When it started (epoch seconds).
    started_at: float = 0.0
    #: Seconds from its start to its whole answer.
    latency_s: float = 0.0
    #: Seconds to its first streamed token (null when not streamed).
    first_token_s: float | None = None
    #: Why the model stopped (stop, length, tool_calls), as the endpoint said.
    finish_reason: str | None = None
    #: Whether the answer was streamed.
    streamed: bool = False
    #: Attempts made, retries included.
    attempts: int = 1
    #: The HTTP status of the last attempt (null when none came).
    status: int | None = None
    #: What went wrong, in one line (null on success).
    error: str | None = None
    #: The kind of failure (timeout, server_error, rate_limited, ...: an ErrorType); null on
    #: success.
    error_type: str | None = None
    #: The token ids and logprobs the endpoint returned, when token capture asked for them
    #: (None: not asked, or the call failed). They are kept here rather than in
    #: ``response``, which then holds the answer without them.
    tokens: Tokens | None = None
    #: Who sent it, for a call a program made through the interception server: ``program``
    #: (the harness's program itself), ``other`` (another process with the trace's secret: a
    #: command the program ran; never training data), or null (not known: no /proc, or a
    #: call made in-process).
    caller: str | None = None
    # The assistant Message of ``response`` (interplay.model.assistant_message), with the response
    # it was read from: made once, not stored.
    _message: tuple[bytes, Message | None] | None = attrs.field(default=None, init=False,
                                                                eq=False, repr=False)

    def parsed_response(self) -> Any:
        """``response`` parsed (a new object on every call), or None."""
        return _parsed(self.response)


@attrs.define
class ToolRun:
    """One tool call run by a harness: which, how long, and whether it failed."""

    #: The id of the model's tool call it ran.
    call_id: str
    #: The tool's name.
    name: str
    #: Seconds it took.
    duration_s: float = 0.0
    #: null on success, else the kind of failure (unknown_tool, bad_arguments, timeout,
    #: tool_error, ...: an ErrorType).
    error_type: str | None = None


@attrs.frozen
class Reward:
    """One verifier's score, with its weight and the reason it gives."""

    #: The verifier that gave it.
    name: str
    #: The score (most verifiers: 0 to 1).
    value: float
    #: Its weight in the reward's weighted mean (0: recorded, not counted).
    weight: float = 1.0
    #: Why, in a line.
    reason: str | None = None
    #: The seat it scores (null: the episode).
    seat: str | None = None
    #: Anything more the verifier records (a rubric's per-criterion scores).
    info: dict[str, Any] = attrs.Factory(dict)


@attrs.define
class CommandRecord:
    """One command run in a sandbox for the run itself (a setup command, a test), as it
    ended: its output (stdout then stderr) kept to a bound, with how much was left out."""

    #: The command, as given.
    command: str
    #: Its exit code; null when it was stopped before it exited.
    exit_code: int | None = None
    #: Its output, bounded (its middle left out past the bound).
    output: str = ""
    #: Bytes of output left out.
    output_cut: int = 0
    #: Whether it was stopped at its time limit.
    timed_out: bool = False
    #: Seconds it ran.
    duration_s: float = 0.0


@attrs.frozen
class FileChange:
    """One file of a workspace the episode changed."""

    #: Its path, relative to the workspace.
    path: str
    #: ``added``, ``modified`` or ``deleted``.
    status: str
    #: Its size in bytes (before it was deleted, for a deleted one).
    size: int = 0


@attrs.define
class WorkspaceChanges:
    """What changed in a sandbox's workspace between the end of its setup and the end of the
    episode's steps: the files, and a unified diff of the text ones, each bounded."""

    #: The files added, modified or deleted, by path.
    files: list[FileChange] = attrs.Factory(list)
    #: Changed files left out of ``files`` past its bound.
    files_cut: int = 0
    #: The unified diff of the changed text files, bounded.
    diff: str = ""
    #: Bytes of the diff left out.
    diff_cut: int = 0
    #: Why a change is missing from the diff or the list (binary files, a workspace too
    #: large to compare), when one is.
    note: str | None = None


@attrs.define
class SandboxRecord:
    """The sandbox an episode's agent worked in: which, how long it took to start, set up
    and remove, its setup commands' outcomes and what the episode changed in it."""

    #: The sandbox backend (docker, local, ...).
    kind: str
    #: The image it ran (docker), as named or built; null for a backend without images.
    image: str | None = None
    #: The workspace folder inside it.
    workdir: str = ""
    #: Seconds to start it (an image built included) and put the task's files in.
    start_s: float = 0.0
    #: The task's setup commands, as they ended.
    setup: list[CommandRecord] = attrs.Factory(list)
    #: Seconds the setup commands took.
    setup_s: float = 0.0
    #: What the episode changed in the workspace; null when it never got that far.
    changes: WorkspaceChanges | None = None
    #: Seconds to remove it.
    stop_s: float = 0.0
    #: What its backend records of it (its container, network, limits).
    info: dict[str, Any] = attrs.Factory(dict)
    #: Why it could not start, be set up or be read, in one line; null when it could.
    error: str | None = None


@attrs.frozen
class EpisodeInfo:
    """What every trace of one episode shares."""

    #: The episode's id (report.html#episode=<id> opens it).
    episode_id: str
    #: The env's name.
    env: str
    #: The task's idx.
    task_idx: int
    #: The rollout's index among the task's.
    rollout: int = 0
    #: The episode's seed, derived from the run's seed, the task and the rollout.
    seed: int | None = None


@attrs.define
class Trace:
    """One agent's record in one episode: flat, stamped with the agent and the episode."""

    #: The agent's name (its seat's, unless a step named it otherwise).
    agent: str
    #: The episode it belongs to.
    episode: EpisodeInfo
    #: Whether it is training data (export takes only trainable traces).
    trainable: bool = True
    #: The seat it filled.
    seat: str | None = None
    #: The harness that ran it.
    harness: str = ""
    #: The model it called.
    model: str = ""
    #: Its conversation, OpenAI chat shape, in order.
    messages: list[Message] = attrs.Factory(list)
    #: Every model call it made, in order.
    model_calls: list[ModelCall] = attrs.Factory(list)
    #: Every tool call its harness ran, in order.
    tool_runs: list[ToolRun] = attrs.Factory(list)
    #: Why it could go no further (max_turns, timeout, error, ...); null when it ended normally.
    stop_condition: str | None = None
    #: What went wrong, in one line.
    error: str | None = None
    #: The kind of failure (an ErrorType); null when none.
    error_type: str | None = None
    #: The rewards that count for it: the episode's shared ones (a trainable trace's) and its
    #: seat's own.
    rewards: list[Reward] = attrs.Factory(list)
    #: Their weighted mean; null when the episode was not scored (an error).
    reward: float | None = None
    #: Numbers the steps recorded for it.
    metrics: dict[str, float] = attrs.Factory(dict)
    #: What its harness recorded (a command harness's runs: command_runs).
    info: dict[str, Any] = attrs.Factory(dict)
    #: When it started (epoch seconds).
    started_at: float = 0.0
    #: When it ended.
    ended_at: float | None = None
    #: The record's schema version.
    schema_version: int = SCHEMA_VERSION

    @property
    def usage(self) -> Usage:
        total = Usage()
        for call in self.model_calls:
            if call.usage is not None:
                total = total + call.usage
        return total


@attrs.define
class Episode:
    """All traces of one task x rollout, the env's own results, and the scores."""

    #: Which episode: id, env, task, rollout, seed.
    info: EpisodeInfo
    #: The task it ran.
    task: Task
    #: One per agent.
    traces: list[Trace] = attrs.Factory(list)
    #: What the env's steps wrote to ctx.results (interplay describe envs NAME lists the keys).
    results: dict[str, Any] = attrs.Factory(dict)
    #: Every verifier's reward.
    rewards: list[Reward] = attrs.Factory(list)
    #: The weighted mean of the rewards of no seat; null when it was not scored (an error).
    reward: float | None = None
    #: Numbers the steps and verifiers recorded.
    metrics: dict[str, float] = attrs.Factory(dict)
    #: The model calls LLM judges made while scoring.
    judge_calls: list[ModelCall] = attrs.Factory(list)
    #: The sandbox its agent worked in (start, setup, what changed); null when it had none.
    sandbox: SandboxRecord | None = None
    #: What ended it in an error, in one line; null when it completed.
    error: str | None = None
    #: The kind of error (an ErrorType: docs/results.md lists them); null when none.
    error_type: str | None = None
    #: When it started (epoch seconds).
    started_at: float = 0.0
    #: Seconds it ran.
    wall_s: float = 0.0
    #: The record's schema version; a newer one than interplay reads is refused.
    schema_version: int = SCHEMA_VERSION

    def trace(self, agent: str) -> Trace:
        for t in self.traces:
            if t.agent == agent or t.seat == agent:
                return t
        raise KeyError(agent)

    @property
    def usage(self) -> Usage:
        total = Usage()
        for trace in self.traces:
            total = total + trace.usage
        for call in self.judge_calls:
            if call.usage is not None:
                total = total + call.usage
        return total


def _structure_prompt(value: Any, _: Any) -> str | tuple[Message, ...] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return tuple(message_from_openai(m) for m in value)
    raise ValueError(f"prompt must be text, a list of messages or null, got {type(value).__name__}")


def _as_is(value: Any) -> Any:
    return value


def make_converter() -> cattrs.Converter:
    """A converter for every record here (JSON-ready dicts both ways)."""
    conv = cattrs.Converter(omit_if_default=False)
    # Tokens' fields convert lists to arrays themselves. First: hooks made below for the
    # records that hold them look these up when they are made.
    conv.register_structure_hook(array, lambda v, _: v)
    conv.register_unstructure_hook(array, listed)
    conv.register_unstructure_hook(Message, message_to_openai)
    conv.register_structure_hook(Message, lambda v, _: message_from_openai(v))
    conv.register_structure_hook(
        str | tuple[Message, ...] | None, _structure_prompt  # type: ignore[arg-type]
    )
    conv.register_unstructure_hook(
        str | tuple[Message, ...] | None,  # type: ignore[arg-type]
        lambda v: v if v is None or isinstance(v, str) else [message_to_openai(m) for m in v],
    )
    # A call's request went over the wire as JSON and its response came back as JSON: both are
    # JSON-ready as they are, and walking them would visit every resent message of every call.
    conv.register_unstructure_hook(ModelCall, make_dict_unstructure_fn(
        ModelCall, conv, request=override(unstruct_hook=_as_is),
        response=override(unstruct_hook=_parsed)))
    conv.register_structure_hook(ModelCall, make_dict_structure_fn(
        ModelCall, conv, response=override(struct_hook=_json_bytes)))
    conv.register_structure_hook(Any, lambda v, _: v)
    conv.register_structure_hook(
        str | list[dict[str, Any]] | None, lambda v, _: v  # type: ignore[arg-type]
    )
    for cls in (Trace, Episode):
        inner = conv.get_structure_hook(cls)

        def versioned(value: Any, typ: Any, _inner: Any = inner, _cls: type = cls) -> Any:
            version = value.get("schema_version") if isinstance(value, Mapping) else None
            if isinstance(version, int) and version > SCHEMA_VERSION:
                raise InterplayError(
                    f"{_cls.__name__} has schema_version {version}, newer than this interplay "
                    f"reads ({SCHEMA_VERSION}); upgrade interplay"
                )
            return _inner(value, typ)

        conv.register_structure_hook(cls, versioned)
    return conv


_converter: cattrs.Converter | None = None


def converter() -> cattrs.Converter:
    """A shared converter made by :func:`make_converter` (built once, on first use)."""
    global _converter
    if _converter is None:
        _converter = make_converter()
    return _converter


def to_json(record: Any) -> str:
    """A record (an Episode, a Trace, a Task, any attrs record here) as compact JSON text,
    the shape episodes.jsonl holds; :func:`from_json` reads it back."""
    return _codec.dumps(converter().unstructure(record)).decode()


def from_json(text: str | bytes, cls: type[Any]) -> Any:
    """The ``cls`` record that JSON text holds (a line of episodes.jsonl as an ``Episode``,
    say); the inverse of :func:`to_json`."""
    return converter().structure(_codec.loads(text), cls)
