"""The progress display of a run on stderr: episodes done of the run's total, the mean reward of
the completed episodes, the error episodes (not scored: the rule of
:mod:`interplay.run.summary`), the rate and the time left.

On a terminal it is a rich progress bar on the last line, fit to the terminal's width (also
after a resize) and redrawn by rich's own thread, so the elapsed time moves while long episodes
run. Whatever the process writes to stdout or stderr meanwhile (log lines, a plugin's prints)
goes through rich, which prints it above the bar, never through it. Elsewhere (a file, a pipe,
CI) it is one plain line every ``interval_s`` (also while no episode finishes: a run of long
episodes shows it is alive) and at the end; so it is on a terminal too when the log is JSON
(``--log-format json``), whose lines a program reads: each line, progress or log, is written
whole, so the two never mix within a line.

It never stops a run: a display that cannot write (a closed pipe) turns itself off.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, ProgressColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Column
from rich.text import Text

from interplay import log as log_mod
from interplay.log import get_logger
from interplay.run.summary import is_error, scored_reward

log = get_logger("interplay.run")


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no such method, or closed
        return False


class _Figures(ProgressColumn):
    """The figures, worked out at each redraw so the rate and the time left stay current."""

    def __init__(self, owner: Progress) -> None:
        # As wide as its text; cut short with an ellipsis only on a terminal too narrow for it.
        super().__init__(table_column=Column(no_wrap=True, overflow="ellipsis"))
        self.owner = owner

    def render(self, task: Any) -> Text:
        return Text(self.owner.figures())


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own points stdout at /dev/null and exits the process: a run must not stop
        # because no one reads its display. Quiet, it writes nothing from here on.
        self.quiet = True


class Progress:
    """Counts finished episodes and shows them (see the module's docstring)."""

    def __init__(self, total: int, *, stream: TextIO | None = None, interval_s: float = 10.0,
                 enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.total = total
        self.enabled = enabled
        # JSON log lines are for a program to read: a bar redrawn among them would leave its
        # cursor moves inside them, and rich would wrap them to the terminal's width; with
        # them the display is plain lines, each written whole, as off a terminal.
        self.tty = enabled and _isatty(self.stream) and not log_mod.json_lines()
        self.interval_s = interval_s
        self.done = 0
        self.new = 0
        self.errors = 0
        self.scored = 0
        self.reward_sum = 0.0
        self.t0 = time.monotonic()
        self._last = -math.inf
        self._shown: int | None = None  # the count the last plain line showed
        self._bar: RichProgress | None = None
        self._task: Any = None
        # Without a terminal: the thread that prints the line every interval, and what it and
        # count() share.
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def add_done(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Count episodes a previous session finished (a resume), without showing anything."""
        for record in records:
            self._add(record)

    def _add(self, record: Mapping[str, Any]) -> None:
        self.done += 1
        if is_error(record):
            self.errors += 1
            return
        reward = scored_reward(record)
        if reward is not None:
            self.reward_sum += reward
            self.scored += 1

    def start(self) -> None:
        """Start the clock, and on a terminal the bar."""
        self.t0 = time.monotonic()
        if not self.tty:
            if self.enabled and self.interval_s > 0:
                self._stop.clear()
                self._ticker = threading.Thread(target=self._tick, name="interplay-progress",
                                                daemon=True)
                self._ticker.start()
            return
        # What is printed above the bar is text as written: no markup ("[debug]" is a log
        # level, not a style), no emoji codes, no highlighting.
        console = _Console(file=self.stream, markup=False, emoji=False, highlight=False,
                           soft_wrap=False)
        self._bar = RichProgress(
            BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=4)),
            _Figures(self), TimeElapsedColumn(),
            console=console, refresh_per_second=4, redirect_stderr=True,
            # What goes to a stdout that is not this terminal never crosses the bar: leave it.
            redirect_stdout=_isatty(sys.stdout), expand=True)
        self._task = self._bar.add_task("episodes", total=self.total or 1, completed=self.done)
        try:
            self._bar.start()
        except OSError:
            self._turn_off()

    def count(self, record: Mapping[str, Any]) -> None:
        """One more finished episode (its slim record)."""
        self._add(record)
        self.new += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            return
        with self._lock:
            now = time.monotonic()
            if now - self._last >= self.interval_s or self.done >= self.total:
                self._last = now
                self._print_line(now)

    def _tick(self) -> None:
        """Print the line whenever an interval passes without one (episodes still running)."""
        while not self._stop.wait(self.interval_s / 4):
            with self._lock:
                now = time.monotonic()
                if self.enabled and now - self._last >= self.interval_s:
                    self._last = now
                    self._print_line(now)

    def figures(self, now: float | None = None) -> str:
        """The display's text: ``7/10 episodes  reward 0.833 (6 scored)  errors 1  ...``."""
        elapsed = (now or time.monotonic()) - self.t0
        rate = self.new / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = "0s" if left <= 0 else f"{left / rate:.0f}s" if rate > 0 else "?"
        reward = f"{self.reward_sum / self.scored:.3f}" if self.scored else "-"
        return (f"{self.done}/{self.total} episodes  reward {reward} ({self.scored} scored)  "
                f"errors {self.errors}  {rate:.2f} ep/s  ETA {eta}")

    def _print_line(self, now: float | None = None) -> None:
        # The bar shows the time elapsed in a column of its own; a plain line says it.
        elapsed = (now or time.monotonic()) - self.t0
        try:
            self.stream.write(f"{self.figures(now)}  {elapsed:.0f}s elapsed\n")
            self.stream.flush()
        except (OSError, ValueError):  # closed, or a pipe whose reader went away
            self._turn_off()
        self._shown = self.done

    def _turn_off(self) -> None:
        if self.enabled:
            log.warning("runner.progress_off")
        self.enabled = False
        bar, self._bar = self._bar, None
        if bar is not None:
            try:
                bar.stop()
            except (OSError, ValueError):
                pass

    def finish(self) -> None:
        """Show the last figures and let the terminal go."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            try:
                self._bar.stop()  # draws the bar a last time and ends its line
            except (OSError, ValueError):
                pass
            self._bar = None
        elif self._shown != self.done:
            self._print_line()
