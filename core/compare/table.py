"""A comparison as tables on a terminal (rich; plain text where stdout is not one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from interplay.compare.figures import fmt, interval, side_rows

#: Per-task rows shown in the terminal (the largest differences); the page shows them all.
TASKS_SHOWN = 15


def print_comparison(result: Mapping[str, Any], console: Any = None) -> None:
    """The comparison as tables on a terminal (plain text where stdout is not one)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(highlight=False, emoji=False, markup=False, soft_wrap=True)
    labels = [s["label"] for s in result["runs"]]
    table = Table(title=f"{result['tasks']} tasks"
                  f"{' in common' if result['common_tasks'] else ''}; "
                  f"pass threshold {fmt(result['pass_threshold'])}", title_justify="left")
    table.add_column("")
    for label in labels:
        table.add_column(label, justify="right", overflow="fold")
    for name, cells in side_rows(result):
        table.add_row(name, *cells)
    console.print(table)
    pct = f"{result['confidence']:.0%}"
    for c in result["comparisons"]:
        diff = Table(title=f"{c['b']} - {c['a']}: paired by (task, rollout); {pct} interval "
                     f"from {result['resamples']} task resamples (seed {result['seed']})",
                     title_justify="left")
        for col in ("", "pairs", "tasks", c["a"], c["b"], "difference", f"{pct} interval",
                    "P(diff > 0)"):
            diff.add_column(col, justify="left" if not col else "right", overflow="fold")
        for q in c["quantities"]:
            diff.add_row(q["name"], str(q["pairs"]), str(q["tasks"]), fmt(q["a"]), fmt(q["b"]),
                         fmt(q["diff"], signed=True), interval(q["ci"]),
                         "-" if q["p_above"] is None else f"{q['p_above']:.3f}")
        console.print(diff)
        for q in c["quantities"]:
            rows = sorted(q["per_task"], key=lambda r: -abs(r["diff"]))
            if not rows:
                continue
            per = Table(title=f"{q['name']} per task ({min(len(rows), TASKS_SHOWN)} of "
                        f"{len(rows)}, largest differences first)", title_justify="left")
            for col in ("task", "pairs", c["a"], c["b"], "difference", f"{pct} interval"):
                per.add_column(col, justify="right", overflow="fold")
            for r in rows[:TASKS_SHOWN]:
                per.add_row(str(r["task"]), str(r["pairs"]), fmt(r["a"]), fmt(r["b"]),
                            fmt(r["diff"], signed=True), interval(r["ci"]))
            console.print(per)
        if c["config_differences"]:
            conf = Table(title=f"config differences ({c['a']} -> {c['b']})",
                         title_justify="left")
            for col in ("key", c["a"], c["b"]):
                conf.add_column(col, overflow="fold")
            for d in c["config_differences"]:
                conf.add_row(d["key"], d["a"], d["b"])
            console.print(conf)
        else:
            console.print(f"config: no differences ({c['a']} -> {c['b']})")
