"""``interplay generate KIND``: a scenario kind's tasks written as a taskset file.

Task ``i`` of ``-n N`` is the kind's scenario of seed ``--seed + i``, one JSON line each, the
same bytes for the same seeds and knobs (``--set days=14``: the kind's settings,
``interplay describe scenario-kinds KIND``). The file is a taskset like any other: ``interplay
eval always-on-generated --set env.taskset=FILE`` runs it, ``interplay.values.load_jsonl`` reads it,
and a trainer can take it as it is. Written to a file beside the output and moved into place
once whole, so a failed run leaves what was there.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from interplay.config import loading as config
from interplay.contracts.scenario import ScenarioKind, checked, generate_tasks, task_line
from interplay.errors import InterplayError
from interplay.plugins import host as plugins


def make_kind(name: str, settings: dict[str, Any], path: str | None = None) -> ScenarioKind:
    """The scenario kind ``name`` with its knobs (set at ``path``: the kind's name unless
    given), checked."""
    cls = plugins.get("scenario-kinds", name)
    return checked(cls(config.structure(settings, cls.Config, path=path or name)))


def write(kind: ScenarioKind, output: Path, *, seed: int, count: int) -> int:
    """Write ``count`` tasks of ``kind`` from ``seed`` to ``output``; the bytes written."""
    output.parent.mkdir(parents=True, exist_ok=True)
    # Made as the run's files and exports are (open's mode, under the umask), not mkstemp's
    # 0600: a taskset is shared with whoever runs it.
    tmp = str(output.parent / f".{output.name}.{uuid.uuid4().hex}")
    try:
        with open(tmp, "x", encoding="utf-8", newline="\n") as fh:
            for task in generate_tasks(kind, seed=seed, count=count):
                fh.write(task_line(task) + "\n")
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return output.stat().st_size


def add_generate(sub: Any) -> None:
    p = sub.add_parser(
        "generate", help="write a scenario kind's always_on tasks (seeded) as a taskset file",
        description="Write N always_on tasks of a scenario kind (`interplay list "
        "scenario-kinds`), task i from seed SEED + i, as JSON lines: the same seeds and knobs "
        "give the same bytes. Run them with `interplay eval always-on-generated --set "
        "env.taskset=FILE`.")
    p.add_argument("kind", help="the scenario kind, e.g. errands")
    p.add_argument("-n", type=int, default=100, dest="count", help="tasks (default 100)")
    p.add_argument("-s", "--seed", type=int, default=0, help="the first task's seed "
                   "(default 0)")
    p.add_argument("-o", "--output", help="the file to write (default: KIND.jsonl; - for "
                   "standard output)")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="one of the kind's knobs, e.g. --set days=14 (repeatable)")
    p.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise InterplayError(f"-n: at least 1 task, got {args.count}")
    kind = make_kind(args.kind, config.apply_overrides({}, args.overrides))
    if args.output == "-":
        for task in generate_tasks(kind, seed=args.seed, count=args.count):
            sys.stdout.write(task_line(task) + "\n")
        return 0
    output = Path(args.output or f"{args.kind}.jsonl")
    size = write(kind, output, seed=args.seed, count=args.count)
    print(f"wrote {args.count} {args.kind} tasks (seeds {args.seed}-"
          f"{args.seed + args.count - 1}) to {output} ({size / 1e6:.1f} MB)", file=sys.stderr)
    return 0
