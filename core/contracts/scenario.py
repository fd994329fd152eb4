"""The ScenarioKind contract: what makes always_on tasks from a seed.

A scenario kind turns a seed and a few knobs (its ``Config``: days, events, contacts,
difficulty, ...) into one task whose world, user and goals are data: the same seed and knobs
give the same task, byte for byte, so a thousand seeds are a taskset like any other
(``interplay generate KIND -n 1000``, or an env that names the kind). A generated task is a
:class:`~interplay.values.records.Task` whose ``prompt`` is her opening request and whose ``info``
holds:

- ``world``: the scenario as a scenario file writes it (``start``, ``end``, ``timezone``,
  ``apps``, ``contacts``, ``triggers``, ``lines``, ...; docs/always_on.md), without ``user``;
- ``user``: who she is, as the ``user_sim`` step's settings (``name``, ``timezone``,
  ``awake``, ``busy``, ``reply_delays``, ...);
- ``goals``: what the agent should achieve, each a verifier row (``{"kind": ..., settings}``)
  of a registered verifier that checks it from the run's records, with an ``id``;
- ``scenario``: what she wants, for the user sim that plays her;
- ``generator``: ``{"kind", "seed", "settings"}``, what made it.

Kinds are registered with the ``register_scenario_kinds`` hook; the builtin one is
``errands``. This module owns the contract and turning a kind's tasks into JSON lines; what a
kind puts in a world is the kind's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

import attrs
import cattrs

from interplay.config.loading import settle
from interplay.contracts.harness import NoConfig
from interplay.errors import InterplayError
from interplay.values.records import Task

#: The keys of a generated task's ``info`` that the always_on step and the goals read.
INFO_KEYS = ("world", "user", "goals", "scenario", "generator")


class ScenarioKind:
    """Base class of every scenario kind. Subclass it and register it with
    ``register_scenario_kinds``; ``Config`` (an attrs class, a docstring per field) holds its
    knobs."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig

    def __init__(self, config: Any = None) -> None:
        self.config = settle(config, self, "scenario kind")

    def check(self) -> list[str]:
        """Problems with the knobs (empty when they make scenarios), each naming its knob."""
        return []

    def generate(self, seed: int) -> Task:
        """The task of ``seed``: the same seed and knobs give the same task. Its ``idx`` is
        set by :func:`generate_tasks`; ``info`` holds the keys :data:`INFO_KEYS` names."""
        raise NotImplementedError(f"scenario kind {self.name!r} does not implement generate()")


def checked(kind: ScenarioKind) -> ScenarioKind:
    """``kind``, once its knobs are checked; a one-line InterplayError naming every problem
    otherwise."""
    problems = kind.check()
    if problems:
        raise InterplayError(f"scenario kind {kind.name!r}: {'; '.join(problems)}")
    return kind


def generate_tasks(kind: ScenarioKind, *, seed: int = 0, count: int = 1) -> Iterator[Task]:
    """Tasks ``0 .. count-1``, task ``i`` generated from seed ``seed + i``."""
    if count < 0:
        raise InterplayError(f"count must be 0 or more, got {count}")
    for i in range(count):
        yield attrs.evolve(kind.generate(seed + i), idx=i)


_plain = cattrs.Converter()


def task_line(task: Task) -> str:
    """One task as a JSON line a taskset file holds (no newline), its keys sorted at every
    level, so the same task is always the same bytes."""
    row = {k: v for k, v in _plain.unstructure(task).items() if not k.startswith("_")}
    return json.dumps(row, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)
