"""The command: ``interplay compare RUN_A RUN_B [...]``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from interplay.compare.figures import RESAMPLES, compare, load_run
from interplay.compare.table import print_comparison
from interplay.errors import InterplayError


def add_compare(sub: Any) -> None:
    p = sub.add_parser(
        "compare", help="set runs of one env side by side: paired reward differences with "
        "intervals, pass@k, tokens, errors and config differences",
        description="Compare each run with the first: per-task and overall reward "
        "differences over episodes paired by (task, rollout), with a seeded paired bootstrap "
        "interval over tasks; pass@k side by side, tokens, errors, and the config differences "
        "that may explain them.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="results folders (the first is the "
                   "baseline)")
    p.add_argument("--common-tasks", action="store_true", help="compare the tasks the runs "
                   "share (same index and content) rather than refuse runs of other tasks or "
                   "envs")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    p.add_argument("--resamples", type=int, default=RESAMPLES,
                   help=f"bootstrap resamples (default {RESAMPLES})")
    p.add_argument("--html", metavar="FILE", help="also write the comparison as a "
                   "self-contained HTML page")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=cmd_compare)


def _labels(paths: Sequence[str]) -> list[str]:
    names = [Path(p).name or str(p) for p in paths]
    if len(set(names)) == len(names):
        return names
    return [str(p) for p in paths]


def cmd_compare(args: argparse.Namespace) -> int:
    if len(args.runs) < 2:
        raise InterplayError("compare needs two runs or more: interplay compare RUN_A RUN_B")
    runs = [load_run(p, label) for p, label in zip(args.runs, _labels(args.runs), strict=True)]
    result = compare(runs, common=args.common_tasks, seed=args.seed, resamples=args.resamples)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        print_comparison(result)
    if args.html:
        from interplay.compare.page import write_page

        print(f"page: {write_page(result, Path(args.html))}")
    return 0
