"""The world's one queue of timed events.

An event is due at a microsecond mark. Events due at the same mark are taken in a fixed order:
first by kind (changes to the world before what reports on them: a trigger's tool action runs
before the alert about it, and deliveries before the reads that could answer them), then by the
event's key, which names its cause (trigger and fire number, contact and call number, message
number) rather than the moment it was queued, and only then by the order of queueing. Two runs
with the same seed therefore take the same events in the same order even when contacts' replies
finish computing in a different order. Cancelled events are skipped when they come up.

It uses nothing of the world: the parts and the always_on loop push to it and take from it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Any

import attrs

#: The order of kinds due at the same mark.
RANKS = {
    "trigger": 0,      # a time trigger comes due
    "fire_step": 1,    # a running fire goes on after its wait
    "contact_reply": 2,
    "user_line": 3,    # a scripted line of the user
    "user_reply": 4,
    "alert": 5,
    "check": 6,
    "read": 7,         # the user reads what reached her
}

#: Kinds that wake the agent.
WAKING = frozenset({"contact_reply", "user_line", "user_reply", "alert", "check"})


@attrs.define(eq=False)
class Event:
    """One timed event. ``data`` is what its handler needs; ``recurring`` marks the next fire
    of a recurring trigger (the loop tells those from things that will happen only once)."""

    due_us: int
    kind: str
    key: tuple[Any, ...] = ()
    data: dict[str, Any] = attrs.Factory(dict)
    recurring: bool = False
    cancelled: bool = False

    @property
    def wakes(self) -> bool:
        return self.kind in WAKING

    @property
    def due(self) -> float:
        return self.due_us / 1_000_000


class EventQueue:
    """A heap of events ordered by (due mark, kind rank, key, queueing order)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, tuple[Any, ...], int, Event]] = []
        self._seq = 0
        self._live = 0
        #: Told of every event pushed (while the agent's turn runs on a running clock, the
        #: loop holds the clock at a new event that is due sooner).
        self.on_push: Callable[[Event], None] | None = None

    def push(self, event: Event) -> Event:
        if event.kind not in RANKS:
            raise ValueError(f"unknown event kind {event.kind!r}")
        self._seq += 1
        heapq.heappush(self._heap, (event.due_us, RANKS[event.kind], _sortable(event.key),
                                    self._seq, event))
        self._live += 1
        if self.on_push is not None:
            self.on_push(event)
        return event

    def cancel(self, event: Event) -> None:
        if not event.cancelled:
            event.cancelled = True
            self._live -= 1

    def _drop_cancelled(self) -> None:
        while self._heap and self._heap[0][4].cancelled:
            heapq.heappop(self._heap)

    def peek(self) -> Event | None:
        self._drop_cancelled()
        return self._heap[0][4] if self._heap else None

    def pop(self) -> Event:
        self._drop_cancelled()
        if not self._heap:
            raise IndexError("the event queue is empty")
        event = heapq.heappop(self._heap)[4]
        self._live -= 1
        return event

    def __len__(self) -> int:
        return self._live

    def __bool__(self) -> bool:
        return self._live > 0

    def __iter__(self) -> Iterator[Event]:
        """The live events in the order they will be taken."""
        return (item[4] for item in sorted(self._heap) if not item[4].cancelled)

    def only_recurring(self) -> bool:
        """Is every live event the next fire of a recurring trigger?"""
        return all(item[4].recurring or item[4].cancelled for item in self._heap)


def _sortable(key: tuple[Any, ...]) -> tuple[Any, ...]:
    # Keys mix names and numbers; each part is tagged so a number never meets a string.
    return tuple((0, part, "") if isinstance(part, int | float) else (1, 0, str(part))
                 for part in key)
