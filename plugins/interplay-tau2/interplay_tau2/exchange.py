"""The ``tau2`` step: one tau2-bench conversation as interplay's relay between the assistant
seat and the user seat, on a tau2 environment of its own.

Per episode the step builds tau2's environment for the domain (its database, fresh) and sets
the task's initial state on it, as tau2's orchestrator does. The assistant seat gets tau2's
agent system prompt (its instruction and the domain policy) and the domain's tools with tau2's
own schemas; the user seat gets tau2's user-simulator prompt (its guidelines and the task's user
scenario) and, in telecom, her own tools on her own device state. Every call of a tool, by any
harness (the in-process ``chat`` loop, codex through the tool gateway), is answered by tau2's
``Environment.get_response``: the same text, the same error flag, the same database change.

The user is a user sim (:class:`interplay.UserSim`): by default ``tau2``, tau2's own user
simulator (:mod:`interplay_tau2.user`), and any registered sim with ``env.user_sim``. Each
gets the task's user scenario as her Person's scenario (tau2's own rendering of it), her
persona as its description, and reads the agent's replies; what her seat's turn added (her
tool calls in telecom, her reply) goes into the trajectory, and a sim without a model is
recorded as one user message. Her done ends the conversation as tau2's stop token does
(``user_stop``): a done without one of tau2's tokens in her words is recorded with the token
of its reason (``###STOP###``; ``###TRANSFER###``, ``###OUT-OF-SCOPE###``) added after them.

The conversation follows tau2's orchestrator: the agent's fixed greeting opens it without a
model call and is her first read; a user message holding ``###STOP###``, ``###TRANSFER###`` or
``###OUT-OF-SCOPE###`` ends it (``user_stop``); tau2's step and error counts are kept message
by message, and a conversation that reaches ``max_steps`` or ``max_errors`` at one of tau2's
check points ends there (the trajectory cut where tau2 cuts it). The trajectory is kept as tau2's
own messages in ``results["tau2"]``, which the ``tau2`` verifier scores and ``interplay export
--format tau2`` writes out. Each seat's trace ends with its own stop condition: the seat whose
turn failed keeps its harness's, the other says whose failure ended it (``agent_error``,
``user_error``).

This module owns the exchange and the trajectory; :mod:`interplay_tau2.domains` owns tau2.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from interplay import (
    Answer,
    EpisodeContext,
    InterplayError,
    Message,
    Person,
    SeatAgent,
    Step,
    Task,
    Tool,
    UserSim,
    UserSimError,
    get_logger,
    lookup,
)
from interplay.contracts import Read, ReadMessage, answer_or_error, chosen_user_sim, set_up_user_sim
from interplay.values import tool_call_id
from interplay_tau2 import domains
from interplay_tau2.user import ending

log = get_logger("interplay.tau2")

RESULTS_KEY = "tau2"
#: tau2's termination reasons, as interplay's stop conditions of the two chats.
STOP_CONDITIONS = {"user_stop": "user_done", "agent_stop": "agent_done",
                   "max_steps": "max_turns", "too_many_errors": "too_many_errors",
                   "agent_error": "agent_error", "user_error": "user_error"}
#: The token a user's done is recorded with, by its done_reason (tau2's stop by default).
DONE_TOKENS = {"transfer": "###TRANSFER###", "out_of_scope": "###OUT-OF-SCOPE###"}
STOP_TOKEN = "###STOP###"
#: A tool's name as codex calls an MCP server's tool: mcp__<server>__<tool>.
_MCP_NAME = re.compile(r"^mcp__[^_].*?__(?P<tool>.+)$")


@attrs.define
class ExchangeConfig:
    """The ``tau2`` step's settings (``env.*`` of the tau2 envs)."""

    #: tau2's domain: mock, airline, retail or telecom (each tau2 env fixes its own).
    domain: str = "mock"
    #: The seat that plays tau2's agent.
    seat: str = "assistant"
    #: The seat that plays tau2's user simulator.
    user_seat: str = "user"
    #: tau2's max_steps: messages (and each batch of tool results) before the conversation is
    #: cut and scored 0, counted and checked as tau2's orchestrator does.
    max_steps: int = 100
    #: tau2's max_errors: tool calls answered with an error before the conversation is cut.
    max_errors: int = 10
    #: telecom only: tau2's task set ("" its default, full or small).
    task_set: str = ""
    #: telecom only: tau2's policy ("" its default manual, or workflow).
    policy: str = ""
    #: tau2's solo mode (telecom and mock, whose tasks carry a ticket): no user; the agent
    #: works the ticket alone with the agent's and the user's tools and ends with ``done``.
    solo: bool = False


@attrs.define
class StepConfig(ExchangeConfig):
    """The ``tau2`` step's settings: the exchange's, and the user sim that plays the user (a
    tau2 env's ``env.user_sim`` and ``env.user_sim_settings``, which every env takes)."""

    #: The user sim, by registered name: tau2 (tau2's own user simulator) or any other.
    user_sim: str = "tau2"
    #: Settings of the user sim (its own Config); a sim with a seat plays on user_seat unless
    #: they name another.
    user_sim_settings: dict[str, Any] = attrs.Factory(dict)


@attrs.define(eq=False)
class Live:
    """One episode's tau2 environment and what its tools answered, by the model's call id:
    kept in the episode's store (``ctx.store``), where ``Env.tools`` finds it."""

    environment: Any
    replies: dict[str, Any] = attrs.Factory(dict)
    calls: int = 0


#: tau2's tool schemas, by toolkit class. tau2 makes them anew on every ``get_tools()`` (a
#: pydantic model per tool), which cost an episode more CPU than all its model calls; they
#: depend on the toolkit's class (its methods and their docstrings), not on its database.
_SCHEMAS: dict[type, list[dict[str, Any]]] = {}


def _schemas(toolkit: Any) -> list[dict[str, Any]]:
    """The function schemas of a tau2 toolkit's tools, as tau2's ``Tool.openai_schema``."""
    found = _SCHEMAS.get(type(toolkit))
    if found is None:
        found = _SCHEMAS[type(toolkit)] = [
            t.openai_schema["function"] for t in toolkit.get_tools().values()]
    return found


def tau2_tools(live: Live, requestor: str) -> list[Tool]:
    """The tools of one side (``assistant`` or ``user``) of a live environment, with tau2's
    schemas, each answered by tau2's ``get_response`` (errors as tau2 returns them). In solo
    mode the agent has the user's tools too, and tau2's ``done``."""
    environment = live.environment
    if requestor == "user":
        if environment.user_tools is None or environment.solo_mode:
            return []
        found = _schemas(environment.user_tools)
    else:
        found = list(_schemas(environment.tools))
        if environment.solo_mode and environment.user_tools is not None:
            found += _schemas(environment.user_tools)
    tools = [_tool(live, schema, requestor) for schema in found]
    if requestor == "assistant" and environment.solo_mode:
        tools.append(_done_tool())
    return tools


def _done_tool() -> Tool:
    """tau2's solo stop tool, with the schema tau2 makes of it. tau2 never runs it (its call
    ends the simulation) and the trajectory records it as tau2 does: the stop token as text."""
    agent = domains.tau2().llm_agent.LLMSoloAgent

    def done() -> str:
        """Call this function when you are done with the task."""
        return str(agent.STOP_TOKEN)

    schema = domains.tau2().as_tool(done).openai_schema["function"]

    async def call() -> str:
        return done()

    return Tool(name=schema["name"], description=schema.get("description") or "",
                parameters=schema.get("parameters") or {"type": "object", "properties": {}},
                fn=call)


def _tool(live: Live, schema: dict[str, Any], requestor: str) -> Tool:
    tau = domains.tau2()
    name = schema["name"]

    # async, and never awaiting: calls run one at a time in the order they start (the order of
    # the model's message), as tau2 runs them, on an environment that is not thread-safe.
    async def call(**arguments: Any) -> str:
        live.calls += 1
        call_id = tool_call_id() or f"call_{live.calls}"
        reply = live.environment.get_response(tau.message.ToolCall(
            id=call_id, name=name, arguments=arguments, requestor=requestor))
        live.replies[call_id] = reply
        return str(reply.content)

    return Tool(name=name, description=schema.get("description") or "",
                parameters=schema.get("parameters") or {"type": "object", "properties": {}},
                fn=call)


class Trajectory:
    """tau2's messages of one conversation, with tau2's step and error counts: each message
    of a side is a step, each batch of tool results another; the counts are checked where
    tau2's orchestrator checks them (after any message not bound for the environment)."""

    def __init__(self, max_steps: int, max_errors: int, tool_names: dict[str, set[str]], *,
                 solo: bool = False) -> None:
        self.tau = domains.tau2()
        self.solo = solo
        self.messages: list[Any] = []
        if not solo:  # in solo mode the agent speaks first, with a model call
            greeting = self.tau.orchestrator.DEFAULT_FIRST_AGENT_MESSAGE.model_copy(deep=True)
            greeting.timestamp = _now()
            self.messages.append(greeting)
        self.max_steps, self.max_errors = max_steps, max_errors
        self.tool_names = tool_names
        self.steps = 0
        self.errors = 0
        self.reason: str | None = None

    def add(self, added: Sequence[Message], requestor: str, live: Live) -> None:
        """One segment's messages of ``requestor`` (``assistant`` or ``user``), as tau2 records
        them; nothing past the point where tau2 would have ended the conversation."""
        m = self.tau.message
        batch: list[Any] = []
        asked: dict[str, Any] = {}  # this segment's calls, by id
        for msg in added:
            if self.reason is not None:
                return
            if msg.role == "tool":
                reply = live.replies.get(msg.tool_call_id or "")
                if reply is None:
                    # Interplay refused the call before it reached tau2 (a name the domain
                    # lacks, arguments that are not a JSON object). tau2's evaluator replays
                    # every recorded call and fails on a result other than its own, so the
                    # record holds tau2's answer to the call as recorded: an error that
                    # changes nothing (no such tool, no such argument).
                    call = asked.get(msg.tool_call_id or "")
                    reply = live.environment.get_response(call) if call is not None else \
                        m.ToolMessage(id=msg.tool_call_id or "", role="tool",
                                      content=_text(msg), requestor=requestor, error=True)
                reply = reply.model_copy(update={"timestamp": _now()})
                self.messages.append(reply)
                batch.append(reply)
                continue
            if batch:
                self._tool_results(batch)
                batch = []
                if self.reason is not None:
                    return
            if msg.role != "assistant":
                continue
            calls = [m.ToolCall(id=c.id, name=self._name(c.name, requestor),
                                arguments=_arguments(c), requestor=requestor)
                     for c in msg.tool_calls]
            asked.update((c.id, c) for c in calls)
            cls = m.AssistantMessage if requestor == "assistant" else m.UserMessage
            text = _text(msg)
            solo_agent = self.tau.llm_agent.LLMSoloAgent
            if self.solo and any(c.name == solo_agent.STOP_FUNCTION_NAME for c in calls):
                # tau2's solo agent: a call of done is the stop token, and nothing is run.
                text, calls = solo_agent.STOP_TOKEN, []
            record = cls(role=requestor, content=text if text or not calls else None,
                         tool_calls=calls or None, timestamp=_now())
            self.messages.append(record)
            self.steps += 1
            if calls:
                continue  # bound for the environment: tau2 checks nothing here
            if requestor == "user" and self.tau.user_simulator.UserSimulator.is_stop(record):
                self.reason = "user_stop"
            if self.solo:
                # No user to read it: a stop ends the ticket, any other text is an error.
                self.reason = "agent_stop" if solo_agent.is_stop(record) else "agent_error"
            self._check()
        if batch:
            self._tool_results(batch)

    def _tool_results(self, batch: list[Any]) -> None:
        self.steps += 1
        self.errors += sum(1 for r in batch if r.error)
        self._check()

    def _check(self) -> None:
        # In tau2's order: a stop is overridden by max_steps, that by too_many_errors.
        if self.steps >= self.max_steps:
            self.reason = "max_steps"
        if self.errors >= self.max_errors:
            self.reason = "too_many_errors"

    def _name(self, name: str, requestor: str) -> str:
        match = _MCP_NAME.match(name)
        if match and match["tool"] in self.tool_names.get(requestor, set()):
            return match["tool"]
        return name

    def plain(self) -> list[dict[str, Any]]:
        """The messages as tau2's results file holds them (``turn_idx`` in order)."""
        return [msg.model_copy(update={"turn_idx": i}).model_dump(mode="json")
                for i, msg in enumerate(self.messages)]


def _now() -> str:
    from tau2.utils.utils import get_now

    return str(get_now())


def _text(msg: Message) -> str:
    content = msg.content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content or ""


def _arguments(call: Any) -> dict[str, Any]:
    try:
        return call.parsed_arguments()
    except ValueError:
        # tau2's record holds a dict; text that is not a JSON object is kept under its name.
        return {"__unparsed__": call.arguments}


def persona(task: Any, *, user_tools: bool) -> Person:
    """Who the user is, for any user sim: the task's user scenario as tau2 renders it for its
    own simulator, her persona, her instructions as tau2 structures them (``info
    ["instructions"]``: reason for the call, what she knows and does not, how she goes about
    it; or their text), and what tau2's sim needs to know (whether she has tools)."""
    scenario = task.user_scenario
    given = scenario.instructions
    instructions = given.model_dump() if hasattr(given, "model_dump") else str(given)
    return Person(description=str(scenario.persona or "a customer"), scenario=str(scenario),
                  info={"done_marker": STOP_TOKEN, "instructions": instructions,
                        "tau2": {"task_id": task.id, "user_tools": user_tools}})


def user_messages(said: Answer) -> list[Message]:
    """Her side of one turn for the trajectory: what her seat added (her tool calls, her
    reply), or her words as one message for a sim without a model. A done whose words hold
    none of tau2's tokens gets the token of its reason after them, as tau2 records an end."""
    messages = list(said.messages) or [Message("assistant", said.text)]
    if said.done and not ending(said.text):
        token = DONE_TOKENS.get(said.done_reason, STOP_TOKEN)
        last = next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].role == "assistant" and not messages[i].tool_calls), None)
        words = said.text.strip()
        ended = Message("assistant", f"{words} {token}" if words else token)
        if last is None:
            messages.append(ended)
        else:
            messages[last] = ended
    return messages


def episode_seed(ctx: EpisodeContext) -> int | None:
    """The sampling seed both seats send with every request: the episode's seed (from the
    run's --seed, the task and the rollout), folded into what every server accepts."""
    return None if ctx.info.seed is None else ctx.info.seed % (2**31)


def seeded(agent: SeatAgent, seed: int | None) -> None:
    """Send ``seed`` with every request of ``agent`` (a seed the seat's config sets wins)."""
    if seed is not None and "seed" not in agent.spec.sampling:
        agent.spec = attrs.evolve(agent.spec, sampling={**agent.spec.sampling, "seed": seed})


def user_sim(cfg: StepConfig) -> UserSim:
    """The user sim ``cfg`` names, configured; one whose settings take a seat plays on the
    step's user seat unless they name another."""
    cls = lookup("user-sims", cfg.user_sim)
    settings = dict(cfg.user_sim_settings)
    if attrs.has(cls.Config) and "seat" in attrs.fields_dict(cls.Config):
        settings.setdefault("seat", cfg.user_seat)
    sim: UserSim = cls()
    sim.configure(settings)
    return sim


class Tau2Exchange(Step):
    """A tau2-bench conversation between the assistant seat and a user sim (tau2's own by
    default, on the user seat), on a fresh tau2 environment; writes ``results["tau2"]``."""

    name = "tau2"
    Config: ClassVar[type] = StepConfig
    writes = frozenset({RESULTS_KEY})

    def seats(self) -> set[str]:
        if self.config.solo:
            return {self.config.seat}
        try:
            return {self.config.seat, *user_sim(self.config).seats()}
        except InterplayError:  # check() reports it
            return {self.config.seat}

    def use_user_sim(self, name: str, settings: dict[str, Any]) -> None:
        cfg: StepConfig = self.config
        sim, sim_settings = chosen_user_sim(cfg.user_sim, cfg.user_sim_settings, name, settings)
        self.config = attrs.evolve(cfg, user_sim=sim, user_sim_settings=sim_settings)

    def check(self, steps: Sequence[Step]) -> list[str]:
        cfg: StepConfig = self.config
        problems = []
        for field in ("max_steps", "max_errors"):
            if getattr(cfg, field) < 1:
                problems.append(f"{field} must be at least 1, got {getattr(cfg, field)}")
        if cfg.solo and cfg.user_sim != StepConfig().user_sim:
            problems.append(f"user_sim {cfg.user_sim!r}: tau2's solo mode has no user")
        try:
            user_sim(cfg)  # its name and settings, before any episode
        except InterplayError as exc:
            problems.append(str(exc))
        return problems

    async def run(self, ctx: EpisodeContext) -> None:
        cfg: ExchangeConfig = self.config
        tau = domains.tau2()
        ref = ctx.task.info.get(RESULTS_KEY) or {}
        task = domains.task(cfg.domain, str(ref.get("task_id")), task_set=cfg.task_set)
        constructor = tau.registry.get_env_constructor(domains.env_name(cfg.domain, cfg.policy))
        environment = constructor(solo_mode=True) if cfg.solo else constructor()
        initial = task.initial_state
        if initial is not None and initial.message_history:
            raise InterplayError(f"tau2 task {task.id!r} starts from a message history, which "
                                 f"this port does not replay; leave it out with env.task_ids")
        environment.set_state(
            initialization_data=initial.initialization_data if initial else None,
            initialization_actions=initial.initialization_actions if initial else None,
            message_history=[])
        live = ctx.store.put(Live(environment))
        tool_names = {side: {t.name for t in tau2_tools(live, side)}
                      for side in ("assistant", "user")}
        trajectory = Trajectory(cfg.max_steps, cfg.max_errors, tool_names, solo=cfg.solo)
        started, t0 = _now(), time.monotonic()
        reason: str | None = None
        try:
            if cfg.solo:
                reason = await self._solo(ctx, task, live, trajectory)
            else:
                reason = await self._converse(ctx, task, live, trajectory)
        finally:
            ctx.metrics["tau2_steps"] = float(trajectory.steps)
            ctx.metrics["tau2_tool_errors"] = float(trajectory.errors)
            ctx.results[RESULTS_KEY] = {
                "domain": cfg.domain, "task_id": task.id, "task_set": cfg.task_set,
                "policy": cfg.policy, "split": ref.get("split", ""), "solo": cfg.solo,
                "termination_reason": reason or trajectory.reason or "agent_error",
                "seed": episode_seed(ctx),
                "trial": ctx.info.rollout, "start_time": started, "end_time": _now(),
                "duration": round(time.monotonic() - t0, 6), "max_steps": cfg.max_steps,
                "max_errors": cfg.max_errors, "steps": trajectory.steps,
                "db_hash": environment.get_db_hash(),
                "messages": trajectory.plain()}
            log.debug("tau2.episode", episode_id=ctx.info.episode_id, task_id=task.id,
                      termination_reason=reason, steps=trajectory.steps,
                      tool_calls=live.calls, messages=len(trajectory.messages))

    async def _converse(self, ctx: EpisodeContext, task: Any, live: Live,
                        trajectory: Trajectory) -> str:
        cfg: StepConfig = self.config
        tau = domains.tau2()
        environment = live.environment
        agent = ctx.agent(cfg.seat)
        seed = episode_seed(ctx)
        seeded(agent, seed)
        sim = user_sim(cfg)
        for seat in sim.seats():
            seeded(ctx.agent(seat), seed)
        llm_agent = tau.llm_agent
        agent_system = llm_agent.SYSTEM_PROMPT.format(
            domain_policy=environment.get_policy(), agent_instruction=llm_agent.AGENT_INSTRUCTION)
        greeting = str(trajectory.messages[0].content)
        agent_task = Task(idx=ctx.task.idx, prompt=(Message("assistant", greeting),),
                          system_prompt=agent_system, info=ctx.task.info)
        person = persona(task, user_tools=environment.user_tools is not None)
        await set_up_user_sim(sim, person, ctx, name=cfg.user_sim, step=self.name)
        failure: str | None = None
        try:
            async with agent.chat(agent_task) as agent_chat:
                to_user, turn = greeting, 0
                while True:
                    said = await answer_or_error(
                        sim, Read(text=to_user, turn=turn,
                                  messages=(ReadMessage(turn, to_user, seat=cfg.seat),)),
                        name=cfg.user_sim, step=self.name, what=f" (turn {turn})")
                    if said.error is not None:
                        failure = said.error
                        trajectory.reason = "user_error"
                        break
                    trajectory.add(user_messages(said), "user", live)
                    if trajectory.reason is None and said.done:
                        trajectory.reason = "user_stop"
                    if trajectory.reason is not None:
                        break
                    answer = await agent_chat.turn(said.text)
                    trajectory.add(answer.messages, "assistant", live)
                    if trajectory.reason is None and answer.stopped:
                        trajectory.reason = "agent_error"
                    if trajectory.reason is not None:
                        break
                    to_user, turn = answer.text, turn + 1
                if not agent_chat.over:
                    agent_chat.stop(STOP_CONDITIONS[trajectory.reason])
        finally:
            # Her traces end as the conversation did for her, unless her turn ended them.
            for trace in ctx.traces:
                if trace.seat in sim.seats() and trace.stop_condition is None:
                    trace.stop_condition = STOP_CONDITIONS.get(trajectory.reason or "",
                                                               "user_closed")
            await sim.close()
        if failure is not None:
            # The user sim's failure: a user_error episode, never scored (as in the relay).
            raise UserSimError(failure)
        return trajectory.reason

    async def _solo(self, ctx: EpisodeContext, task: Any, live: Live,
                    trajectory: Trajectory) -> str:
        """tau2's solo mode: the agent alone on the ticket, tool calls only, until ``done``."""
        cfg: ExchangeConfig = self.config
        tau = domains.tau2()
        agent = ctx.agent(cfg.seat)
        seeded(agent, episode_seed(ctx))
        solo = tau.llm_agent
        system = solo.SYSTEM_PROMPT_SOLO.format(
            agent_instruction=solo.AGENT_SOLO_INSTRUCTION.format(
                stop_function_name=solo.LLMSoloAgent.STOP_FUNCTION_NAME,
                stop_token=solo.LLMSoloAgent.STOP_TOKEN),
            domain_policy=live.environment.get_policy(), ticket=task.ticket)
        # tau2's first call holds the system message alone: the prompt is that message.
        agent_task = Task(idx=ctx.task.idx, prompt=(Message("system", system),),
                          info=ctx.task.info)
        async with agent.chat(agent_task) as chat:
            reply = await chat.turn(tool_choice="required")
            trajectory.add(reply.messages, "assistant", live)
            if trajectory.reason is None:
                trajectory.reason = "agent_error"
            if not chat.over:
                chat.stop(STOP_CONDITIONS[trajectory.reason])
        return trajectory.reason
