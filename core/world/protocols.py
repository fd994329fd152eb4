"""What the world's parts use of the world: the narrow protocols :class:`World` implements.

The parts (the apps, the user's chat, the contacts, the triggers) never import the world; each
is handed the world as one of these protocols, which names everything it reads or asks of it.
Every part reads the clock and the time zone (:class:`WorldTime`); besides:

* an app records its changes (:class:`AppHost`; the world adds who made each, the wake and
  the phase);
* the user's chat stamps what is sent with the wake and the phase, and queues the agent's
  checks (:class:`ChatHost`);
* the contacts draw their delays from the world's seeded generator, queue their answers, note
  what became of each question in the timeline, and hand an answer to an app
  (:class:`ContactsHost`);
* the triggers queue their fires' events and note each fire in the timeline
  (:class:`TriggersHost`); what an action does is the world's, handed to them as a function
  (``Triggers(world, act=..., contact_calls=...)``).

This module is the bottom of world/ with the queue, the timeline and the time helpers: it
imports those and the clock, nothing else of world/.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from interplay.values.clock import Clock
from interplay.world.events import EventQueue
from interplay.world.timeline import Timeline


class WorldTime(Protocol):
    """What every part reads: the world's clock and the time zone its times are written in."""

    @property
    def clock(self) -> Clock: ...

    @property
    def timezone(self) -> str: ...


class AppHost(WorldTime, Protocol):
    """What an app uses: the time, and the changelog its changes go to."""

    def record_change(self, app: str, action: str, data: dict[str, Any]) -> None:
        """Record that app ``app`` made change ``action`` (with ``data``): the world adds who
        made it, the wake and the phase, and the state triggers see it."""
        ...


class ChatHost(WorldTime, Protocol):
    """What the user's chat uses: the time, where the run is (every message is stamped with
    them), and the queue the agent's checks go on."""

    @property
    def wake(self) -> int: ...

    @property
    def phase(self) -> str: ...

    @property
    def queue(self) -> EventQueue: ...


class ContactsHost(WorldTime, Protocol):
    """What the contacts use: the time, the seeded generator their delays are drawn from, the
    queue their answers go on, the timeline, and the apps their answers land in."""

    @property
    def rng(self) -> random.Random: ...

    @property
    def queue(self) -> EventQueue: ...

    @property
    def timeline(self) -> Timeline: ...

    def deliver(self, app: str, sender: str, text: str, **meta: Any) -> None:
        """Hand a contact's answer to app ``app`` (its ``deliver``), as a change made by
        ``others``."""
        ...


class TriggersHost(WorldTime, Protocol):
    """What the triggers use: the time, the queue their fires' events go on, and the
    timeline each fire is noted in."""

    @property
    def queue(self) -> EventQueue: ...

    @property
    def timeline(self) -> Timeline: ...
