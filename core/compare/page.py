"""The page of ``interplay compare --html FILE``: a comparison (plain data from
:func:`interplay.compare.figures.compare`) as one self-contained HTML page, through the
report's templates and charts (autoescape on). It computes nothing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from markupsafe import Markup

from interplay.compare.figures import fmt, interval, side_rows
from interplay.errors import InterplayError
from interplay.report import charts
from interplay.report.page import safe_json, template


def render(result: Mapping[str, Any]) -> str:
    comparisons = []
    for c in result["comparisons"]:
        quantities = []
        for q in c["quantities"]:
            rows = sorted(q["per_task"], key=lambda r: r["task"])
            quantities.append({
                "name": q["name"], "pairs": q["pairs"], "tasks": q["tasks"], "a": fmt(q["a"]),
                "b": fmt(q["b"]), "diff": fmt(q["diff"], signed=True),
                "ci": interval(q["ci"]),
                "p_above": "-" if q["p_above"] is None else f"{q['p_above']:.3f}",
                "per_task": [{"task": r["task"], "pairs": r["pairs"], "a": fmt(r["a"]),
                              "b": fmt(r["b"]), "diff": fmt(r["diff"], signed=True),
                              "ci": interval(r["ci"])} for r in rows],
                "kind": q.get("kind", "reward"),
                # A component's tasks are listed; the charts are the rewards'.
                "chart": None if q.get("kind") == "component" else
                charts.task_differences(q["name"], c["a"], c["b"], rows)})
        comparisons.append({"a": c["a"], "b": c["b"], "quantities": quantities,
                            "config_differences": c["config_differences"]})
    return template("compare.html.j2").render(
        labels=[s["label"] for s in result["runs"]],
        paths=[s["path"] for s in result["runs"]],
        rows=side_rows(result), tasks=result["tasks"], common=result["common_tasks"],
        confidence=f"{result['confidence']:.0%}", resamples=result["resamples"],
        seed=result["seed"], threshold=fmt(result["pass_threshold"]),
        comparisons=comparisons, charts_missing=charts.missing(),
        data=Markup(safe_json(result)))


def write_page(result: Mapping[str, Any], path: Path) -> Path:
    """Write the comparison's page to ``path`` (replaced whole); returns it."""
    page = render(result)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(page.encode("utf-8", "replace"))
        os.replace(tmp, path)
    except OSError as exc:
        raise InterplayError(f"--html {path}: cannot write it ({exc.strerror or exc})") from None
    return path
