"""Every model call a harness makes reaches its trace, whether or not the harness remembers to
record it: ``ctx.client`` is bound to the segment and records what it sends, and
``ctx.record_call`` keeps a call once however often it is given."""

from __future__ import annotations

import asyncio
import types
from typing import Any, ClassVar

import pytest

from interplay import (
    Env,
    Harness,
    Message,
    ModelCall,
    SeatSpec,
    Segment,
    SegmentContext,
    Step,
    Task,
    hookimpl,
)
from interplay.builtin_envs.steps import OneShot
from interplay.model import assistant_message
from interplay.testing import ScriptedModel, run_scripted


class Forgetful(Harness):
    """Two model calls per segment, recorded by nobody."""

    name = "test_forgetful"

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        first = await ctx.client.chat(task.messages(), **ctx.sampling)
        second = await ctx.client.chat([*task.messages(), Message("user", "again")])
        text = " / ".join(m.text for m in map(assistant_message, (first, second)) if m)
        return Segment([Message("assistant", text)])


class Careful(Harness):
    """Records each call itself, once or twice, as harnesses written before did."""

    name = "test_careful"

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        call = await ctx.client.chat(task.messages())
        ctx.record_call(call)
        ctx.record_call(call)
        raw = await ctx.client.chat_raw({"model": ctx.client.endpoint.model,
                                         "messages": [{"role": "user", "content": "raw"}]})
        ctx.record_call(raw)
        return Segment([Message("assistant", "done")])


class Parallel(Harness):
    """Three calls at once."""

    name = "test_parallel"

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        calls = await asyncio.gather(*(ctx.client.chat([Message("user", f"q{i}")])
                                       for i in range(3)))
        return Segment([Message("assistant", str(len(calls)))])


class OwnClient(Harness):
    """Calls the model through a client of its own and records the call itself."""

    name = "test_own_client"

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        call = await ctx.client.plain.chat(task.messages())  # not through the bound client
        ctx.record_call(call)
        return Segment([Message("assistant", "own")])


class OneSeat(Env):
    """One call of the assistant, with the harness a test names."""

    name = "test_one_seat"
    seats: ClassVar[dict[str, SeatSpec]] = {"assistant": SeatSpec(harness="test_forgetful")}

    def tasks(self) -> list[Task]:
        return [Task(0, prompt="hello")]

    def steps(self) -> list[Step]:
        return [OneShot()]


@pytest.fixture(autouse=True)
def harnesses(register_plugin: Any) -> None:
    def register_harnesses(register: Any) -> None:
        for cls in (Forgetful, Careful, Parallel, OwnClient):
            register(cls)

    register_plugin(types.SimpleNamespace(register_harnesses=hookimpl(register_harnesses)),
                    "recording")


async def _trace(harness: str, script: Any = None) -> tuple[Any, int]:
    run = await run_scripted(OneSeat(), Task(0, prompt="hello"), script,
                             seats={"assistant": {"harness": harness}})
    assert run.episode.error is None, run.episode.error
    return run.episode.trace("assistant"), len(run.requests)


async def test_a_harness_that_never_records_loses_no_call() -> None:
    trace, served = await _trace("test_forgetful")
    assert served == 2
    assert len(trace.model_calls) == 2
    assert all(isinstance(c, ModelCall) and c.error is None for c in trace.model_calls)
    assert trace.messages[-1].text == "echo: hello / echo: again"


async def test_a_call_recorded_again_is_kept_once() -> None:
    trace, served = await _trace("test_careful")
    assert served == 2 == len(trace.model_calls)
    assert len({id(c) for c in trace.model_calls}) == 2


async def test_calls_made_at_once_are_all_kept() -> None:
    trace, served = await _trace("test_parallel")
    assert served == 3 == len(trace.model_calls)


async def test_a_call_made_past_the_bound_client_is_kept_when_recorded() -> None:
    trace, served = await _trace("test_own_client")
    assert served == 1 == len(trace.model_calls)


async def test_a_failed_call_is_kept_too() -> None:
    with ScriptedModel([]) as model:  # an empty script answers 500
        run = await run_scripted(OneSeat(), Task(0, prompt="hello"), None,
                                 seats={"assistant": {"harness": "test_forgetful",
                                                      "model": {"base_url": model.base_url,
                                                                "max_retries": 0}}})
    calls = run.episode.trace("assistant").model_calls
    assert len(calls) == 2 and all(c.error_type is not None for c in calls)


# -- a harness that hands back the wrong thing ----------------------------------------------------


class Sloppy(Harness):
    """Returns what the test's prompt names instead of a Segment of Messages."""

    name = "test_sloppy"

    async def launch(self, task: Task, ctx: SegmentContext) -> Any:
        await ctx.client.chat(task.messages())
        return {"text": "hi", "none": None, "list": [Message("assistant", "hi")],
                "dicts": Segment([{"role": "assistant", "content": "hi"}]),  # type: ignore[list-item]
                }[str(task.prompt)]


@pytest.mark.parametrize(("returned", "message"), [
    ("text", "returned str from a segment; launch() and resume() return an interplay.Segment"),
    ("none", "returned NoneType from a segment"),
    ("list", "returned list from a segment"),
    ("dicts", "returned a Segment whose messages[0] is a dict; each is an interplay.Message"),
])
async def test_a_harness_that_returns_the_wrong_thing_is_a_harness_error(
        register_plugin: Any, returned: str, message: str) -> None:
    register_plugin(types.SimpleNamespace(
        register_harnesses=hookimpl(lambda register: register(Sloppy))), "sloppy")
    from interplay.run.results import episode_line

    run = await run_scripted(OneSeat(), Task(0, prompt=returned), None,
                             seats={"assistant": {"harness": "test_sloppy"}})
    trace = run.episode.trace("assistant")
    assert trace.error_type == "harness_error" and trace.stop_condition == "error"
    assert (trace.error or "").startswith("harness 'test_sloppy' returned")
    assert message in (trace.error or "")
    assert len(trace.model_calls) == 1  # what it did send is kept
    assert episode_line(run.episode)  # the episode can be written
