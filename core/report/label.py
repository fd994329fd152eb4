"""A run's label: a person's name for a results folder ("baseline, before the prompt fix"),
kept in ``DIR/label.txt`` and shown by the report, the view's list and pages, and compare.
``interplay label DIR TEXT`` sets it (``--clear`` removes it; without TEXT it is printed).

This module owns the label's file; it reads and writes nothing else.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from interplay.errors import InterplayError

LABEL_FILE = "label.txt"
#: The longest label kept, in characters.
LABEL_CHARS = 200


def clean(text: str) -> str:
    """``text`` as a label: one line (runs of whitespace and control characters as one
    space), at most :data:`LABEL_CHARS`."""
    line = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(line.split())[:LABEL_CHARS]


def read_label(folder: str | Path) -> str:
    """The label of the run in ``folder`` ("" when it has none or it cannot be read)."""
    try:
        with (Path(folder) / LABEL_FILE).open("rb") as fh:
            raw = fh.read(LABEL_CHARS * 4 + 4)
    except OSError:
        return ""
    return clean(raw.decode("utf-8", "replace"))


def write_label(folder: str | Path, text: str | None) -> str:
    """Set (``text``) or remove (None) the label of the run in ``folder``; the label kept."""
    from interplay.run.results import CONFIG_FILE, EPISODES_FILE

    out = Path(folder)
    if not (out / EPISODES_FILE).is_file() and not (out / CONFIG_FILE).is_file():
        raise InterplayError(f"{out}: not a results folder (no {EPISODES_FILE}); label an -o "
                             f"folder of `interplay eval`")
    path = out / LABEL_FILE
    if text is None:
        path.unlink(missing_ok=True)
        return ""
    label = clean(text)
    if not label:
        raise InterplayError("label: give some text, or --clear to remove the label")
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(label + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise InterplayError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    return label


def add_label(sub: Any) -> None:
    p = sub.add_parser("label", help="name a run (shown by report, view and compare)",
                       description="Give a results folder a label of a person's choosing "
                       "(one line, up to 200 characters), kept in DIR/label.txt: the report's "
                       "header, the runs listed by `interplay view` and the columns of "
                       "`interplay compare` show it. Without TEXT, the label is printed.")
    p.add_argument("dir", help="the results folder")
    p.add_argument("text", nargs="?", help="the label")
    p.add_argument("--clear", action="store_true", help="remove the label")
    p.set_defaults(func=cmd_label)


def cmd_label(args: argparse.Namespace) -> int:
    if args.clear and args.text is not None:
        raise InterplayError("label: give TEXT or --clear, not both")
    if args.clear:
        write_label(args.dir, None)
        print(f"label: removed from {args.dir}")
    elif args.text is None:
        print(read_label(args.dir))
    else:
        print(f"label: {write_label(args.dir, args.text)}")
    return 0
