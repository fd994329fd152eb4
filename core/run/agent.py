"""Agents and chat sessions: one mechanism for every multi-turn conversation.

An :class:`Agent` fills a seat: a harness, a model client, sampling, ``trainable``, retries,
limits. ``await agent.run(task)`` is one call (open; one segment; close).
``async with agent.chat(task) as s`` opens an exchange in which every ``await s.turn(...)``
runs exactly one harness segment. Who computes the user's turns is the caller's control flow:
a modeled user is simply another agent's chat session.

This module owns turn-taking (opening, serializing, closing) and the trace each session
writes. It does not know what an env is or how episodes are scored. Its classes implement the
protocols a plugin is handed (:mod:`interplay.contracts.contexts`): :class:`Agent` is a
:class:`~interplay.contracts.contexts.SeatAgent`; :class:`LiveChatSession`,
:class:`LiveSegmentContext` and :class:`SegmentClient` implement the protocols named
``ChatSession``, ``SegmentContext`` and ``SegmentClient``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from interplay.contracts.contexts import Reply, SeatSpec
from interplay.contracts.harness import Harness, Segment
from interplay.errors import ErrorType, InterplayError, error_of
from interplay.log import get_logger
from interplay.model import tokens
from interplay.model.share import PARTY
from interplay.values.records import EpisodeInfo, Message, ModelCall, Task, ToolRun, Trace
from interplay.values.tools import CallOutcome, run_call

if TYPE_CHECKING:
    from interplay.config.endpoint import Endpoint
    from interplay.contracts.contexts import EpisodeStore
    from interplay.contracts.sandbox import Sandbox
    from interplay.gateway import ToolGateway, ToolRoute
    from interplay.interception import InterceptionServer, TraceRoute
    from interplay.model.client import ModelClient
    from interplay.values.clock import Clock
    from interplay.values.tools import Tool

log = get_logger("interplay.run.agent")


class RunServers(Protocol):
    """The servers a run's agents share, each started on first use (the run's
    :class:`~interplay.run.episode.RunResources`)."""

    async def interception(self) -> InterceptionServer: ...

    async def gateway(self) -> ToolGateway: ...


class EpisodeHost(Protocol):
    """What an agent needs of the episode whose seat it fills: the episode's ids, its clock,
    its store, the run's servers, and where the traces it writes are kept. The episode's context
    (:class:`~interplay.run.episode.LiveEpisodeContext`) is one; it makes the agents, so it imports
    this module and never the other way round."""

    @property
    def info(self) -> EpisodeInfo: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def store(self) -> EpisodeStore: ...

    @property
    def resources(self) -> RunServers: ...

    def add_trace(self, trace: Trace) -> None: ...

    def drop_trace(self, trace: Trace) -> None: ...

    def sandboxed(self, seat: str) -> bool: ...

    async def sandbox(self) -> Sandbox | None: ...

    async def seat_sandbox(self, seat: str) -> Sandbox | None: ...


class SegmentClient:
    """The model client as a harness reaches it (``ctx.client``): every call made through it is
    kept on the trace as it returns, so a harness need not remember to record its calls (and a
    call recorded again with ``ctx.record_call`` is kept once)."""

    def __init__(self, client: ModelClient, trace: Trace) -> None:
        #: The client itself, whose calls nothing records.
        self.plain = client
        # The trace, not the context: a context that held this client and was held by it would
        # be a cycle, and a finished episode would wait for the cycle collector.
        self._trace = trace
        #: Whether this trace's calls ask for their token ids and logprobs: a trainable
        #: seat's, on an endpoint set to capture them.
        self.capture = trace.trainable and client.endpoint.capture_tokens

    @property
    def endpoint(self) -> Endpoint:
        return self.plain.endpoint

    def record(self, call: ModelCall) -> None:
        """Keep ``call`` on the trace unless it is there already."""
        # A trace holds tens of calls, and this runs only for calls a harness records itself.
        if not any(c is call for c in self._trace.model_calls):
            self._trace.model_calls.append(call)

    async def chat(self, messages: Sequence[Message | Mapping[str, Any]],
                   **params: Any) -> ModelCall:
        """:meth:`ModelClient.chat <interplay.model.client.ModelClient.chat>`, recorded
        (with the call's tokens when this trace captures them)."""
        params.setdefault("capture", self.capture)
        if params["capture"]:
            params.setdefault("prefix", self.prefix())
        # The trace's share of the endpoint's connections, by id: a context copied into a
        # task the call starts must not keep the trace alive.
        party = PARTY.set(id(self._trace))
        try:
            call = await self.plain.chat(messages, **params)
        finally:
            PARTY.reset(party)
        self._trace.model_calls.append(call)
        return call

    async def chat_raw(self, *args: Any, **kwargs: Any) -> ModelCall:
        """:meth:`ModelClient.chat_raw <interplay.model.client.ModelClient.chat_raw>`,
        recorded (with the call's tokens when this trace captures them)."""
        kwargs.setdefault("capture", self.capture)
        if kwargs["capture"]:
            kwargs.setdefault("prefix", self.prefix())
        party = PARTY.set(id(self._trace))
        try:
            call = await self.plain.chat_raw(*args, **kwargs)
        finally:
            PARTY.reset(party)
        self._trace.model_calls.append(call)
        return call

    def prefix(self) -> list[int] | None:
        """The ids this trace's next call continues from (its last call's prompt and
        completion: :func:`interplay.model.tokens.continuation`), when it captures them."""
        return tokens.continuation(self._trace.model_calls) if self.capture else None

    def __getattr__(self, name: str) -> Any:
        if name == "plain":  # not set yet (a copy being made): no recursion through here
            raise AttributeError(name)
        return getattr(self.plain, name)


class LiveSegmentContext:
    """Everything a harness may use while it runs segments for one trace: the run's
    :class:`interplay.contracts.contexts.SegmentContext`."""

    def __init__(self, session: LiveChatSession) -> None:
        self.agent: Agent = session.agent
        self.trace: Trace = session.trace
        self.task: Task = session.task
        self.wire_task: Task = session.wire_task
        self.tools: list[Tool] = list(session.agent.tools)
        #: The model client; what is sent through it is recorded on this trace.
        self.client = SegmentClient(session.agent.client, session.trace)
        self.sampling: dict[str, Any] = dict(session.agent.spec.sampling)
        self.timeout_s: float = session.agent.spec.timeout_s
        #: Per-trace state a harness keeps between segments (a session id, a home dir).
        self.state: dict[str, Any] = {}
        #: The ``tool_choice`` the caller asked for this segment's first model call (None: the
        #: model chooses). A tool loop sends it on its first call only, since later calls of
        #: the segment answer tool results.
        self.tool_choice: str | dict[str, Any] | None = None
        self._route: TraceRoute | None = None
        self._tool_route: ToolRoute | None = None
        #: The gateway that opened it: it closes the route, whatever the agent holds by then.
        self._tool_gateway: ToolGateway | None = None
        # Two segments' callers awaiting the server at once must share one route.
        self._route_lock = asyncio.Lock()

    @property
    def clock(self) -> Clock | None:
        return self.agent.episode.clock if self.agent.episode is not None else None

    @property
    def store(self) -> EpisodeStore | None:
        return self.agent.episode.store if self.agent.episode is not None else None

    def record_call(self, call: ModelCall) -> None:
        """Keep a model call on the trace, once: calls made through ``ctx.client`` are kept
        already; this is for calls a harness made another way."""
        self.client.record(call)

    def record_tool(self, run: ToolRun) -> None:
        self.trace.tool_runs.append(run)

    async def call_tool(self, name: str, arguments: str | Mapping[str, Any] | None, *,
                        call_id: str, tools: Mapping[str, Tool] | None = None,
                        timeout_s: float | None = None) -> CallOutcome:
        """Run one of the model's tool calls against this seat's tools (``ctx.tools``, or
        ``tools`` by name) and record it on the trace (a ToolRun); what the model reads back.

        The one way a call is run, whichever way it came in: the ``chat`` harness's tool loop
        and the tool gateway (MCP, for programs that run as processes) both call this, so the
        world, the trace and the model's view are the same for either. ``arguments`` is the
        JSON text the model produced or an object a protocol parsed; ``timeout_s`` caps each
        tool's own timeout. Failures come back as error text (see
        :func:`interplay.values.tools.run_call`), never raised."""
        by_name = {t.name: t for t in self.tools} if tools is None else tools
        t0 = time.monotonic()
        outcome = await run_call(by_name, name, arguments, timeout_s=timeout_s, call_id=call_id)
        self.record_tool(ToolRun(call_id=call_id, name=name, duration_s=time.monotonic() - t0,
                                 error_type=outcome.error_type))
        return outcome

    async def route(self) -> TraceRoute:
        """This trace's own route through the interception server (opened on first use).

        Out-of-process programs (the codex CLI, any command) are pointed at
        ``route.base_url`` with ``route.secret`` as their API key; every request they make is
        a recorded model call on this trace.
        """
        async with self._route_lock:
            if self._route is None:
                server = await self.agent.interception_server()
                # The server records each request itself (through on_call), so it gets the
                # plain client.
                self._route = server.open_trace(client=self.client.plain,
                                                on_call=self.record_call,
                                                model=self.client.endpoint.model,
                                                sampling=self.sampling,
                                                capture=self.client.capture,
                                                prefix=self.client.prefix)
        return self._route

    async def tool_route(self) -> ToolRoute | None:
        """This trace's own route to its seat's tools through the tool gateway, an MCP server
        (streamable HTTP), opened on first use; None when the seat has no tools.

        Out-of-process programs (the codex CLI, any command) are given ``route.url`` and
        ``route.token`` (sent as ``Authorization: Bearer <token>``); the route lists
        ``ctx.tools`` and runs each call through :meth:`call_tool`, so it is recorded as a
        call in-process is. The token is refused once the trace closes.
        """
        if not self.tools:
            return None
        async with self._route_lock:
            if self._tool_route is None:
                self._tool_gateway = await self.agent.tool_gateway()
                self._tool_route = self._tool_gateway.open_trace(self)
        return self._tool_route

    @property
    def sandboxed(self) -> bool:
        """Whether this seat works in the episode's sandbox."""
        episode = self.agent.episode
        return episode is not None and episode.sandboxed(self.agent.seat)

    async def sandbox(self) -> Sandbox | None:
        """The episode's sandbox when this seat works in one (started on first use); None
        when it works in none (or the agent is in no episode)."""
        episode = self.agent.episode
        if episode is None:
            return None
        return await episode.seat_sandbox(self.agent.seat)

    async def _release(self) -> None:
        if self._route is not None:
            server = await self.agent.interception_server()
            server.close_trace(self._route.secret)
            self._route = None
        if self._tool_route is not None and self._tool_gateway is not None:
            self._tool_gateway.close_trace(self._tool_route.token)
            self._tool_route = self._tool_gateway = None


class LiveChatSession:
    """An exchange held open turn by turn; every ``turn()`` runs exactly one segment.

    A prompted task speaks first (a bare ``turn()`` takes its opening reply); a prompt-less
    task is opened by ``turn(message)``. ``mask_prompt=True`` hides the prompt from the wire
    while scoring still sees the real task. Turns are serialized. Leaving the ``async with``
    block closes the exchange (``user_closed``).
    """

    def __init__(self, agent: Agent, task: Task, *, mask_prompt: bool = False) -> None:
        self.agent = agent
        self.task = task
        self.mask_prompt = mask_prompt
        self.wire_task = attrs.evolve(task, prompt=None) if mask_prompt else task
        self.trace = agent.new_trace()
        if mask_prompt:
            self.trace.info["prompt_masked"] = True
        self.ctx = LiveSegmentContext(self)
        # Bound once per exchange: structlog's module-level proxy binds afresh on every call,
        # which each turn would pay for a debug line that is usually dropped.
        self._log = log.bind()
        self._lock = asyncio.Lock()
        self._opened = False
        self._over = False
        self._closed = False
        self.turns = 0

    @property
    def over(self) -> bool:
        return self._over

    async def __aenter__(self) -> LiveChatSession:
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, asyncio.CancelledError):
            # Cancellation is the caller's decision, not a failure of the env.
            await self.close("cancelled")
            return
        if exc is not None and not isinstance(exc, InterplayError):
            self._fail(exc)
        await self.close()

    async def turn(self, message: str | Message | None = None, *,
                   tool_choice: str | dict[str, Any] | None = None,
                   context: Sequence[Message] | None = None) -> Reply:
        """Run one segment: the opening reply, or the agent's answer to ``message``.
        ``tool_choice`` (``"required"``, a tool's name, or an OpenAI tool_choice object) asks
        the harness to make its first model call of this segment with it. ``context`` (after
        the opening) is what the harness gets instead of the whole conversation and
        ``message``: a caller's context policy, ending with the new input as the caller would
        send it. The trace keeps the whole conversation and ``message``; each model call
        records what was sent."""
        async with self._lock:
            self.ctx.tool_choice = _tool_choice(tool_choice)
            if self._over or self._closed:
                raise InterplayError(
                    f"the chat with {self.agent.name!r} is over "
                    f"({self.trace.stop_condition}); open a new chat to go on"
                )
            msg = _as_user_message(message)
            if not self._opened:
                if context is not None:
                    raise InterplayError("turn(context=...) needs an opened chat: the opening "
                                         "turn has no conversation to replace")
                if msg is None:
                    if not self.wire_task.prompt:
                        why = "its prompt is masked" if self.mask_prompt else "it has no prompt"
                        raise InterplayError(
                            f"a bare turn() cannot open this chat: {why}; "
                            f"open it with turn(message)"
                        )
                    task = self.wire_task
                else:
                    opening = [*_prompt_messages(self.wire_task), msg]
                    task = attrs.evolve(self.wire_task, prompt=tuple(opening))
                inputs = task.messages()
                run = self.agent.harness.launch(task, self.ctx)
                self._opened = True
            else:
                if msg is None:
                    raise InterplayError("turn() after the opening needs a message")
                inputs = [*self.trace.messages, msg]
                if context is not None and not context:
                    raise InterplayError("turn(context=...) needs at least the new input")
                run = self.agent.harness.resume(inputs if context is None else list(context),
                                                self.ctx)
            if self.ctx.sandboxed:
                # Started (an image built, the task's setup run) before the segment and
                # outside its time limit; a failure ends the episode as a sandbox_error.
                try:
                    await self.ctx.sandbox()
                except BaseException:
                    run.close()
                    raise
            # Where this segment's messages begin in the trace (the launch's at its prompt,
            # a resume's at its new input): the report marks each one.
            start = 0 if self.turns == 0 else len(self.trace.messages)
            segment = await self._run_segment(run)
            self.turns += 1
            self.trace.info.setdefault("segment_starts", []).append(start)
            self.trace.messages = [*inputs, *segment.messages]
            if segment.stop_condition is not None:
                self._over = True
                self.trace.stop_condition = segment.stop_condition
                if segment.error_type is not None:
                    self.trace.error = segment.error
                    self.trace.error_type = segment.error_type
            self._log.debug("agent.turn", agent=self.agent.name,
                            episode_id=self.trace.episode.episode_id, turn=self.turns,
                            added=len(segment.messages), stop_condition=segment.stop_condition)
            return Reply(text=segment.text, stopped=self._over,
                         stop_condition=segment.stop_condition, messages=segment.messages)

    async def _run_segment(self, run: Any) -> Segment:
        first_call = len(self.trace.model_calls)
        try:
            async with asyncio.timeout(self.ctx.timeout_s):
                segment = await run
        except TimeoutError:
            error = f"segment exceeded {self.ctx.timeout_s:g} s"
            failed = unreached(self.trace.model_calls[first_call:])
            if failed is not None:
                # What the turn waited on, so the advice is the endpoint's, not "wait longer".
                error += f"; its last model call had failed: {failed.error}"
            return Segment(stop_condition="timeout", error_type=ErrorType.TIMEOUT, error=error)
        except InterplayError:
            raise
        except Exception as exc:
            error_type, error = error_of(exc, ErrorType.HARNESS_ERROR)
            log.warning("agent.harness_error", agent=self.agent.name,
                        harness=self.agent.harness.name, error_type=error_type,
                        exception_type=type(exc).__name__)
            return Segment(stop_condition="error", error_type=error_type, error=error)
        # What a harness hands back becomes the trace: anything but Messages in a Segment
        # would fail only when the episode is written, and take the run down with it.
        problem = _segment_problem(segment)
        if problem is not None:
            log.warning("agent.harness_error", agent=self.agent.name,
                        harness=self.agent.harness.name, error_type=ErrorType.HARNESS_ERROR,
                        reason_code="bad_segment")
            return Segment(stop_condition="error", error_type=ErrorType.HARNESS_ERROR,
                           error=f"harness {self.agent.harness.name!r} {problem}")
        if segment.error_type is None:
            failed = unreached(self.trace.model_calls[first_call:])
            if failed is not None:
                # A program that got the boundary's 504 and exited as if done has no answer
                # to score: the segment ends as the upstream's error (as one that cannot
                # reach its tools does), unscored and run again by --retry-errors.
                log.warning("agent.upstream_unreached", agent=self.agent.name,
                            harness=self.agent.harness.name, error_type=failed.error_type,
                            call_id=failed.id)
                return Segment(segment.messages, stop_condition="error",
                               error_type=failed.error_type,
                               error=f"the endpoint could not be reached and no later model "
                                     f"call of the segment succeeded: {failed.error}")
        return segment  # type: ignore[no-any-return]

    def _fail(self, exc: BaseException) -> None:
        if self.trace.error_type is None:
            self.trace.error = f"{type(exc).__name__}: {exc}"
            self.trace.error_type = ErrorType.ENV_ERROR
        if self.trace.stop_condition is None:
            self.trace.stop_condition = "error"

    def stop(self, stop_condition: str) -> None:
        """End the exchange with a stop condition of the caller's (``user_done``, ...)."""
        self._over = True
        if self.trace.stop_condition is None:
            self.trace.stop_condition = stop_condition

    async def close(self, stop_condition: str = "user_closed") -> None:
        """Close the exchange (idempotent); the harness releases what it held."""
        if self._closed:
            return
        self._closed = True
        self._over = True
        if self.trace.stop_condition is None:
            self.trace.stop_condition = stop_condition
        try:
            await self.agent.harness.close(self.ctx)
        finally:
            await self.ctx._release()
            self.trace.ended_at = time.time()


#: A model call's failures that say the endpoint was not reached or gave no usable answer
#: (a refusal of the request itself, a 4xx, is the program's to handle).
UPSTREAM_FAILURES = frozenset({ErrorType.TIMEOUT, ErrorType.CONNECTION_ERROR,
                               ErrorType.SERVER_ERROR, ErrorType.RATE_LIMITED,
                               ErrorType.BAD_RESPONSE})


def unreached(calls: Sequence[ModelCall]) -> ModelCall | None:
    """The last of the agent's ``calls`` (a segment's) that failed to reach the endpoint, when
    none of its calls after it succeeded; None otherwise. Calls another process made with the
    trace's secret (``caller`` ``other``) are not the agent's."""
    for call in reversed(calls):
        if call.caller == "other":
            continue
        if call.error_type is None:
            return None
        if call.error_type in UPSTREAM_FAILURES:
            return call
    return None


def _segment_problem(segment: Any) -> str | None:
    if not isinstance(segment, Segment):
        return (f"returned {type(segment).__name__} from a segment; launch() and resume() "
                f"return an interplay.Segment")
    for i, message in enumerate(segment.messages):
        if not isinstance(message, Message):
            return (f"returned a Segment whose messages[{i}] is a {type(message).__name__}; "
                    f"each is an interplay.Message")
    return None


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """A tool_choice in the OpenAI shape: a bare tool name becomes the object forcing it."""
    if isinstance(choice, str) and choice not in ("auto", "none", "required"):
        return {"type": "function", "function": {"name": choice}}
    return choice


def _as_user_message(message: str | Message | None) -> Message | None:
    if message is None or isinstance(message, Message):
        return message
    if not isinstance(message, str):
        raise InterplayError(f"turn() takes text or a Message, got {type(message).__name__}")
    return Message("user", message)


def _prompt_messages(task: Task) -> list[Message]:
    if isinstance(task.prompt, str):
        return [Message("user", task.prompt)]
    return list(task.prompt or ())


class Agent:
    """A seat filled: a harness, a model client, sampling, ``trainable``, retries, limits."""

    def __init__(self, *, name: str, harness: Harness, client: ModelClient,
                 spec: SeatSpec | None = None, seat: str | None = None,
                 episode: EpisodeHost | None = None, tools: Sequence[Tool] = ()) -> None:
        self.name = name
        self.seat = seat or name
        self.harness = harness
        self.client = client
        self.spec = spec or SeatSpec()
        self.episode = episode
        self.tools = list(tools)
        self._episode_info = (episode.info if episode is not None
                              else EpisodeInfo(episode_id="-", env="-", task_idx=-1))
        self._interception: Any = None
        self._gateway: ToolGateway | None = None

    @property
    def trainable(self) -> bool:
        return self.spec.trainable

    def new_trace(self) -> Trace:
        trace = Trace(agent=self.name, episode=self._episode_info, trainable=self.trainable,
                      seat=self.seat, harness=self.harness.name, model=self.client.endpoint.model,
                      started_at=time.time())
        if self.episode is not None:
            self.episode.add_trace(trace)
        return trace

    async def interception_server(self) -> Any:
        if self.episode is not None:
            return await self.episode.resources.interception()
        if self._interception is None:
            from interplay.interception import InterceptionServer

            self._interception = InterceptionServer()
            await self._interception.start()
        return self._interception

    async def tool_gateway(self) -> ToolGateway:
        """The tool gateway this agent's traces are served by: the run's (an episode's agents
        share it), or one of its own for a standalone agent (stopped by ``aclose``)."""
        if self.episode is not None:
            return await self.episode.resources.gateway()
        if self._gateway is None:
            from interplay.gateway import ToolGateway

            gateway = ToolGateway()
            await gateway.start()
            self._gateway = gateway
        return self._gateway

    def chat(self, task: Task, *, mask_prompt: bool = False) -> LiveChatSession:
        """Open an exchange on ``task`` (use as ``async with agent.chat(task) as s``)."""
        if not self.harness.can_resume():
            # A single segment still works; a second turn is refused in resume().
            log.debug("agent.single_segment_harness", harness=self.harness.name)
        return LiveChatSession(self, task, mask_prompt=mask_prompt)

    async def run(self, task: Task) -> Trace:
        """One call: open, one segment, close (``agent_completed``). A run that ends in an
        error is retried up to ``spec.retries`` times; the trace of the last attempt is kept."""
        attempts = max(0, self.spec.retries) + 1
        trace: Trace | None = None
        for attempt in range(1, attempts + 1):
            session = LiveChatSession(self, task)
            async with session:
                await session.turn()
                session.stop("agent_completed")
            trace = session.trace
            trace.info["attempts"] = attempt
            if trace.error_type is None or attempt == attempts:
                break
            if self.episode is not None:
                self.episode.drop_trace(trace)
            log.info("agent.retry", agent=self.name, attempt=attempt,
                     error_type=trace.error_type)
        assert trace is not None
        return trace

    async def aclose(self) -> None:
        """Stop what a standalone agent started (an episode's agents share the run's)."""
        if self._interception is not None:
            await self._interception.stop()
            self._interception = None
        if self._gateway is not None:
            await self._gateway.stop()
            self._gateway = None
