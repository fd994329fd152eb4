"""The virtual clock: simulated time injected into tools, triggers and user sims.

``now`` advances at ``rate`` simulated seconds per real second from the last anchor; rate 0
freezes it; ``advance`` and ``set_time`` jump. Global time is never patched: code that needs
simulated time takes a Clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Clock:
    def __init__(self, start: float | None = None, *, rate: float = 1.0,
                 real: Callable[[], float] = time.monotonic) -> None:
        self._real = real
        self._anchor_real = real()
        self._anchor_sim = time.time() if start is None else float(start)
        self._rate = float(rate)

    @property
    def rate(self) -> float:
        return self._rate

    def now(self) -> float:
        """Simulated seconds since the epoch."""
        return self._anchor_sim + (self._real() - self._anchor_real) * self._rate

    def _reanchor(self) -> None:
        self._anchor_sim = self.now()
        self._anchor_real = self._real()

    def set_rate(self, rate: float) -> None:
        if rate < 0:
            raise ValueError("clock rate must be >= 0")
        self._reanchor()
        self._rate = float(rate)

    def freeze(self) -> None:
        self.set_rate(0.0)

    def set_time(self, t: float) -> None:
        self._anchor_sim = float(t)
        self._anchor_real = self._real()

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._reanchor()
        self._anchor_sim += seconds
