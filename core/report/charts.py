"""The report's charts: matplotlib figures drawn as SVG, put in the page as they are (no
script, no network when the page is viewed).

Each function takes plain figures (counts, means, an always_on record) and returns the chart's
``<svg>`` element as Markup, or None when there is nothing to draw or matplotlib is not
installed (``pip install 'interplay[plots]'``; :func:`missing` says so for the page). The run's
text reaches a chart only as labels, which matplotlib's SVG writer escapes; math text is off,
so a ``$`` in a label is a dollar sign. It reads no files.
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import math
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ParamSpec

from markupsafe import Markup

from interplay.log import get_logger

log = get_logger("interplay.report")
P = ParamSpec("P")

HINT = "pip install 'interplay[plots]'"
#: Histogram bins per doubling, for the per-call figures (tokens, seconds).
BINS_PER_DOUBLING = 4
_RC = {"svg.fonttype": "none", "text.parse_math": False, "font.size": 8.5,
       "axes.spines.top": False, "axes.spines.right": False, "axes.titlesize": 9.5,
       "axes.titleweight": "bold", "figure.dpi": 72, "font.family": "sans-serif"}
_COLORS = ("#2f5fd0", "#dc6803", "#157f3b", "#b42318", "#7a5af8", "#667085")


@functools.cache
def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        return None
    del matplotlib
    return Figure


def missing() -> str | None:
    """What to install for charts, or None when they can be drawn."""
    return None if _matplotlib() is not None else HINT


def _figure(width: float = 5.2, height: float = 2.6) -> Any:
    figure_cls = _matplotlib()
    if figure_cls is None:
        return None
    import matplotlib

    with matplotlib.rc_context(_RC):
        # Fixed margins in inches: a constrained layout costs more than drawing the chart.
        fig = figure_cls(figsize=(width, height))
        fig.subplots_adjust(left=0.62 / width, right=1 - 0.15 / width, bottom=0.5 / height,
                            top=1 - 0.3 / height, wspace=0.3)
    return fig


def _svg(fig: Any) -> Markup:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    start = text.find("<svg")
    # The XML declaration, doctype and RDF metadata go: the element is placed inside an
    # HTML page.
    text = text[start:] if start >= 0 else text
    return Markup(re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S))


def _draw(width: float = 5.2, height: float = 2.6) -> Any:
    """A figure and its axes under the report's style, or (None, None)."""
    import matplotlib

    fig = _figure(width, height)
    if fig is None:
        return None, None
    with matplotlib.rc_context(_RC):
        ax = fig.add_subplot()
    return fig, ax


def _drawn(draw: Callable[P, Markup | None]) -> Callable[P, Markup | None]:
    """A chart that cannot be drawn (numbers matplotlib cannot place, say a reward of 1e308)
    is left out of the page, logged by name, rather than failing the report."""

    @functools.wraps(draw)
    def drawn(*args: P.args, **kwargs: P.kwargs) -> Markup | None:
        try:
            with warnings.catch_warnings():
                # numpy's overflow warnings on such numbers: the failure below says it once.
                warnings.simplefilter("ignore", RuntimeWarning)
                return draw(*args, **kwargs)
        except (ArithmeticError, ValueError, TypeError, RuntimeError) as exc:
            log.warning("report.chart_failed", chart=draw.__name__,
                        exception_type=type(exc).__name__)
            return None

    return drawn


def _short(text: str, n: int = 28) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# -- a run ------------------------------------------------------------------------------------


@_drawn
def reward_distribution(counts: Mapping[float, int]) -> Markup | None:
    """Scored episodes by reward: a bar per value when there are few, else a histogram."""
    if not counts or _matplotlib() is None:
        return None
    import matplotlib

    with matplotlib.rc_context(_RC):
        fig, ax = _draw()
        values = sorted(counts)
        if len(values) <= 12:
            labels = [f"{v:.3g}" for v in values]
            ax.bar(labels, [counts[v] for v in values], color=_COLORS[0])
            ax.set_xlabel("reward")
        else:
            ax.hist(values, weights=[counts[v] for v in values], bins=20, color=_COLORS[0])
            ax.set_xlabel("reward")
        ax.set_ylabel("episodes")
        ax.set_title(f"Reward distribution ({sum(counts.values())} scored)")
        return _svg(fig)


@_drawn
def pass_at_k(pass_k: Mapping[str, float], pass_hat: Mapping[str, float],
              threshold: Any) -> Markup | None:
    """pass@k and pass^k over k (for two values of k or more: at k = 1 both are the pass
    rate, which the summary shows)."""
    if len(pass_k) < 2 or _matplotlib() is None:
        return None
    import matplotlib
    from matplotlib import ticker

    with matplotlib.rc_context(_RC):
        fig, ax = _draw()
        ks = sorted(pass_k, key=int)
        xs = [int(k) for k in ks]
        ax.plot(xs, [pass_k[k] for k in ks], marker="o", color=_COLORS[0], label="pass@k")
        ax.plot(xs, [pass_hat.get(k, math.nan) for k in ks], marker="s", color=_COLORS[1],
                label="pass^k")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("k (rollouts)")
        ax.legend(frameon=False)
        ax.set_title(f"pass@k and pass^k (reward ≥ {threshold})")
        return _svg(fig)


@_drawn
def reward_per_task(per_task: Mapping[int, tuple[float, int]]) -> Markup | None:
    """Each task's mean reward (with its scored count): bars for up to 60 tasks, else the
    tasks' means sorted, as a line."""
    if not per_task or _matplotlib() is None:
        return None
    import matplotlib

    with matplotlib.rc_context(_RC):
        fig, ax = _draw()
        tasks = sorted(per_task)
        means = [per_task[t][0] for t in tasks]
        if len(tasks) <= 60:
            ax.bar([str(t) for t in tasks], means, color=_COLORS[2])
            ax.set_xlabel("task")
            if len(tasks) > 20:
                ax.tick_params(axis="x", labelsize=6, labelrotation=90)
        else:
            ax.plot(range(len(means)), sorted(means), color=_COLORS[2])
            ax.set_xlabel(f"tasks, sorted by mean reward ({len(tasks)})")
        ax.set_ylabel("mean reward")
        ax.set_title("Reward per task")
        return _svg(fig)


def log_bin(value: float) -> int:
    """The bin of a positive value on a log scale (BINS_PER_DOUBLING per doubling)."""
    return math.floor(math.log2(value) * BINS_PER_DOUBLING) if value > 0 else -10**6


@_drawn
def per_call(tokens: Mapping[str, Counter[int]], seconds: Mapping[str, Counter[int]],
             ) -> Markup | None:
    """Completion tokens and latency of each model call, per seat (log-binned counts)."""
    if (not tokens and not seconds) or _matplotlib() is None:
        return None
    import matplotlib
    from matplotlib import ticker

    with matplotlib.rc_context(_RC):
        fig = _figure(8.4, 2.6)
        axes = fig.subplots(1, 2)
        for ax, data, what in ((axes[0], tokens, "completion tokens"),
                               (axes[1], seconds, "seconds")):
            for i, seat in enumerate(sorted(data)):
                bins = data[seat]
                lo, hi = min(bins), max(bins)
                xs = [2 ** (b / BINS_PER_DOUBLING) for b in range(lo, hi + 2)]
                ys = [bins.get(b, 0) for b in range(lo, hi + 1)]
                ax.stairs(ys, xs, color=_COLORS[i % len(_COLORS)], label=_short(seat),
                          linewidth=1.5)
            ax.set_xscale("log")
            # Plain numbers: the log axis's default labels are math text, which is off here.
            ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
            ax.set_xlabel(what)
            ax.set_ylabel("model calls")
            if len(data) > 1:
                ax.legend(frameon=False)
        axes[0].set_title("Tokens per model call")
        axes[1].set_title("Latency per model call")
        return _svg(fig)


@_drawn
def errors(by_type: Mapping[str, int]) -> Markup | None:
    """Error episodes by type."""
    if not by_type or _matplotlib() is None:
        return None
    import matplotlib

    with matplotlib.rc_context(_RC):
        kinds = sorted(by_type, key=lambda k: -by_type[k])[:15]
        fig, ax = _draw(5.2, 1.2 + 0.28 * len(kinds))
        fig.subplots_adjust(left=2.0 / 5.2)
        ax.barh([_short(k) for k in kinds][::-1], [by_type[k] for k in kinds][::-1],
                color=_COLORS[3])
        ax.set_xlabel("episodes")
        ax.set_title("Errors by type (not scored)")
        return _svg(fig)


# -- a comparison -----------------------------------------------------------------------------


@_drawn
def task_differences(name: str, a: str, b: str,
                     rows: Sequence[Mapping[str, Any]]) -> Markup | None:
    """Each task's difference (B - A) with its interval, where it has one."""
    if not rows or _matplotlib() is None:
        return None
    import matplotlib

    with matplotlib.rc_context(_RC):
        fig, ax = _draw(8.4, 2.8)
        shown = sorted(rows, key=lambda r: r["diff"])
        xs = list(range(len(shown)))
        ax.axhline(0, color="#98a2b3", linewidth=0.8)
        lows = [r["diff"] - r["ci"][0] if r["ci"] else 0 for r in shown]
        highs = [r["ci"][1] - r["diff"] if r["ci"] else 0 for r in shown]
        ax.errorbar(xs, [r["diff"] for r in shown], yerr=[lows, highs], fmt="o",
                    markersize=3, color=_COLORS[0], ecolor="#98a2b3", elinewidth=1)
        if len(shown) <= 40:
            ax.set_xticks(xs, [str(r["task"]) for r in shown], fontsize=7)
            ax.set_xlabel("task (sorted by difference)")
        else:
            ax.set_xlabel(f"tasks, sorted by difference ({len(shown)})")
        ax.set_ylabel("difference")
        ax.set_title(f"{_short(name, 40)} per task: {_short(b)} - {_short(a)}")
        return _svg(fig)


# -- an always_on episode ---------------------------------------------------------------------


def _local(at: Any) -> dt.datetime | None:
    try:
        value = dt.datetime.fromisoformat(str(at))
    except ValueError:
        return None
    # Drawn in her local time as the record states it (the offset it was written with).
    return value.replace(tzinfo=None)


def _chat(record: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], dt.datetime]]:
    """The entries of the user's chat that have a readable time, with it."""
    for entry in record.get("conversation") or ():
        at = _local(entry.get("at")) if isinstance(entry, Mapping) else None
        if at is not None:
            yield entry, at


def _clock(text: Any) -> dt.time | None:
    """``"HH:MM"`` as a time of day (None when it is not one)."""
    try:
        return dt.time.fromisoformat(str(text))
    except ValueError:
        return None


def nights(awake: Any, first: dt.datetime, last: dt.datetime,
           ) -> list[tuple[dt.datetime, dt.datetime]]:
    """Her nights between ``first`` and ``last`` (local times): each span from the end of her
    awake hours (``awake``: ``["07:00", "23:00"]``, as her schedule records them) to their next
    start, cut to the range; none when she has no awake hours."""
    if not isinstance(awake, list | tuple) or len(awake) != 2:
        return []
    up, down = _clock(awake[0]), _clock(awake[1])
    if up is None or down is None or up == down:
        return []
    out = []
    day = first.date() - dt.timedelta(days=1)
    while day <= last.date():
        start = dt.datetime.combine(day, down)
        end = dt.datetime.combine(day if up > down else day + dt.timedelta(days=1), up)
        if end > first and start < last:
            out.append((max(start, first), min(end, last)))
        day += dt.timedelta(days=1)
        if len(out) > 400:  # a record of years: the first nights are enough to read it
            break
    return out


@_drawn
def always_on_timeline(record: Mapping[str, Any], awake: Any = None) -> Markup | None:
    """The episode's days in the user's local time: the agent's wakes, the world's events
    (alerts, answers, checks), her messages and replies, and what the agent sent her; her
    nights (outside ``awake``, her awake hours) shaded."""
    if not isinstance(record, Mapping) or _matplotlib() is None:
        return None
    rows: dict[str, list[dt.datetime]] = {"agent woke": [], "events": [], "agent -> her": [],
                                          "her messages": []}
    for entry in record.get("timeline") or ():
        if not isinstance(entry, Mapping) or entry.get("kind") != "wake":
            continue
        at = _local(entry.get("at"))
        if at is None:
            continue
        rows["agent woke"].append(at)
        for source in entry.get("sources") or ():
            kind = source.get("kind") if isinstance(source, Mapping) else None
            if kind in ("alert", "contact_reply", "check"):
                due = _local(source.get("due")) or at
                rows["events"].append(due)
    for entry, at in _chat(record):
        if entry.get("from") == "agent":
            rows["agent -> her"].append(at)
        elif entry.get("from") == "user":
            rows["her messages"].append(at)
    if not any(rows.values()):
        return None
    import matplotlib
    import matplotlib.dates as mdates

    with matplotlib.rc_context(_RC):
        fig, ax = _draw(8.4, 2.2)
        fig.subplots_adjust(left=1.0 / 8.4)
        names = list(rows)
        markers = ("|", "D", "o", "s")
        for i, name in enumerate(names):
            if rows[name]:
                ax.scatter(rows[name], [i] * len(rows[name]), marker=markers[i], s=36 if i else 90,
                           color=_COLORS[i], linewidths=1.5, zorder=3)
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(-0.6, len(names) - 0.4)
        seen = [at for row in rows.values() for at in row]
        first, last = min(seen), max(seen)
        # The run's whole span: from its start to its end (or where it ended).
        for at in (_local(record.get("start")), _local(record.get("ended_at"))):
            if at is not None:
                first, last = min(first, at), max(last, at)
        span = max(last - first, dt.timedelta(hours=1))
        left, right = first - span * 0.02, last + span * 0.02
        shaded = nights(awake, left, right)
        for n, (a, b) in enumerate(shaded):
            # Her nights: she is asleep (a message then waits for her morning).
            ax.axvspan(a, b, color="#e4e7ec", alpha=0.7, linewidth=0, zorder=0,
                       label="her night" if n == 0 else None)
        ax.set_xlim(left, right)
        if shaded:
            ax.legend(loc="upper right", fontsize=7, frameon=False)
        locator = mdates.AutoDateLocator(maxticks=10)
        ax.xaxis.set_major_locator(locator)
        # One clock: the 24-hour times the page writes (Mon 07:00), the day where it changes.
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(
            locator, formats=["%Y", "%b", "%a %d", "%H:%M", "%H:%M", "%S.%f"],
            zero_formats=["", "%Y", "%b", "%a %d", "%H:%M", "%H:%M"],
            offset_formats=["", "%Y", "%Y-%m", "%Y-%m-%d", "%Y-%m-%d", "%Y-%m-%d %H:%M"]))
        ax.grid(axis="x", color="#eef1f5")
        zone = record.get("timezone") or ""
        ax.set_title(f"The run in her local time{f' ({zone})' if zone else ''}")
        return _svg(fig)


@_drawn
def reply_latencies(record: Mapping[str, Any]) -> Markup | None:
    """How long each of her messages waited for the agent's next message to her (minutes of
    simulated time), in order."""
    if not isinstance(record, Mapping) or _matplotlib() is None:
        return None
    waits: list[tuple[dt.datetime, float]] = []
    pending: dt.datetime | None = None
    for entry, at in _chat(record):
        if entry.get("from") == "user" and entry.get("kind") in ("opening", "line", "reply"):
            pending = pending or at
        elif entry.get("from") == "agent" and pending is not None:
            waits.append((pending, (at - pending).total_seconds() / 60))
            pending = None
    if not waits:
        return None
    import matplotlib

    with matplotlib.rc_context(_RC):
        fig, ax = _draw(5.2, 2.4)
        xs, ys = list(range(1, len(waits) + 1)), [w for _, w in waits]
        # Stems with a dot: an answer in the same minute shows as a dot on the axis.
        ax.vlines(xs, 0, ys, color=_COLORS[1], linewidth=2)
        ax.scatter(xs, ys, color=_COLORS[1], s=18, zorder=3)
        ax.set_ylim(0, max(1.0, *ys) * 1.15)
        ax.set_xlim(0.4, len(xs) + 0.6)
        ax.set_xticks(xs, [str(x) for x in xs] if len(xs) <= 30 else None)
        ax.set_xlabel("her message, in order")
        ax.set_ylabel("minutes to the agent's reply")
        ax.set_title("Reply latency (simulated time)")
        return _svg(fig)
