"""The ``interplay export`` subcommand: its options, and the lines it prints."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from interplay.errors import InterplayError
from interplay.export.files import ExportOptions, export
from interplay.export.plugged import BUILTIN_FORMATS, export_plugged


def add_export(sub: Any) -> None:
    p = sub.add_parser(
        "export", help="turn a results folder into training data (SFT, RL, a dataset)",
        description="Stream the episodes of RUN (a results folder, or its episodes.jsonl) into "
        "a file trainers read, keeping trainable traces only and never an episode that ended "
        "in an error. sft: one line per trace, its messages (OpenAI chat shape, tool calls and "
        "results included) and tools. rl: one line per model call (--unit call) or per trace "
        "(--unit trace: completions and what came between them in one sequence, with a loss "
        "mask), with token ids, logprobs, the reward, the group (task and seat) and its "
        "group-normalized advantage; needs a run with token capture. hf: a dataset folder "
        "(datasets.load_from_disk) of sft or rl rows (--rows).")
    p.add_argument("run", metavar="RUN", help="results folder of `interplay eval`")
    p.add_argument("--format", required=True, metavar="FORMAT",
                   help="what to write: sft, rl, hf, or a format a plugin registers "
                   "(`interplay list export-formats`): inspect (an Inspect eval log, with "
                   "interplay[inspect]), tau2 with interplay-tau2")
    p.add_argument("-o", "--output", metavar="PATH", help="the file (the folder, for hf) to "
                   "write; default: RUN/sft.jsonl, RUN/rl-calls.jsonl, RUN/rl-traces.jsonl, "
                   "RUN/hf-sft, ...")
    p.add_argument("--unit", choices=("call", "trace"),
                   help="RL rows: one per model call (default) or one per trace")
    p.add_argument("--rows", choices=("sft", "rl"),
                   help="with --format hf: the rows the dataset holds (default sft)")
    p.add_argument("--seat", action="append", default=[], metavar="SEAT",
                   help="only this seat (or agent); repeatable (default: every trainable seat)")
    p.add_argument("--min-reward", type=float, metavar="X",
                   help="only traces whose reward is at least X")
    p.add_argument("--completed-only", action="store_true",
                   help="only traces that finished: none cut short by a turn cap, a timeout, "
                   "an error or a model call's token limit")
    p.add_argument("--best-of-group", action="store_true",
                   help="only the best trace of each task and seat (highest reward, then "
                   "lowest rollout) among those the other filters keep")
    p.add_argument("--advantage", choices=("std", "mean"),
                   help="RL advantage: (reward - group mean) / group std (default), or "
                   "reward - group mean")
    p.add_argument("--meta", action="store_true",
                   help="SFT lines also carry meta: episode, task, rollout, seat, reward")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    if args.format not in BUILTIN_FORMATS:
        return _cmd_export_plugged(args)
    if args.rows is not None and args.format != "hf":
        raise InterplayError("--rows goes with --format hf")
    rl = args.format == "rl" or (args.format == "hf" and args.rows == "rl")
    for flag, value in (("--unit", args.unit), ("--advantage", args.advantage)):
        if value is not None and not rl:
            raise InterplayError(f"{flag} goes with RL rows: --format rl, or --format hf "
                                 f"--rows rl")
    if args.meta and args.format != "sft":
        raise InterplayError("--meta goes with --format sft (RL rows and datasets carry the "
                             "meta always)")
    options = ExportOptions(format=args.format, unit=args.unit or "call",
                            rows=args.rows or "sft", seats=tuple(args.seat),
                            min_reward=args.min_reward, completed_only=args.completed_only,
                            best_of_group=args.best_of_group,
                            advantage=args.advantage or "std", meta=args.meta)
    result = export(args.run, args.output, options)
    if options.kind == "rl" and options.unit == "call":
        what = f"{result.rows} rows ({result.traces} traces of {result.episodes} episodes)"
    else:
        what = f"{result.traces} traces (of {result.episodes} episodes)"
    print(f"exported {what} to {result.output}")
    if result.skipped:
        left = ", ".join(f"{reason} ({n})" for reason, n in
                         sorted(result.skipped.items(), key=lambda item: -item[1]))
        print(f"left out: {left}", file=sys.stderr)
    for note in result.notes:
        print(note, file=sys.stderr)
    return 0


def _cmd_export_plugged(args: argparse.Namespace) -> int:
    """A format a plugin registered: it takes the run whole; the kernel's row options are not
    its."""
    given = [flag for flag, value in (
        ("--unit", args.unit), ("--rows", args.rows), ("--seat", args.seat),
        ("--min-reward", args.min_reward), ("--completed-only", args.completed_only),
        ("--best-of-group", args.best_of_group), ("--advantage", args.advantage),
        ("--meta", args.meta)) if value]
    if given:
        raise InterplayError(f"{given[0]} goes with --format {'/'.join(BUILTIN_FORMATS)}; "
                             f"--format {args.format} writes the run as it is")
    out, written = export_plugged(args.format, args.run, args.output)
    print(f"exported {written.episodes} episodes to {out}")
    if written.skipped:
        left = ", ".join(f"{reason} ({n})" for reason, n in
                         sorted(written.skipped.items(), key=lambda item: -item[1]))
        print(f"left out: {left}", file=sys.stderr)
    return 0
