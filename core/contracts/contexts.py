"""What a step, a verifier, a harness and a user sim are handed: the context of one episode and
of one harness segment, as protocols, and the values that come with them (:class:`SeatSpec`,
:class:`Reply`).

The contracts (:mod:`interplay.contracts.step`, :mod:`interplay.contracts.verifier`,
:mod:`interplay.contracts.harness`, :mod:`interplay.contracts.usersim`,
:mod:`interplay.contracts.env`) speak in these types, and so does a plugin; the run implements them
(:class:`interplay.run.episode.LiveEpisodeContext`, :class:`interplay.run.agent.Agent`,
:class:`~interplay.run.agent.LiveChatSession`, :class:`~interplay.run.agent.LiveSegmentContext`),
so neither the contracts nor a plugin need the run. Each protocol holds what a plugin may rely
on; the run's classes carry more for their own use. One class is concrete, the same for every
context: :class:`EpisodeStore`, an episode's own state by type (``ctx.store``). This module
imports nothing above the records.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar

import attrs

from interplay.config.endpoint import Endpoint
from interplay.contracts.sandbox import Sandbox
from interplay.values.clock import Clock
from interplay.values.records import EpisodeInfo, Message, ModelCall, Task, ToolRun, Trace
from interplay.values.tools import CallOutcome, Tool

_T = TypeVar("_T")


@attrs.define
class SeatSpec:
    """How a seat is filled: harness, model, sampling, trainable, retries, limits.

    ``model`` None means the run's model. ``retries`` re-runs a failed one-shot run; it never
    applies to a chat (the user's side cannot be replayed).
    """

    #: The harness that runs the seat's agent, by registered name (`interplay describe harnesses`).
    harness: str = "chat"
    #: The harness's settings (`interplay describe harnesses NAME`).
    harness_config: dict[str, Any] = attrs.Factory(dict)
    #: The seat's own endpoint (a table as model.*); None: the run's model.
    model: Endpoint | None = None
    #: Request fields for this seat's calls, over model.sampling (see describe model).
    sampling: dict[str, Any] = attrs.Factory(dict)
    #: Whether the seat's traces are training data (export and token capture take only trainable
    #: seats).
    trainable: bool = True
    #: Times a failed one-shot run is run again (never a chat: the user's side cannot be
    #: replayed); one model call's retries are its endpoint's max_retries.
    retries: int = 0
    #: Seconds one segment (a turn) of the seat may take before it ends as a timeout: every
    #: model call in it (each up to its endpoint's timeout_s per attempt, max_retries times
    #: again) and its tool calls; docs/config.md, "Time limits, and how they combine".
    timeout_s: float = 600.0


@attrs.define
class Reply:
    """What one turn produced: the agent's last text, whether the exchange is over, and the
    messages the segment added."""

    text: str
    stopped: bool = False
    stop_condition: str | None = None
    messages: list[Message] = attrs.Factory(list)


class EpisodeStore:
    """One episode's own state, by type (``ctx.store``): what a step makes and a seat's tools,
    a later step, a verifier or a harness of the same episode use, with its class as the key.

    ``ctx.store.get(Cart)`` is the episode's ``Cart``, made by ``Cart()`` on first use (an
    attrs class with defaults, a dataclass) and the same object every later call, from every
    context of the episode; ``put`` keeps one made with arguments, ``find`` reads one without
    making it. ``instance`` keeps more than one of a class (one per seat: ``get(Hand,
    instance="player0")``). Each episode has a store of its own, so episodes that run at once
    never see each other's state, and the run drops it when the episode ends, after scoring:
    state that should outlive the episode belongs in ``ctx.results`` (stored on the episode, what
    a regrade scores again), never here. Calls are synchronous, so two steps or tools of one
    episode (one event loop) never make a class twice."""

    def __init__(self) -> None:
        self._held: dict[tuple[type[Any], str], Any] = {}

    def get(self, cls: type[_T], *, instance: str = "") -> _T:
        """The episode's ``cls`` (under ``instance``), made by ``cls()`` on first use."""
        key = (cls, instance)
        found = self._held.get(key)
        if found is None:
            found = self._held[key] = cls()
        return found  # type: ignore[no-any-return]

    def find(self, cls: type[_T], *, instance: str = "") -> _T | None:
        """The episode's ``cls`` (under ``instance``) if one was made or put, else None."""
        return self._held.get((cls, instance))

    def put(self, value: _T, *, instance: str = "") -> _T:
        """Keep ``value`` as the episode's object of its class (under ``instance``), in place of
        any before it; returns it."""
        self._held[(type(value), instance)] = value
        return value

    def clear(self) -> None:
        """Drop everything held (the run calls it when the episode ends)."""
        self._held.clear()


class ChatClient(Protocol):
    """A model client: one Chat Completions call at a time, with the run's retries; failures
    are recorded on the returned call, never raised (:class:`interplay.model.client.ModelClient`
    is one)."""

    @property
    def endpoint(self) -> Endpoint: ...

    async def chat(self, messages: Sequence[Message | Mapping[str, Any]], *,
                   tools: list[dict[str, Any]] | None = None, stream: bool = False,
                   capture: bool = False, **params: Any) -> ModelCall:
        """One call on ``messages`` (with the endpoint's and the seat's sampling under
        ``params``); ``capture`` asks for the call's token ids and logprobs."""
        ...

    async def chat_raw(self, body: dict[str, Any], *,
                       on_chunk: Callable[[bytes, dict[str, Any]], Awaitable[None] | None]
                       | None = None,
                       on_start: Callable[[], None] | None = None,
                       payload: bytes | None = None, capture: bool = False) -> ModelCall:
        """Send ``body`` (a Chat Completions request) as it is; with ``"stream": true`` each
        chunk goes to ``on_chunk`` as it arrives."""
        ...


class SegmentClient(ChatClient, Protocol):
    """The model client as a harness reaches it (``ctx.client``): every call made through it is
    kept on the trace as it returns."""

    def record(self, call: ModelCall) -> None:
        """Keep ``call`` on the trace unless it is there already."""
        ...


class ModelRoute(Protocol):
    """A trace's own way to the interception server, for a program that runs as a process of
    its own: it is pointed at ``base_url`` with ``secret`` as its API key."""

    @property
    def base_url(self) -> str: ...

    @property
    def secret(self) -> str: ...


class ToolRoute(Protocol):
    """A trace's own way to its seat's tools through the tool gateway (MCP, streamable HTTP):
    ``url``, and ``token`` sent as ``Authorization: Bearer <token>``."""

    @property
    def url(self) -> str: ...

    @property
    def token(self) -> str: ...


class SegmentContext(Protocol):
    """Everything a harness may use while it runs segments for one trace (``launch``,
    ``resume`` and ``close`` receive it)."""

    #: The trace this exchange writes: its messages, model calls, tool runs, info.
    trace: Trace
    #: The task, as the taskset gave it.
    task: Task
    #: What the model may see of the task (its prompt hidden when a step masked it).
    wire_task: Task
    #: The seat's tools.
    tools: list[Tool]
    #: The seat's sampling settings.
    sampling: dict[str, Any]
    #: How long one segment may take.
    timeout_s: float
    #: Per-trace state a harness keeps between segments (a session id, a home dir).
    state: dict[str, Any]
    #: The ``tool_choice`` the caller asked for this segment's first model call (None: the
    #: model chooses).
    tool_choice: str | dict[str, Any] | None

    @property
    def client(self) -> SegmentClient:
        """The model client; what is sent through it is recorded on this trace."""
        ...

    @property
    def clock(self) -> Clock | None:
        """The episode's clock (None for an agent outside an episode)."""
        ...

    @property
    def store(self) -> EpisodeStore | None:
        """The episode's own state by type, the one its steps and ``Env.tools`` reach (None
        for an agent outside an episode); ``state`` is this trace's alone."""
        ...

    def record_call(self, call: ModelCall) -> None:
        """Keep a model call made another way than through ``client`` on the trace, once."""
        ...

    def record_tool(self, run: ToolRun) -> None:
        """Keep a tool run on the trace."""
        ...

    async def call_tool(self, name: str, arguments: str | Mapping[str, Any] | None, *,
                        call_id: str, tools: Mapping[str, Tool] | None = None,
                        timeout_s: float | None = None) -> CallOutcome:
        """Run one of the model's tool calls against the seat's tools and record it; what the
        model reads back (failures come back as text, never raised)."""
        ...

    async def route(self) -> ModelRoute:
        """This trace's own route through the interception server (opened on first use)."""
        ...

    async def tool_route(self) -> ToolRoute | None:
        """This trace's own route to its seat's tools (None when the seat has none)."""
        ...

    async def sandbox(self) -> Sandbox | None:
        """The episode's sandbox when this seat works in one (started, with the task's
        workspace in place, on first use); a command run through it that names no user runs
        as the task's ``workspace.user`` when it names one. None when it works in none."""
        ...


class ChatSession(Protocol):
    """An exchange held open turn by turn with one agent (``async with agent.chat(task) as
    s``); every ``turn()`` runs exactly one harness segment. Leaving the ``async with`` block
    closes it (``user_closed``)."""

    #: The task the exchange is on.
    task: Task
    #: The trace it writes.
    trace: Trace
    #: Turns taken so far.
    turns: int

    @property
    def over(self) -> bool:
        """Whether the exchange is over (a stop condition, or closed)."""
        ...

    async def turn(self, message: str | Message | None = None, *,
                   tool_choice: str | dict[str, Any] | None = None,
                   context: Sequence[Message] | None = None) -> Reply:
        """Run one segment: the opening reply, or the agent's answer to ``message``."""
        ...

    def stop(self, stop_condition: str) -> None:
        """End the exchange with a stop condition of the caller's (``user_done``, ...)."""
        ...

    async def close(self, stop_condition: str = "user_closed") -> None:
        """Close the exchange (idempotent); the harness releases what it held."""
        ...

    async def __aenter__(self) -> ChatSession: ...

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None: ...


class SeatAgent(Protocol):
    """The agent filling a seat in an episode (``ctx.agent(seat)``; :class:`interplay.run.Agent`
    is one): open an exchange with :meth:`chat`, or make one call with :meth:`run`."""

    #: Its name in the episode (the seat's, or a name a step gave it).
    name: str
    #: The seat it fills.
    seat: str
    #: Its settings: harness, model, sampling, trainable, retries, limits.
    spec: SeatSpec
    #: The tools it may call (a step may change them before it opens an exchange).
    tools: list[Tool]

    @property
    def trainable(self) -> bool: ...

    def chat(self, task: Task, *, mask_prompt: bool = False) -> ChatSession:
        """Open an exchange on ``task`` (``mask_prompt`` hides the prompt from the wire)."""
        ...

    async def run(self, task: Task) -> Trace:
        """One call: open, one segment, close."""
        ...


class Resources(Protocol):
    """What every episode of a run shares that a step or a verifier may use: model clients
    (:class:`interplay.run.RunResources` is one)."""

    #: The run's model.
    endpoint: Endpoint

    def client(self, endpoint: Endpoint | None = None) -> ChatClient:
        """A client of ``endpoint`` (the run's model when None), shared across the run."""
        ...


class EpisodeContext(Protocol):
    """What an env's steps, its verifiers, its user sims and ``Env.tools`` reach during one
    episode (the same object for all of them: ``Env.tools`` is handed it when a step first
    opens the seat)."""

    #: The episode's task as the taskset gave it, whatever a step hides from a seat.
    task: Task
    #: Which episode this is: id, env, task index, rollout, seed.
    info: EpisodeInfo
    #: What the run shares (model clients).
    resources: Resources
    #: The episode's clock.
    clock: Clock
    #: The env's own results (payoffs, a timeline); stored on the episode.
    results: dict[str, Any]
    #: Metrics steps report (turn counts, forfeits); merged into the episode's metrics.
    metrics: dict[str, float]
    #: Every trace of every exchange opened so far.
    traces: list[Trace]
    #: The episode's own state by type (``store.get(Cls)``), for its steps, ``Env.tools``, its
    #: verifiers and its seats' harnesses; not recorded, dropped when the episode ends.
    store: EpisodeStore

    @property
    def rng(self) -> random.Random:
        """This episode's random source, seeded by (seed, task, rollout)."""
        ...

    def agent(self, seat: str, *, name: str | None = None) -> SeatAgent:
        """The agent filling ``seat`` in this episode (made on first use; ``name`` makes
        another agent in the same seat)."""
        ...

    async def sandbox(self) -> Sandbox | None:
        """The episode's sandbox (started, with the task's workspace in place, on first use;
        kept until the episode is scored, so a verifier runs commands in what the agent
        left); None when the run gives this episode none."""
        ...

    def fail(self, error_type: str, error: str) -> None:
        """End the episode in an error the step recorded itself and did not raise (an agent's
        turn that stopped short inside a longer program): the episode takes ``error_type`` and
        ``error``, keeps what the steps wrote, and is given to no verifier, as when a step
        raises. The first call counts; a step that raises still wins."""
        ...
