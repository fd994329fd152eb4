"""``user-sim-tools``: the user-sim relay with a tool-using assistant (the tau-bench shape).

A small shop's order database is the simulated world. The ``init_state`` step copies the task's
starting world (``info.world``) into ``ctx.results["world"]`` fresh for every episode; the
assistant's tools (``find_order``, ``cancel_order``, ``change_address``) read and change that
copy in place, mid-conversation. The modeled user (the ``relay`` step with a user sim) brings
the scenario, e.g. "cancel order #1042, you ordered it by mistake". The ``state_match`` verifier
scores the tools' effect, not the words: the final world must equal the task's
``info.expected_world`` (so a wrong cancellation, or a change the policy forbids, fails).

Policy the tools enforce: only a ``pending`` order can be cancelled, with a reason of
``no longer needed`` or ``ordered by mistake``; the address of an order can be changed while it
is ``pending`` or ``processing``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import attrs

from interplay.builtin_envs.envs import data_file
from interplay.builtin_envs.steps import Relay, RelayConfig
from interplay.builtin_verifiers.state import StateMatch, StateMatchConfig
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError
from interplay.values import taskset
from interplay.values.records import Task
from interplay.values.taskset import TasksetSource
from interplay.values.tools import Tool, tool

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


@attrs.define
class InitStateConfig:
    """The ``init_state`` step's settings: where the world goes, and where it comes from."""

    #: Where the world lives in ``ctx.results``.
    key: str = "state"
    #: The task ``info`` field holding the starting world (deep-copied per episode).
    source: str = "initial_state"


class InitState(Step):
    """Put a fresh copy of the task's starting world into ``ctx.results[key]``."""

    name = "init_state"
    Config: ClassVar[type] = InitStateConfig

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        # The key is configurable, so what this step writes is known per instance.
        self.writes = frozenset({self.config.key})  # type: ignore[misc]

    def seats(self) -> set[str]:
        return set()

    def check(self, steps: Sequence[Step]) -> list[str]:
        if not self.config.key:
            return ["key is empty; name the results key the world goes to, e.g. key = \"world\""]
        return []

    async def run(self, ctx: EpisodeContext) -> None:
        cfg: InitStateConfig = self.config
        if cfg.source not in ctx.task.info:
            raise InterplayError(f"task {ctx.task.idx} has no info.{cfg.source} to start the "
                                 f"world from; add it to the taskset row")
        ctx.results[cfg.key] = copy.deepcopy(ctx.task.info[cfg.source])


def _order_id(order_id: Any) -> str:
    return str(order_id).strip().lstrip("#").strip()


def shop_tools(world: dict[str, Any]) -> list[Tool]:
    """The assistant's tools, bound to one episode's world (changed in place)."""
    orders: dict[str, dict[str, Any]] = world.setdefault("orders", {})

    def lookup(order_id: str) -> tuple[str, dict[str, Any]]:
        oid = _order_id(order_id)
        if oid not in orders:
            raise ValueError(f"there is no order #{oid}")
        return oid, orders[oid]

    @tool
    def find_order(order_id: str) -> str:
        """Look up an order by its id (e.g. "1042"): status, items and shipping address."""
        oid, order = lookup(order_id)
        return json.dumps({"order_id": oid, **order})

    @tool
    def cancel_order(order_id: str, reason: str) -> str:
        """Cancel a pending order. reason must be "no longer needed" or "ordered by mistake"."""
        oid, order = lookup(order_id)
        why = reason.strip().lower()
        if why not in CANCEL_REASONS:
            raise ValueError(f"reason must be one of: {', '.join(CANCEL_REASONS)}")
        if order.get("status") != "pending":
            raise ValueError(f"order #{oid} is {order.get('status')} and cannot be cancelled")
        order["status"] = "cancelled"
        order["cancel_reason"] = why
        return json.dumps({"order_id": oid, "status": "cancelled"})

    @tool
    def change_address(order_id: str, address: str) -> str:
        """Change the shipping address of an order that has not shipped yet."""
        oid, order = lookup(order_id)
        if order.get("status") not in ("pending", "processing"):
            raise ValueError(f"order #{oid} is {order.get('status')}; its address can no longer "
                             f"change")
        new = " ".join(address.split())
        if not new:
            raise ValueError("the address is empty")
        order["address"] = new
        return json.dumps({"order_id": oid, "address": new})

    return [find_order, cancel_order, change_address]


@attrs.define
class UserSimToolsConfig:
    #: The tasks to run instead of the env's builtin ones: a JSONL file of task rows, a file or
    #: folder the datasets library reads, or a dataset table ([env.taskset] with dataset = ...); a
    #: relative path is read from the working folder. Empty keeps the builtin tasks.
    taskset: TasksetSource = ""
    #: The relay step's settings (env.relay.*); the shop's orders take up to 8 assistant turns.
    relay: RelayConfig = attrs.Factory(lambda: RelayConfig(max_turns=8))


class UserSimToolsEnv(Env):
    """A modeled user asks a shop's tool-using support assistant to change an order.

    Scored on the final order database (``state_match``), not on what was said.
    """

    name = "user-sim-tools"
    Config: ClassVar[type] = UserSimToolsConfig
    seats = {"assistant": SeatSpec(harness="chat"),
             "user": SeatSpec(harness="null", trainable=False)}

    def tasks(self) -> Iterable[Task]:
        return taskset.load(self.config.taskset, data_file("user_sim_tools.jsonl"))

    def steps(self) -> list[Step]:
        return [InitState(InitStateConfig(key="world", source="world")),
                Relay(self.config.relay)]

    def verifiers(self) -> list[Verifier]:
        return [StateMatch(StateMatchConfig(key="world", expected="expected_world"))]

    def tools(self, seat: str, ctx: EpisodeContext) -> list[Tool]:
        if seat != "assistant":
            return []
        if "world" not in ctx.results:
            raise InterplayError(f"env {self.name!r}: the assistant's tools need "
                                 "ctx.results['world']; run the init_state step before any step "
                                 "that opens the assistant seat")
        return shop_tools(ctx.results["world"])
