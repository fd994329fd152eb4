"""Script files for the scripted model: the replies it serves, read from a JSON array or a JSON
Lines file, as ``python -m interplay.testing.scripted --script FILE`` takes them. Owns the
file's format only; serving is :mod:`interplay.testing.scripted`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interplay.config.loading import structure
from interplay.errors import InterplayError
from interplay.testing.script import ScriptedReply


def reply_from_json(data: Any) -> ScriptedReply:
    """A reply from a script file's entry: a string (its text) or an object with any of
    ``content``, ``tool_calls`` (a list of ``name``, ``arguments``, ``call_id``), ``output``,
    ``latency_s``, ``status``, ``retry_after``, ``hangs``, ``drops``, ``malformed``,
    ``finish_reason``, ``ignores_stream``. Raises InterplayError naming the key that is
    wrong."""
    if isinstance(data, str):
        return ScriptedReply.text(data)
    if isinstance(data, dict) and "malformed" in data:
        data = {("is_malformed" if k == "malformed" else k): v for k, v in data.items()}
    return structure(data, ScriptedReply, path="reply")


def read_script(path: str | Path) -> list[ScriptedReply]:
    """The replies in a script file: a JSON array, or JSON Lines (one reply per line; blank
    lines are skipped). See :func:`reply_from_json` for a reply's form. A problem
    raises InterplayError naming the file and the line or entry."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InterplayError(f"{p}: cannot be read: {exc}") from None
    if text.lstrip().startswith("["):
        try:
            entries = json.loads(text)
        except ValueError as exc:
            raise InterplayError(f"{p}: not valid JSON: {exc}") from None
        where = [f"{p} entry {i + 1}" for i in range(len(entries))]
    else:
        entries, where = [], []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append(json.loads(line))
            except ValueError as exc:
                raise InterplayError(f"{p} line {n}: not valid JSON: {exc}") from None
            where.append(f"{p} line {n}")
    replies = []
    for entry, at in zip(entries, where, strict=True):
        try:
            replies.append(reply_from_json(entry))
        except InterplayError as exc:
            raise InterplayError(f"{at}: {exc.message}") from None
    if not replies:
        raise InterplayError(f"{p}: the script has no replies")
    return replies
