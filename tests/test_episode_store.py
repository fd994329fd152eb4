"""An episode's own state (``ctx.store``): one object per class per episode, the same from its
step, ``Env.tools``, its seat's harness and its verifier; two episodes that run at once each see
their own; gone when the episode ends. Real episodes, no model: the seat's harness answers
itself."""

from __future__ import annotations

import asyncio
import gc
import re
import types
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from interplay import (
    Env,
    Episode,
    EpisodeContext,
    Harness,
    Message,
    Reward,
    SeatSpec,
    Segment,
    SegmentContext,
    Step,
    Task,
    Tool,
    Verifier,
    hookimpl,
    tool,
)
from interplay.config.endpoint import Endpoint
from interplay.contracts import EpisodeStore
from interplay.run.episode import RunResources, run_episode
from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


@attrs.define(eq=False)
class Tally:
    """What one episode counts: who made it, what reached it, in order, and its count."""

    owner: str = ""
    seen: list[str] = attrs.Factory(list)
    n: int = 0


@attrs.define(eq=False)
class Made:
    """A state made with an argument: ``put``, never ``get``-made."""

    label: str


class Bumper(Harness):
    """Calls the seat's ``bump`` tool with the task's prompt as the amount and answers the
    count, reading the episode's tally from the segment's context."""

    name = "test_bumper"

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        store = ctx.store
        assert store is not None
        tally = store.get(Tally)
        tally.seen.append("harness")
        await asyncio.sleep(0)  # the other episode's turn runs here too
        await ctx.call_tool("bump", {"by": int(str(task.prompt))}, call_id="c1")
        return Segment(messages=[Message("assistant", str(tally.n))])


class Counting(Step):
    """Makes the episode's tally, waits until every episode running made its own, then opens
    the seat (``Env.tools`` runs then) and takes one turn."""

    name = "test_counting"
    #: Episodes that must have made their tally before any goes on (set by a test).
    gate: ClassVar[asyncio.Barrier | None] = None
    #: Every store a step saw, kept past the episode (a test reads them after).
    stores: ClassVar[list[EpisodeStore]] = []

    async def run(self, ctx: EpisodeContext) -> None:
        tally = ctx.store.get(Tally)
        tally.owner = ctx.info.episode_id
        tally.seen.append("step")
        type(self).stores.append(ctx.store)
        if self.gate is not None:
            await self.gate.wait()
        trace = await ctx.agent("assistant").run(ctx.task)
        assert ctx.store.get(Tally) is tally
        ctx.results["count"] = trace.messages[-1].text


class TallyScore(Verifier):
    """The episode's tally as its reward, with who made it and what reached it."""

    name = "test_tally"

    def check(self, steps: Sequence[Step]) -> list[str]:
        return []

    async def score(self, episode: Episode, ctx: EpisodeContext) -> Reward:
        tally = ctx.store.get(Tally)
        tally.seen.append("verifier")
        return Reward(self.name, float(tally.n),
                      info={"owner": tally.owner, "seen": list(tally.seen)})


class Counter(Env):
    name = "test_counter"
    seats: ClassVar[dict[str, SeatSpec]] = {"assistant": SeatSpec(harness="test_bumper")}

    def tasks(self) -> list[Task]:
        return [Task(0, prompt="2"), Task(1, prompt="5")]

    def steps(self) -> list[Step]:
        return [Counting()]

    def verifiers(self) -> list[Verifier]:
        return [TallyScore()]

    def tools(self, seat: str, ctx: EpisodeContext) -> list[Tool]:
        tally = ctx.store.get(Tally)
        tally.seen.append("tools")

        @tool
        def bump(by: int) -> str:
            """Add to the episode's count; returns it."""
            tally.n += by
            return str(tally.n)

        return [bump]


@pytest.fixture(autouse=True)
def bumper(register_plugin: Any) -> None:
    register_plugin(types.SimpleNamespace(
        register_harnesses=hookimpl(lambda register: register(Bumper))), "episode_store")
    Counting.gate = None
    Counting.stores = []


@pytest.fixture
async def resources() -> Any:
    # No model is called: the harness answers itself.
    made = RunResources(endpoint=Endpoint(base_url="http://127.0.0.1:9/v1", model="none"))
    try:
        yield made
    finally:
        await made.aclose()


def test_one_object_per_class_and_instance_made_on_first_use() -> None:
    store = EpisodeStore()
    assert store.find(Tally) is None
    tally = store.get(Tally)
    assert store.get(Tally) is tally and store.find(Tally) is tally
    red, blue = store.get(Tally, instance="red"), store.get(Tally, instance="blue")
    assert len({id(tally), id(red), id(blue)}) == 3
    assert store.find(Tally, instance="green") is None
    made = store.put(Made("x"))
    assert store.get(Made) is made and store.find(Made) is made
    again = store.put(Made("y"))  # in place of the one before
    assert store.get(Made) is again and again.label == "y"
    with pytest.raises(TypeError):
        store.get(Made, instance="other")  # Made() needs its label: put one
    store.clear()
    assert store.find(Tally) is None and store.find(Made) is None
    assert store.get(Tally) is not tally


async def test_two_episodes_at_once_each_see_their_own_state(resources: Any) -> None:
    env = Counter()
    Counting.gate = asyncio.Barrier(2)  # both made their tally before either goes on
    first, second = await asyncio.gather(
        *(run_episode(env, task, resources=resources) for task in env.tasks()))
    for episode, amount in ((first, 2), (second, 5)):
        assert episode.error is None, episode.error
        assert episode.results["count"] == str(amount)
        (reward,) = episode.rewards
        assert reward.value == amount
        # One object from the step to the verifier: Env.tools, the harness's segment and the
        # verifier reached the tally the step made, and no other episode's.
        assert reward.info == {"owner": episode.info.episode_id,
                               "seen": ["step", "tools", "harness", "verifier"]}
    assert first.info.episode_id != second.info.episode_id


async def test_the_state_is_dropped_when_the_episode_ends(resources: Any) -> None:
    env = Counter()
    (task, _) = env.tasks()
    episode = await run_episode(env, task, resources=resources)
    assert episode.error is None, episode.error
    (store,) = Counting.stores
    # A store still held past its episode is empty: whoever keeps the context keeps nothing.
    assert store.find(Tally) is None
    held = store.get(Tally)  # made again on a store the run is done with: a fresh one
    assert held.n == 0 and held.seen == []


async def test_nothing_keeps_an_episodes_state_once_it_ended(resources: Any) -> None:
    env = Counter()
    (task, _) = env.tasks()
    kept: list[weakref.ref[Tally]] = []

    class Watching(Counting):
        async def run(self, ctx: EpisodeContext) -> None:
            kept.append(weakref.ref(ctx.store.get(Tally)))
            await super().run(ctx)

    env.steps = lambda: [Watching()]  # type: ignore[method-assign]
    episode = await run_episode(env, task, resources=resources)
    assert episode.error is None and episode.rewards[0].value == 2
    Counting.stores = []
    gc.collect()
    assert kept and kept[0]() is None  # no module, no env, no run holds it


def _docs_example() -> dict[str, Any]:
    """The names docs/plugins.md's per-episode state example defines, run as written."""
    text = DOCS.read_text().split("<!-- episode-store-example -->", 1)[1]
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block is not None
    scope: dict[str, Any] = {}
    exec(compile(block.group(1), "docs/plugins.md", "exec", dont_inherit=True), scope)
    return scope


async def test_the_docs_example_keeps_each_episodes_board() -> None:
    """docs/plugins.md, "Per-episode state": the step's board is the one its seat's tool
    plays on, two episodes at once on one scripted model, each with its own."""
    scope = _docs_example()

    def answer(request: ScriptedRequest) -> ScriptedReply | str:
        played = [m["content"] for m in request.messages if m["role"] == "tool"]
        return f"Played: {played[0]}." if played else ScriptedReply.tool_call(
            "move", {"square": "b2"})

    env = scope["Game"]()
    (task,) = env.tasks()
    runs = await asyncio.gather(*(run_scripted(env, task, answer, rollout=r)
                                  for r in range(2)))
    for run in runs:
        assert run.episode.error is None, run.episode.error
        assert run.episode.results["moves"] == ["b2"]  # one move each: neither saw the other's
        assert run.episode.traces[0].messages[-1].text == "Played: b2."
