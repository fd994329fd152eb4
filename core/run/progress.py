"""The progress display of a run on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Episodes done / total, mean reward so far, errors, rate and ETA on stderr.

    On a terminal one line is redrawn in place (at most ten times a second); otherwise a plain
    line is printed every ``interval_s`` and at the end, so logs stay readable.
    """

    def __init__(self, total: int, *, stream: TextIO | None = None, done: int = 0,
                 interval_s: float = 10.0, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.total = total
        self.done = done
        self.new = 0
        self.errors = 0
        self.reward_sum = 0.0
        self.scored = 0
        self.enabled = enabled
        self.tty = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = 0.1 if self.tty else interval_s
        self.t0 = time.monotonic()
        self._last = 0.0

    def count(self, error_type: str | None, reward: float | None) -> None:
        """One more finished episode, with its error type and reward."""
        self.done += 1
        self.new += 1
        if error_type is not None:
            self.errors += 1
        if reward is not None:
            self.reward_sum += reward
            self.scored += 1
        now = time.monotonic()
        if now - self._last >= self.interval_s or self.done >= self.total:
            self._last = now
            self.draw(now)

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.monotonic()) - self.t0
        rate = self.new / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        reward = f"{self.reward_sum / self.scored:.3f}" if self.scored else "-"
        pct = self.done / self.total if self.total else 1.0
        text = (f"{self.done}/{self.total} episodes  reward {reward}  errors {self.errors}  "
                f"{rate:.2f} ep/s  ETA {eta}")
        if self.tty:
            filled = int(pct * 24)
            text = f"[{'#' * filled}{'.' * (24 - filled)}] {text}"
        return text

    def draw(self, now: float | None = None) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.line(now))
        else:
            self.stream.write(self.line(now) + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.draw()
            self.stream.write("\n")
            self.stream.flush()
        elif self.done < self.total or self.new == 0:
            self.draw()

