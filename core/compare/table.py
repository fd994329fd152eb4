"""A comparison as tables on a terminal (rich; plain text where stdout is not one).

The runs are named by letter in the tables (A, B, ...), each letter's run said once above
them, so that the tables keep to 80 columns however long a run's label is: a label in every
header folded into pieces ("baseline / -run-lon / g-label") on a standard terminal.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from interplay.compare.figures import fmt, interval, side_rows

#: Per-task rows shown in the terminal (the largest differences); the page shows them all.
TASKS_SHOWN = 15


def letters(count: int) -> list[str]:
    """The runs' names in the tables: A, B, ... Z, then AA, AB, ..."""
    upper = string.ascii_uppercase
    return [upper[i] if i < 26 else upper[i // 26 - 1] + upper[i % 26] for i in range(count)]


def print_comparison(result: Mapping[str, Any], console: Any = None) -> None:
    """The comparison as tables on a terminal (plain text where stdout is not one)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console(highlight=False, emoji=False, markup=False, soft_wrap=True)

    def table(title: str, *columns: str, left: tuple[str, ...] = ("",)) -> Any:
        out = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in columns:
            out.add_column(col, justify="left" if col in left else "right", overflow="fold")
        return out

    runs = result["runs"]
    names = letters(len(runs))
    name_of = {run["label"]: name for run, name in zip(runs, names, strict=True)}
    for run, name in zip(runs, names, strict=True):
        where = "" if run["path"] == run["label"] else f" ({run['path']})"
        console.print(f"{name}: {run['label']}{where}")
    sides = table(f"{result['tasks']} tasks{' in common' if result['common_tasks'] else ''}; "
                  f"pass threshold {fmt(result['pass_threshold'])}", "", *names)
    for label, cells in side_rows(result):
        sides.add_row(label, *cells)
    console.print(sides)
    pct = f"{result['confidence']:.0%}"
    for c in result["comparisons"]:
        a, b = name_of[c["a"]], name_of[c["b"]]
        diff = table(f"{b} - {a}: paired by (task, rollout); {pct} interval from "
                     f"{result['resamples']} task resamples (seed {result['seed']})",
                     "", "pairs (tasks)", a, b, f"{b} - {a}", f"{pct} interval", "P(>0)")
        parts = [q for q in c["quantities"] if q.get("kind") == "component"]
        for q in c["quantities"]:
            if q.get("kind") != "component":
                diff.add_row(q["name"], f"{q['pairs']} ({q['tasks']})", fmt(q["a"]),
                             fmt(q["b"]), fmt(q["diff"], signed=True), interval(q["ci"]),
                             "-" if q["p_above"] is None else f"{q['p_above']:.3f}")
        console.print(diff)
        if parts:
            # Which verifier a change of the reward comes from, one row each.
            each = table(f"reward components, {b} - {a}: paired as above", "component",
                         "pairs (tasks)", a, b, f"{b} - {a}", f"{pct} interval", "P(>0)",
                         left=("component",))
            for q in parts:
                each.add_row(q["name"].split(" ", 1)[1], f"{q['pairs']} ({q['tasks']})",
                             fmt(q["a"]), fmt(q["b"]), fmt(q["diff"], signed=True),
                             interval(q["ci"]),
                             "-" if q["p_above"] is None else f"{q['p_above']:.3f}")
            console.print(each)
        for q in c["quantities"]:
            rows = sorted(q["per_task"], key=lambda r: -abs(r["diff"]))
            if not rows or q.get("kind") == "component":
                continue  # a component's tasks are on the page (--html)
            per = table(f"{q['name']} per task ({min(len(rows), TASKS_SHOWN)} of {len(rows)}, "
                        f"largest differences first)", "task", "pairs", a, b, f"{b} - {a}",
                        f"{pct} interval", left=())
            for r in rows[:TASKS_SHOWN]:
                per.add_row(str(r["task"]), str(r["pairs"]), fmt(r["a"]), fmt(r["b"]),
                            fmt(r["diff"], signed=True), interval(r["ci"]))
            console.print(per)
        if c["config_differences"]:
            conf = table(f"config differences ({a} -> {b})", "key", a, b, left=("key", a, b))
            for d in c["config_differences"]:
                conf.add_row(d["key"], d["a"], d["b"])
            console.print(conf)
        else:
            console.print(f"config: no differences ({a} -> {b})")
