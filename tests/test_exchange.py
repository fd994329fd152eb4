"""The exchange end to end over real HTTP: agents, chat sessions, the chat harness's tool loop,
episodes and the relay, against the scripted model."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, ClassVar

import attrs
import pytest

from interplay import hookimpl
from interplay.builtin_envs.steps import Relay, RelayConfig
from interplay.builtin_verifiers.match import Contains, MatchConfig
from interplay.config.endpoint import Endpoint
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.harness import Harness, Segment
from interplay.contracts.step import Step
from interplay.contracts.usersim import Answer, Read, UserSim
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.model.client import ModelClient
from interplay.run.agent import Agent, LiveSegmentContext
from interplay.run.config import check_seats
from interplay.run.episode import LiveEpisodeContext, RunResources, run_episode
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values.records import Message, Reward, Task
from interplay.values.tools import Tool, tool

USER_MARK = "role-playing a user"


def counting(request: ScriptedRequest) -> ScriptedReply:
    """Answers ``ok <n>`` where n counts the user messages it was sent."""
    n = sum(1 for m in request.messages if m.get("role") == "user")
    return ScriptedReply.text(f"ok {n}")


class StepsEnv(Env):
    """An env whose program and tools a test supplies."""

    name = "test-env"
    seats: ClassVar[dict[str, SeatSpec]] = {
        "assistant": SeatSpec(harness="chat"),
        "user": SeatSpec(harness="null", trainable=False),
    }

    def __init__(self, steps: list[Step], verifiers: list[Verifier] | None = None,
                 tools: Callable[[LiveEpisodeContext], list[Tool]] | None = None) -> None:
        super().__init__()
        self._steps, self._verifiers, self._tools = steps, verifiers or [], tools

    def tasks(self) -> Iterable[Task]:
        return []

    def steps(self) -> list[Step]:
        return self._steps

    def verifiers(self) -> list[Verifier]:
        return self._verifiers

    def tools(self, seat: str, ctx: LiveEpisodeContext) -> list[Tool]:
        return self._tools(ctx) if self._tools and seat == "assistant" else []


class FnStep(Step):
    """A step that runs a test's coroutine function."""

    name = "fn"

    def __init__(self, fn: Callable[[LiveEpisodeContext], Any], seats: set[str] | None = None):
        super().__init__()
        self.fn = fn
        self._seats = seats or {"assistant"}

    def seats(self) -> set[str]:
        return self._seats

    async def run(self, ctx: LiveEpisodeContext) -> None:
        await self.fn(ctx)


@pytest.fixture
async def model_and_resources() -> AsyncIterator[Callable[..., Any]]:
    made: list[tuple[ScriptedModel, RunResources]] = []

    def make(script: Any, **seat_overrides: dict[str, Any]) -> tuple[ScriptedModel, RunResources]:
        model = ScriptedModel(script).start()
        resources = RunResources(endpoint=model.endpoint, seats=seat_overrides)
        made.append((model, resources))
        return model, resources

    yield make
    for model, resources in made:
        await resources.aclose()
        model.stop()


async def run_steps(resources: RunResources, fn: Callable[[LiveEpisodeContext], Any],
                    task: Task, **kwargs: Any) -> Any:
    env = StepsEnv([FnStep(fn, kwargs.pop("seats", None))], **kwargs)
    return await run_episode(env, task, resources=resources, seed=7)


# -- opening, prompt modes, masking ------------------------------------------------------------


async def test_prompted_task_speaks_first(model_and_resources: Any) -> None:
    model, resources = model_and_resources(counting)
    replies: list[str] = []

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            replies.append((await chat.turn()).text)
            replies.append((await chat.turn("and again")).text)

    ep = await run_steps(resources, program, Task(0, prompt="hello", system_prompt="be brief"))
    assert replies == ["ok 1", "ok 2"]
    trace = ep.trace("assistant")
    assert [m.role for m in trace.messages] == ["system", "user", "assistant", "user",
                                                "assistant"]
    assert trace.stop_condition == "user_closed"
    # The second request carried the whole conversation, the system prompt once.
    second = model.requests[1].messages
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[0]["content"] == "be brief"


async def test_promptless_task_is_opened_by_a_message(model_and_resources: Any) -> None:
    model, resources = model_and_resources(counting)
    errors: list[str] = []

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            with pytest.raises(InterplayError, match="no prompt") as err:
                await chat.turn()
            errors.append(str(err.value))
            assert (await chat.turn("hi there")).text == "ok 1"

    ep = await run_steps(resources, program, Task(0, prompt=None))
    assert ep.error is None
    assert "turn(message)" in errors[0]
    assert model.requests[0].messages == [{"role": "user", "content": "hi there"}]


async def test_masked_prompt_never_reaches_the_wire_but_scoring_sees_it(
        model_and_resources: Any) -> None:
    model, resources = model_and_resources(lambda r: ScriptedReply.text("the answer is 42"))

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task, mask_prompt=True) as chat:
            with pytest.raises(InterplayError, match="masked"):
                await chat.turn()
            await chat.turn("what is it?")

    secret_prompt = "SECRET-SCENARIO the user wants 42"
    ep = await run_steps(resources, program,
                         Task(0, prompt=secret_prompt, system_prompt="sys", answer="42"),
                         verifiers=[Contains(MatchConfig())])
    wire = json.dumps([r.body for r in model.requests])
    assert "SECRET-SCENARIO" not in wire
    assert ep.task.prompt == secret_prompt
    assert ep.reward == 1.0
    assert ep.trace("assistant").info["prompt_masked"] is True
    assert model.requests[0].messages[0] == {"role": "system", "content": "sys"}


async def test_resume_keeps_supplied_system_messages(model_and_resources: Any) -> None:
    model, resources = model_and_resources(counting)
    prompt = (Message("system", "task rule A"), Message("user", "start"))

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            await chat.turn()
            await chat.turn(Message("system", "a note from the operator"))
            await chat.turn("go on")

    await run_steps(resources, program, Task(0, prompt=prompt, system_prompt="synth"))
    last = model.requests[-1].messages
    systems = [m["content"] for m in last if m["role"] == "system"]
    assert systems == ["synth", "task rule A", "a note from the operator"]


async def test_a_turns_context_is_what_is_sent_and_the_trace_keeps_everything(
        model_and_resources: Any) -> None:
    model, resources = model_and_resources(counting)

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            with pytest.raises(InterplayError, match="needs an opened chat"):
                await chat.turn("first", context=[Message("user", "first")])
            await chat.turn("first")
            await chat.turn("second")
            with pytest.raises(InterplayError, match="at least the new input"):
                await chat.turn("third", context=[])
            await chat.turn("third", context=[Message("system", "sys"),
                                              Message("user", "(earlier: two turns)\n\nthird")])

    ep = await run_steps(resources, program, Task(0, system_prompt="sys"))
    sent = model.requests[-1].messages
    assert sent == [{"role": "system", "content": "sys"},
                    {"role": "user", "content": "(earlier: two turns)\n\nthird"}]
    trace = ep.trace("assistant")
    assert [m.text for m in trace.messages if m.role == "user"] == ["first", "second", "third"]
    assert trace.messages[-1].text == "ok 1"
    assert trace.model_calls[-1].request["messages"] == sent


# -- serialization, closing, errors ------------------------------------------------------------


async def test_concurrent_turns_are_serialized(model_and_resources: Any) -> None:
    def slow(request: ScriptedRequest) -> ScriptedReply:
        return ScriptedReply.text(counting(request).content or "", latency_s=0.05)

    model, resources = model_and_resources(slow)

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            await chat.turn()
            results = await asyncio.gather(chat.turn("a"), chat.turn("b"), chat.turn("c"))
            assert sorted(r.text for r in results) == ["ok 2", "ok 3", "ok 4"]

    ep = await run_steps(resources, program, Task(0, prompt="start"))
    assert ep.error is None
    # Had two turns overlapped, both would have been sent the same conversation; serialized,
    # each request carries the previous turn's exchange.
    sizes = [len(r.messages) for r in model.requests]
    assert sizes == [1, 3, 5, 7]


async def test_turn_after_close_is_an_error(model_and_resources: Any) -> None:
    _, resources = model_and_resources(counting)
    sessions: list[Any] = []

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            await chat.turn()
            sessions.append(chat)
        with pytest.raises(InterplayError, match="is over"):
            await chat.turn("more")

    ep = await run_steps(resources, program, Task(0, prompt="start"))
    assert ep.error is None
    assert ep.trace("assistant").stop_condition == "user_closed"
    assert ep.trace("assistant").ended_at is not None


async def test_one_shot_run_ends_agent_completed(model_and_resources: Any) -> None:
    _, resources = model_and_resources(counting)

    async def program(ctx: LiveEpisodeContext) -> None:
        trace = await ctx.agent("assistant").run(ctx.task)
        assert trace.messages[-1].text == "ok 1"

    ep = await run_steps(resources, program, Task(0, prompt="start"))
    assert ep.trace("assistant").stop_condition == "agent_completed"
    assert ep.trace("assistant").usage.total_tokens > 0


async def test_model_failure_sets_error_type_and_stops_the_chat(model_and_resources: Any) -> None:
    _, resources = model_and_resources(
        [ScriptedReply.text("fine"), ScriptedReply.fault(400)])

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            await chat.turn()
            reply = await chat.turn("next")
            assert reply.stopped and reply.stop_condition == "error"
            with pytest.raises(InterplayError):
                await chat.turn("after the error")

    ep = await run_steps(resources, program, Task(0, prompt="start"))
    trace = ep.trace("assistant")
    assert trace.error_type == "bad_request"
    assert trace.stop_condition == "error"
    assert ep.error_type == "bad_request"


async def test_episode_keeps_every_trace_when_the_program_raises(model_and_resources: Any) -> None:
    _, resources = model_and_resources(counting)

    async def program(ctx: LiveEpisodeContext) -> None:
        user = ctx.agent("user").chat(Task(0, prompt="be the user"))
        await user.turn()
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            await chat.turn()
            raise RuntimeError("env bug midway")

    ep = await run_steps(resources, program, Task(0, prompt="start"),
                         seats={"assistant", "user"})
    assert ep.error_type == "env_error"
    assert "env bug midway" in (ep.error or "")
    assert {t.seat for t in ep.traces} == {"assistant", "user"}
    assert ep.trace("assistant").stop_condition == "error"
    assert ep.trace("user").stop_condition == "error"
    assert all(t.ended_at is not None for t in ep.traces)
    assert all(t.episode == ep.info for t in ep.traces)


async def test_run_retries_but_chat_does_not(model_and_resources: Any) -> None:
    _, resources = model_and_resources(
        [ScriptedReply.fault(400), ScriptedReply.text("second try"),
         ScriptedReply.fault(400)],
        assistant={"retries": 1},
    )

    async def program(ctx: LiveEpisodeContext) -> None:
        trace = await ctx.agent("assistant").run(ctx.task)
        assert trace.info["attempts"] == 2
        assert trace.error_type is None
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            reply = await chat.turn()
            assert reply.stopped

    ep = await run_steps(resources, program, Task(0, prompt="start"))
    # The failed first attempt was replaced; the chat's failure was not retried.
    assert [t.error_type for t in ep.traces] == [None, "bad_request"]


async def test_traces_are_stamped(model_and_resources: Any) -> None:
    _, resources = model_and_resources(counting)

    async def program(ctx: LiveEpisodeContext) -> None:
        await ctx.agent("assistant").run(ctx.task)
        await ctx.agent("user").run(ctx.task)

    ep = await run_steps(resources, program, Task(3, prompt="x"), seats={"assistant", "user"})
    by_seat = {t.seat: t for t in ep.traces}
    assert by_seat["assistant"].trainable is True
    assert by_seat["user"].trainable is False
    assert by_seat["user"].harness == "null"
    assert ep.info.task_idx == 3 and ep.info.seed == 7
    assert {t.episode.episode_id for t in ep.traces} == {ep.info.episode_id}


class FixedVerifier(Verifier):
    """Returns what a test gives it."""

    def __init__(self, name: str, out: Any) -> None:
        super().__init__()
        self.name = name  # type: ignore[misc]
        self.out = out

    async def score(self, episode: Any, ctx: LiveEpisodeContext) -> Any:
        return self.out


@pytest.mark.parametrize(("out", "why"), [
    (None, "score() returned NoneType; expected a Reward or a list of Rewards"),
    (0.5, "score() returned float"),
    ([Reward("x", 1.0), "y"], "score() returned list"),
    (Reward("nan", float("nan")), "reward 'nan' has value nan; expected a finite number"),
    ([Reward("inf", 1.0, weight=float("inf"))], "reward 'inf' has weight inf"),
])
async def test_a_verifier_returning_no_rewards_or_non_finite_ones_is_a_verifier_error(
        model_and_resources: Any, out: Any, why: str) -> None:
    _, resources = model_and_resources(counting)

    async def program(ctx: LiveEpisodeContext) -> None:
        await ctx.agent("assistant").run(ctx.task)

    ep = await run_steps(resources, program, Task(0, prompt="hi"),
                         verifiers=[FixedVerifier("good", Reward("good", 1.0)),
                                    FixedVerifier("odd", out)])
    assert ep.error_type == "verifier_error"
    assert ep.error is not None and ep.error.startswith("verifier odd: ")
    assert why in ep.error
    # What the good verifier said is kept to read; the episode is not scored on it alone.
    assert [r.name for r in ep.rewards] == ["good"] and ep.reward is None
    assert ep.metrics["odd_error"] == 1.0


class RaisingVerifier(Verifier):
    name = "raising"

    async def score(self, episode: Any, ctx: LiveEpisodeContext) -> Any:
        return json.loads("{not json")  # raises inside the standard library


async def test_a_verifier_that_raises_says_where_in_its_own_code(
        model_and_resources: Any) -> None:
    _, resources = model_and_resources(counting)

    async def program(ctx: LiveEpisodeContext) -> None:
        await ctx.agent("assistant").run(ctx.task)

    ep = await run_steps(resources, program, Task(0, prompt="hi"),
                         verifiers=[RaisingVerifier()])
    assert ep.error_type == "verifier_error"
    line = RaisingVerifier.score.__code__.co_firstlineno + 1
    # The verifier's line, not json's; what to do next is the run's last line's to say.
    assert ep.error is not None and ep.error.startswith("verifier raising: JSONDecodeError: ")
    assert ep.error.endswith(f" (test_exchange.py:{line})"), ep.error


async def test_a_step_that_raises_says_where(model_and_resources: Any) -> None:
    _, resources = model_and_resources(counting)

    async def program(ctx: LiveEpisodeContext) -> None:
        json.loads("{not json")

    ep = await run_steps(resources, program, Task(0, prompt="hi"))
    line = program.__code__.co_firstlineno + 1
    assert ep.error_type == "env_error" and ep.error is not None
    assert ep.error.startswith("step 'fn': JSONDecodeError: ")
    assert ep.error.endswith(f"(test_exchange.py:{line})"), ep.error


async def test_an_env_whose_steps_cannot_be_built_is_an_episode_error(
        model_and_resources: Any) -> None:
    _, resources = model_and_resources(counting)

    class Broken(StepsEnv):
        def steps(self) -> list[Step]:
            raise RuntimeError("cannot build")

    ep = await run_episode(Broken([]), Task(0, prompt="hi"), resources=resources)
    assert ep.error_type == "env_error" and "cannot build" in (ep.error or "")


async def test_concurrent_route_callers_share_one_route(model_and_resources: Any) -> None:
    _, resources = model_and_resources(counting)

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            first, second = await asyncio.gather(chat.ctx.route(), chat.ctx.route())
            assert first is second
            assert await chat.ctx.route() is first

    ep = await run_steps(resources, program, Task(0, prompt="hi"))
    assert ep.error is None, ep.error


async def test_a_cancelled_chat_is_not_an_env_error(model_and_resources: Any) -> None:
    _, resources = model_and_resources(counting)
    seen: list[LiveEpisodeContext] = []
    entered = asyncio.Event()

    async def program(ctx: LiveEpisodeContext) -> None:
        seen.append(ctx)
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            await chat.turn()
            entered.set()
            await asyncio.Event().wait()

    running = asyncio.ensure_future(run_steps(resources, program, Task(0, prompt="hi")))
    await entered.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    (trace,) = seen[0].traces
    assert trace.error_type is None and trace.error is None
    assert trace.stop_condition == "cancelled"


# -- the chat harness's tool loop --------------------------------------------------------------


def shop_tools(ctx: LiveEpisodeContext) -> list[Tool]:
    ctx.results["orders"] = {"1042": "open"}

    @tool
    def cancel_order(order_id: str) -> str:
        """Cancel an order."""
        if order_id not in ctx.results["orders"]:
            raise KeyError(f"no order {order_id}")
        ctx.results["orders"][order_id] = "cancelled"
        return "cancelled"

    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    return [cancel_order, Tool("slow", "never finishes in time",
                               {"type": "object", "properties": {}}, slow, timeout_s=0.05)]


async def test_tool_loop_runs_tools_and_survives_bad_calls(model_and_resources: Any) -> None:
    model, resources = model_and_resources([
        ScriptedReply.calls([("cancel_order", {"order_id": "1042"}),
                             ("cancel_order", {"order_id": "9"})]),
        ScriptedReply.tool_call("cancel_order", "{not json"),
        ScriptedReply.tool_call("no_such_tool", {}),
        ScriptedReply.tool_call("slow", {}),
        ScriptedReply.tool_call("cancel_order", {"wrong": 1}),
        ScriptedReply.text("done: cancelled"),
    ])

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            reply = await chat.turn()
            assert reply.text == "done: cancelled"

    ep = await run_steps(resources, program, Task(0, prompt="cancel 1042"), tools=shop_tools)
    assert ep.error is None
    assert ep.results["orders"] == {"1042": "cancelled"}
    trace = ep.trace("assistant")
    errors = [r.error_type for r in trace.tool_runs]
    assert errors == [None, "tool_error", "bad_arguments", "unknown_tool", "timeout",
                      "bad_arguments"]
    tool_outputs = [m.text for m in trace.messages if m.role == "tool"]
    assert tool_outputs[0] == "cancelled"
    assert all(o.startswith("error:") for o in tool_outputs[1:])
    # The tools went on the wire in the OpenAI shape.
    names = [t["function"]["name"] for t in model.requests[0].body["tools"]]
    assert names == ["cancel_order", "slow"]


async def test_tool_loop_stops_at_max_turns(model_and_resources: Any) -> None:
    _, resources = model_and_resources(
        lambda r: ScriptedReply.tool_call("cancel_order", {"order_id": "1042"}),
        assistant={"harness_config": {"max_turns": 3}})

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            reply = await chat.turn()
            assert reply.stopped and reply.stop_condition == "max_turns"

    ep = await run_steps(resources, program, Task(0, prompt="loop"), tools=shop_tools)
    assert len(ep.trace("assistant").model_calls) == 3


async def test_a_slow_sync_tool_times_out_without_blocking_the_others(
        model_and_resources: Any) -> None:
    release = threading.Event()

    def blocking() -> str:
        release.wait(30)
        return "late"

    async def quick() -> str:
        await asyncio.sleep(0)
        return "quick done"

    def tools(ctx: LiveEpisodeContext) -> list[Tool]:
        empty = {"type": "object", "properties": {}}
        return [Tool("blocking", "sync and slow", empty, blocking, timeout_s=0.05),
                Tool("quick", "async and fast", empty, quick)]

    _, resources = model_and_resources([
        ScriptedReply.calls([("blocking", {}), ("quick", {})]),
        ScriptedReply.text("done"),
    ])

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            await chat.turn()

    try:
        ep = await run_steps(resources, program, Task(0, prompt="go"), tools=tools)
    finally:
        release.set()
    trace = ep.trace("assistant")
    # The quick tool finished while the blocking one was still running.
    assert [(r.name, r.error_type) for r in trace.tool_runs] == [("quick", None),
                                                                  ("blocking", "timeout")]
    outputs = [m.text for m in trace.messages if m.role == "tool"]
    assert outputs[0].startswith("error: the tool did not finish")
    assert outputs[1] == "quick done"


async def test_only_a_binding_failure_is_bad_arguments(model_and_resources: Any) -> None:
    """A TypeError raised inside a tool, or by serializing its result, is the tool's error,
    not the model's."""

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @tool
    def broken(x: str) -> str:
        """Fails inside."""
        return x + 1  # type: ignore[operator]

    @tool
    def unserializable() -> object:
        """Returns what JSON cannot hold."""
        return {1, 2}

    _, resources = model_and_resources([
        ScriptedReply.tool_call("add", {"a": 1, "b": 2}),
        ScriptedReply.tool_call("add", {"a": 1}),
        ScriptedReply.tool_call("add", {"a": 1, "b": 2, "c": 3}),
        ScriptedReply.tool_call("broken", {"x": "s"}),
        ScriptedReply.tool_call("unserializable", {}),
        ScriptedReply.text("done"),
    ])

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            await chat.turn()

    ep = await run_steps(resources, program, Task(0, prompt="go"),
                         tools=lambda ctx: [add, broken, unserializable])
    trace = ep.trace("assistant")
    assert [r.error_type for r in trace.tool_runs] == [
        None, "bad_arguments", "bad_arguments", "tool_error", "tool_error"]
    outputs = [m.text for m in trace.messages if m.role == "tool"]
    assert outputs[0] == "3"
    assert "'b'" in outputs[1] and "'c'" in outputs[2]
    assert outputs[3].startswith("error: TypeError")


async def test_arguments_are_checked_against_the_tools_schema_before_it_runs(
        model_and_resources: Any) -> None:
    """A value of the wrong type never reaches the tool: the model is told which field and
    what the schema wants (``bad_arguments``), as for a name no tool has."""
    ran: list[Any] = []

    async def message_user(text: str) -> str:
        ran.append(text)
        return f"sent {text.strip()}"

    schema = {"type": "object", "properties": {"text": {"type": "string"},
                                                "when": {"type": "object", "properties": {
                                                    "hour": {"type": "integer"}}}},
              "required": ["text"]}
    _, resources = model_and_resources([
        ScriptedReply.tool_call("message_user", {"text": 42}),
        ScriptedReply.tool_call("message_user", {"text": "hi", "when": {"hour": "nine"}}),
        ScriptedReply.tool_call("message_user", {"text": "hi"}),
        ScriptedReply.text("done"),
    ])

    async def program(ctx: LiveEpisodeContext) -> None:
        async with ctx.agent("assistant").chat(ctx.task) as chat:
            await chat.turn()

    ep = await run_steps(resources, program, Task(0, prompt="go"), tools=lambda ctx: [
        Tool("message_user", "Message the user.", schema, message_user)])
    trace = ep.trace("assistant")
    assert [r.error_type for r in trace.tool_runs] == ["bad_arguments", "bad_arguments", None]
    outputs = [m.text for m in trace.messages if m.role == "tool"]
    assert outputs[0] == ("error: argument 'text': 42 is not of type 'string'; call it again "
                          "with the tool's parameters")
    assert outputs[1].startswith("error: argument 'when.hour': 'nine' is not of type")
    assert outputs[2] == "sent hi" and ran == ["hi"]


async def test_reserved_sampling_keys_are_refused_at_load() -> None:
    env = StepsEnv([FnStep(lambda ctx: asyncio.sleep(0))])
    for key in ("stream", "tools", "messages", "model"):
        resources = RunResources(endpoint=Endpoint(),
                                 seats={"assistant": {"sampling": {key: 1}}})
        with pytest.raises(InterplayError, match=f"seats.assistant.sampling.{key}"):
            check_seats(env, resources)
    check_seats(env, RunResources(endpoint=Endpoint(),
                                  seats={"assistant": {"sampling": {"temperature": 0.2}}}))


def test_a_seats_sampling_is_checked_like_the_endpoints() -> None:
    env = StepsEnv([FnStep(lambda ctx: asyncio.sleep(0))])
    resources = RunResources(endpoint=Endpoint(),
                             seats={"assistant": {"sampling": {"top_q": 0.5}}})
    with pytest.raises(InterplayError, match=r"^seats\.assistant\.sampling\.top_q: not a "):
        check_seats(env, resources)
    resources = RunResources(endpoint=Endpoint(),
                             seats={"assistant": {"sampling": {"top_p": "high"}}})
    with pytest.raises(InterplayError, match=r"^seats\.assistant\.sampling\.top_p: expected"):
        check_seats(env, resources)



# -- the user-sim relay ------------------------------------------------------------------------


def relay_model(done_after: int, *, contains_marker: bool = False) -> Callable[..., ScriptedReply]:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        msgs = request.messages
        system = msgs[0]["content"] if msgs and msgs[0]["role"] == "system" else ""
        n = sum(1 for m in msgs if m["role"] == "user")
        if USER_MARK in system:
            if n > done_after:
                return ScriptedReply.text("thanks ###DONE### bye" if contains_marker
                                          else "###DONE###")
            return ScriptedReply.text(f"user says {n}")
        return ScriptedReply.text(f"assistant says {n}")

    return handler


def relay_env(**cfg: Any) -> StepsEnv:
    env = StepsEnv([Relay(RelayConfig(**cfg))])
    return env


async def test_relay_ends_on_exact_done_marker(model_and_resources: Any) -> None:
    model, resources = model_and_resources(relay_model(done_after=2))
    task = Task(0, prompt="SCENARIO: ask about {done_marker} hours", system_prompt="desk")
    ep = await run_episode(relay_env(), task, resources=resources)
    assert ep.error is None
    assert ep.results["relay"] == {"turns": 2, "ended_by": "user_done", "done_reason": "",
                                   "user_lines": ["user says 1", "user says 2"],
                                   "closing_line": ""}
    assistant, user = ep.trace("assistant"), ep.trace("user")
    assert assistant.stop_condition == "user_done"
    assert user.trainable is False
    # The scenario reached the user's system prompt as written: placeholders inside it untouched.
    user_system = model.requests[0].messages[0]["content"]
    assert "SCENARIO: ask about {done_marker} hours" in user_system
    # The assistant never saw the scenario; it saw the user's lines.
    assistant_wire = [r for r in model.requests if USER_MARK not in json.dumps(r.messages[:1])]
    assert all("SCENARIO" not in json.dumps(r.messages) for r in assistant_wire)
    assert [m.text for m in assistant.messages if m.role == "user"] == ["user says 1",
                                                                         "user says 2"]


async def test_a_tasks_opening_line_is_sent_as_written_and_the_user_plays_on_from_it(
        model_and_resources: Any) -> None:
    model, resources = model_and_resources(relay_model(done_after=1))
    task = Task(0, prompt="You want the hours.", system_prompt="desk",
                info={"opening": "When do you open?"})
    ep = await run_episode(relay_env(), task, resources=resources)
    assert ep.error is None
    assert ep.results["relay"]["user_lines"] == ["When do you open?", "user says 1"]
    assert [m.text for m in ep.trace("assistant").messages if m.role == "user"] == [
        "When do you open?", "user says 1"]
    # The user sim was first asked after the assistant's answer, knowing what she had said.
    first_user_request = next(r for r in model.requests if USER_MARK in
                              str(r.messages[0]["content"]))
    assert "Your first message to the assistant was: When do you open?" in \
        first_user_request.messages[0]["content"]
    assert first_user_request.messages[1] == {"role": "user", "content": "assistant says 1"}


async def test_relay_does_not_end_on_a_line_merely_containing_the_marker(
        model_and_resources: Any) -> None:
    _, resources = model_and_resources(relay_model(done_after=1, contains_marker=True))
    ep = await run_episode(relay_env(max_turns=3), Task(0, prompt="s"), resources=resources)
    assert ep.results["relay"]["turns"] == 3
    assert ep.results["relay"]["ended_by"] == "max_turns"
    assert ep.trace("assistant").stop_condition == "max_turns"


async def test_relay_asks_the_user_after_the_last_turn_and_only_a_done_counts(
        model_and_resources: Any) -> None:
    # Her done after the last turn max_turns allows ends the relay as hers.
    model, resources = model_and_resources(relay_model(done_after=2))
    ep = await run_episode(relay_env(max_turns=2), Task(0, prompt="s"), resources=resources)
    assert ep.results["relay"]["ended_by"] == "user_done"
    assert ep.results["relay"]["turns"] == 2
    # Any other line after it is asked for, and neither passed on nor kept.
    model, resources = model_and_resources(relay_model(done_after=5))
    ep = await run_episode(relay_env(max_turns=2), Task(0, prompt="s"), resources=resources)
    assert ep.results["relay"]["ended_by"] == "max_turns"
    assert ep.results["relay"]["user_lines"] == ["user says 1", "user says 2"]
    user_calls = [r for r in model.requests if USER_MARK in json.dumps(r.messages[:1])]
    assert len(user_calls) == 3


async def test_relay_ends_with_user_error_when_the_user_model_fails(
        model_and_resources: Any) -> None:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        msgs = request.messages
        n = sum(1 for m in msgs if m["role"] == "user")
        if USER_MARK in json.dumps(msgs[:1]):
            return ScriptedReply.fault(400) if n > 2 else ScriptedReply.text(f"user says {n}")
        return ScriptedReply.text(f"assistant says {n}")

    _, resources = model_and_resources(handler)
    ep = await run_episode(relay_env(), Task(0, prompt="s"), resources=resources)
    assert ep.results["relay"] == {"turns": 2, "ended_by": "user_error", "done_reason": "",
                                   "user_lines": ["user says 1", "user says 2"],
                                   "closing_line": "",
                                   "error": "user sim 'llm' could not answer in relay "
                                            "(turn 2): bad_request"}
    # The user did not say they were done: the assistant's trace says so. The episode's
    # error is what stopped her sim: her seat's model failed, and the seat is named.
    assert ep.trace("assistant").stop_condition == "user_error"
    assert ep.trace("user").error_type == "bad_request"
    assert ep.error_type == "bad_request"
    assert ep.error == f"seat 'user': {ep.trace('user').error}"


async def test_relay_refuses_an_empty_done_marker() -> None:
    env = relay_env(done_marker="  ")
    with pytest.raises(InterplayError, match="done_marker is empty"):
        env.check()


class EchoUser(UserSim):
    """A scripted user sim: says three fixed lines, then it is done."""

    name = "three-lines"

    @attrs.define
    class Config:
        lines: list[str] = attrs.Factory(lambda: ["first", "second", "third"])

    Config: ClassVar[type] = Config  # type: ignore[no-redef]

    async def answer(self, read: Read) -> Answer:
        if read.turn >= len(self.config.lines):
            return Answer("", done=True)
        return Answer(self.config.lines[read.turn])


class ThirdPartyPlugin:
    @staticmethod
    @hookimpl
    def register_user_sims(register: Any) -> None:
        register(EchoUser)


async def test_a_third_party_user_sim_replaces_the_default(
        model_and_resources: Any, register_plugin: Any) -> None:
    register_plugin(ThirdPartyPlugin, "third-party-user", package="user-sim-pkg")
    model, resources = model_and_resources(counting)
    env = relay_env(user_sim="three-lines", user_sim_settings={"lines": ["a", "b"]})
    env.check()
    ep = await run_episode(env, Task(0, prompt="s"), resources=resources)
    assert ep.error is None
    assert [t.seat for t in ep.traces] == ["assistant"]
    assert ep.results["relay"] == {"turns": 2, "ended_by": "user_done", "done_reason": "",
                                   "user_lines": ["a", "b"], "closing_line": ""}
    assert [m.text for m in ep.trace("assistant").messages if m.role == "user"] == ["a", "b"]
    assert len(model.requests) == 2


async def test_unknown_user_sim_is_refused_at_load() -> None:
    with pytest.raises(InterplayError, match="unknown user sim 'nobody'"):
        relay_env(user_sim="nobody").check()


class HangingHarness(Harness):
    name = "test_hanging"

    async def launch(self, task: Task, ctx: LiveSegmentContext) -> Segment:
        await asyncio.sleep(60)
        return Segment()


async def test_a_segment_past_its_timeout_ends_with_timeout() -> None:
    client = ModelClient(Endpoint(base_url="http://127.0.0.1:9/v1"))
    agent = Agent(name="assistant", harness=HangingHarness(), client=client,
                  spec=SeatSpec(timeout_s=0.1))
    try:
        async with agent.chat(Task(0, prompt="hi")) as chat:
            reply = await asyncio.wait_for(chat.turn(), timeout=5)
    finally:
        await client.aclose()
    assert reply.stopped and reply.stop_condition == "timeout"
    assert chat.trace.error_type == "timeout" and chat.trace.error == "segment exceeded 0.1 s"
