"""The contexts a plugin is handed are protocols at the bottom layer (interplay.contracts.contexts),
and the run's classes implement every member of them: each attribute is there on a live object,
and each method takes every parameter the protocol names, of the same kind. Real objects of a
real episode (no model is called: nothing here takes a turn)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any, Protocol

import pytest

import interplay
from interplay.config.endpoint import Endpoint
from interplay.contracts import contexts
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.usersim import BusyPeriod, PersonSchedule
from interplay.model.client import ModelClient
from interplay.run.agent import Agent, LiveChatSession, LiveSegmentContext, SegmentClient
from interplay.run.episode import LiveEpisodeContext, RunResources
from interplay.values.records import EpisodeInfo, Task
from interplay.values.tools import Tool, tool
from interplay.world import BusyBlock, Schedule


@tool
def ping() -> str:
    """Answers pong."""
    return "pong"


class OneSeat(Env):
    name = "one-seat"
    seats = {"assistant": SeatSpec(harness="null")}

    def tools(self, seat: str, ctx: Any) -> list[Tool]:
        return [ping]


def members(protocol: type) -> dict[str, Any]:
    """A protocol's members, its bases' included: name -> what the protocol says (a function,
    a property, or an annotation's text)."""
    found: dict[str, Any] = {}
    for cls in reversed(protocol.__mro__):
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        found.update(dict.fromkeys(getattr(cls, "__annotations__", {}), "attribute"))
        found.update({name: value for name, value in vars(cls).items()
                      if not name.startswith("_") or name in ("__aenter__", "__aexit__")
                      if callable(value) or isinstance(value, property)})
    return found


def missing(obj: Any, protocol: type) -> list[str]:
    """What ``obj`` lacks of ``protocol``: members not there, methods that are not methods,
    parameters a method does not take (by name and kind)."""
    out = []
    for name, spec in members(protocol).items():
        if not hasattr(obj, name):
            out.append(f"{name}: missing")
            continue
        if not inspect.isfunction(spec):
            continue
        method = getattr(obj, name)
        if not callable(method):
            out.append(f"{name}: not callable")
            continue
        theirs = inspect.signature(method).parameters
        if any(p.kind is p.VAR_KEYWORD for p in theirs.values()) and any(
                p.kind is p.VAR_POSITIONAL for p in theirs.values()):
            continue  # (*args, **kwargs): takes whatever the protocol passes
        for param in list(inspect.signature(spec).parameters.values())[1:]:
            if param.kind is param.VAR_KEYWORD:
                continue
            other = theirs.get(param.name)
            if other is None and not any(p.kind is p.VAR_KEYWORD for p in theirs.values()):
                out.append(f"{name}({param.name}): not taken")
            elif other is not None and other.kind is not param.kind:
                out.append(f"{name}({param.name}): {other.kind.description}, "
                           f"not {param.kind.description}")
            elif other is not None and (other.default is inspect.Parameter.empty) != (
                    param.default is inspect.Parameter.empty):
                out.append(f"{name}({param.name}): required in one, not the other")
    return out


@pytest.fixture
async def live() -> AsyncIterator[dict[str, Any]]:
    resources = RunResources(endpoint=Endpoint(base_url="http://127.0.0.1:9/v1", model="none"))
    env = OneSeat()
    task = Task(idx=0, prompt="hi")
    episode = LiveEpisodeContext(env=env, task=task, resources=resources,
                             info=EpisodeInfo(episode_id="e1", env=env.name, task_idx=0))
    agent = episode.agent("assistant")
    session = agent.chat(task)
    try:
        yield {"episode": episode, "agent": agent, "session": session, "resources": resources}
    finally:
        await session.close()
        await resources.aclose()


async def test_the_run_implements_every_context_a_plugin_is_handed(
        live: dict[str, Any]) -> None:
    session = live["session"]
    assert isinstance(session, LiveChatSession) and isinstance(session.ctx, LiveSegmentContext)
    assert isinstance(live["agent"], Agent)
    checks = {
        "LiveEpisodeContext": (live["episode"], contexts.EpisodeContext),
        "Resources": (live["resources"], contexts.Resources),
        "SeatAgent": (live["agent"], contexts.SeatAgent),
        "LiveChatSession": (session, contexts.ChatSession),
        "LiveSegmentContext": (session.ctx, contexts.SegmentContext),
        "SegmentClient": (session.ctx.client, contexts.SegmentClient),
        "ChatClient": (live["resources"].client(), contexts.ChatClient),
        "ModelRoute": (await session.ctx.route(), contexts.ModelRoute),
        "ToolRoute": (await session.ctx.tool_route(), contexts.ToolRoute),
    }
    assert {name: missing(obj, protocol) for name, (obj, protocol) in checks.items()} == {
        name: [] for name in checks}
    assert isinstance(live["resources"].client(), ModelClient)
    assert isinstance(session.ctx.client, SegmentClient)


def test_a_world_schedule_is_what_a_user_sim_reads() -> None:
    block = BusyBlock(start="09:00", end="17:00", days=["mon"], label="work")
    schedule = Schedule(timezone="Europe/Berlin", awake=("07:00", "23:00"), busy=[block])
    assert missing(schedule, PersonSchedule) == []
    assert missing(block, BusyPeriod) == []


def test_the_check_finds_what_an_implementation_lacks() -> None:
    class Half:
        task = None

        def agent(self, seat: str) -> None:  # no name=
            return None

    assert missing(Half(), contexts.EpisodeContext) == [
        "info: missing", "resources: missing", "clock: missing", "results: missing",
        "metrics: missing", "traces: missing", "store: missing", "rng: missing",
        "agent(name): not taken",
        "sandbox: missing", "fail: missing"]


def test_the_public_names_are_the_protocols() -> None:
    """A plugin types against the contracts, never the run's classes."""
    from interplay.contracts import SegmentClient

    for name in ("EpisodeContext", "SegmentContext", "ChatSession", "SeatAgent"):
        assert getattr(interplay, name) is getattr(contexts, name)
        assert getattr(contexts, name)._is_protocol
    assert SegmentClient is contexts.SegmentClient
    assert contexts.SegmentClient._is_protocol
    assert interplay.Reply is contexts.Reply and interplay.SeatSpec is contexts.SeatSpec
    assert interplay.run.Agent is Agent  # made by a script: the run's class
