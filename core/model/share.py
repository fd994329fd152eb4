"""How the traces that call one endpoint share its connections: a fair queue of slots.

A :class:`ModelClient <interplay.model.client.ModelClient>` holds one pool of connections to
its endpoint (``max_connections``: the run's ``-c`` times its seats), shared by every trace of
the run that calls that endpoint. Each attempt of a call holds one slot of :class:`FairShare`
from sending its request to the end of its answer. While slots are free a call takes one at
once; when none is, the calls wait in a queue per trace and each slot freed goes to the
waiting trace that holds the fewest (the one waiting longest among equals), so a trace with
twenty requests in flight (a program's parallel calls, or a hostile one's) delays another
trace's single call by one slot's turn, not by the twenty. No trace holds more than all
slots but one (one is kept for the others), unless the pool has one slot.

Whose call it is is :data:`PARTY` (a context variable holding the id of the trace's route, set
by the interception server for the requests it forwards, or of the trace, set by a segment's
client: an id, so that a context a call's tasks copy keeps nothing alive); a call made outside
any is a party of its own. This module owns the queue; it sends nothing and logs
nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque

#: Whose calls these are (the id of a trace's route or record); None: each call is a party of
#: its own.
PARTY: contextvars.ContextVar[object | None] = contextvars.ContextVar("interplay_party",
                                                                      default=None)


class FairShare:
    """``slots`` connections shared among parties: :meth:`slot` holds one for a block."""

    __slots__ = ("_held", "_waiting", "slots", "used")

    def __init__(self, slots: int) -> None:
        self.slots = max(1, int(slots))
        self.used = 0
        #: Slots each party holds now.
        self._held: dict[object, int] = {}
        #: The parties waiting, in the order they began to wait, each with its waiters.
        self._waiting: dict[object, deque[asyncio.Future[None]]] = {}

    def held(self, party: object) -> int:
        return self._held.get(party, 0)

    @property
    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def _may_take(self, party: object) -> bool:
        # All slots but one per party: another trace's call never waits behind one trace's
        # whole pool (a held connection cannot be taken back).
        cap = self.slots - 1 if self.slots > 1 else 1
        return self.used < self.slots and self.held(party) < cap

    def slot(self, party: object | None = None) -> _Slot:
        """``async with share.slot():`` holds one slot for ``party`` (None: :data:`PARTY`,
        else a party of its own) while the block runs, waiting for it in the fair queue when
        none is free."""
        if party is None:
            party = PARTY.get()
        return _Slot(self, object() if party is None else party)

    async def _acquire(self, party: object) -> None:
        if not self._waiting and self._may_take(party):
            self._take(party)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(party, deque()).append(waiter)
        self._grant()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release(party)  # granted as it was cancelled: hand the slot on
            else:
                queue = self._waiting.get(party)
                if queue is not None and waiter in queue:
                    queue.remove(waiter)
                    if not queue:
                        del self._waiting[party]
            raise

    def _take(self, party: object) -> None:
        self.used += 1
        self._held[party] = self._held.get(party, 0) + 1

    def _release(self, party: object) -> None:
        self.used -= 1
        left = self._held[party] - 1
        if left:
            self._held[party] = left
        else:
            del self._held[party]
        self._grant()

    def _grant(self) -> None:
        """Hand free slots to the waiting parties holding the fewest, longest waiting first."""
        while self.used < self.slots and self._waiting:
            ready = [p for p in self._waiting if self._may_take(p)]
            if not ready:
                return
            party = min(ready, key=self.held)
            queue = self._waiting.pop(party)
            waiter = queue.popleft()
            if queue:
                self._waiting[party] = queue  # to the back: its next call waits its turn
            if waiter.done():
                continue
            self._take(party)
            waiter.set_result(None)


class _Slot:
    """One slot held for a block (a class, not a generator: it is on every call's path)."""

    __slots__ = ("party", "share")

    def __init__(self, share: FairShare, party: object) -> None:
        self.share, self.party = share, party

    async def __aenter__(self) -> None:
        await self.share._acquire(self.party)

    async def __aexit__(self, *exc: object) -> None:
        self.share._release(self.party)
