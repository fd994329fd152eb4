"""Reading episodes.jsonl back: every line checked as an episode record, a torn last line (a
write cut short by a kill) told apart from a line something else wrote, one record per (task,
rollout) with a later line superseding an earlier one, whole or slim, in memory
(:func:`read_episodes`) or streamed in bounded memory (:func:`iter_episodes`).

This module owns reading and checking the lines; it must not write the file (save cutting a
torn last line off when asked to repair it) or put a split line back together
(:func:`~interplay.run.side_files.whole_record` does).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

from interplay._plumbing import codec as _codec
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.run.slim import pair_of, slim_record

log = get_logger("interplay.run")


def read_episodes(path: Path, *, repair: bool = False,
                  slim: bool = False) -> list[dict[str, Any]]:
    """The episodes in a results file, as dicts (``slim``: only what the summary needs, so a
    large file never sits in memory whole), one per (task, rollout): a later line supersedes
    an earlier one (an episode run again with ``--retry-errors``). Read line by line.

    Every line must be an episode record whose fields the run reads have the types an episode
    line holds; any other line is refused with its number, since a results file that something
    else wrote to must not be half-read or cut. The one line let go is a torn last line: a
    write cut short by a kill, told by the newline it lacks (each line is written with its
    newline last). It is skipped, and with ``repair`` cut off the file so appends start on a
    clean line."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for _, record, checked in _lines(path, repair=repair):
        info = checked["info"]
        out[(info["task_idx"], info["rollout"])] = checked if slim else record
    return list(out.values())


def iter_episodes(path: Path, *, slim: bool = False,
                  order: Literal["file", "pair"] = "file") -> Iterator[dict[str, Any]]:
    """The episodes of :func:`read_episodes`, streamed: each record is yielded as it is read
    and dropped after, so what a reader of any size of results file keeps is one record and
    an offset per (task, rollout). Records come in file order (the order episodes finished),
    or with ``order="pair"`` by (task, rollout); one per (task, rollout), the latest line for
    each; a torn last line is skipped, never repaired.

    The file is read twice: once to find each pair's latest line, once to yield those. The
    first reading takes a line's pair from its head when the line begins as
    :func:`~interplay.run.side_files.episode_line` writes it (the info object first), and
    parses and checks any other line whole, so a line that is not an episode record is refused
    before anything is yielded; the second parses and checks the lines it yields (and those
    superseded), so every line is checked as :func:`read_episodes` checks it and parsed once,
    not twice. A line that begins as an episode line and breaks further on is refused when it
    is reached.
    """
    # (offset, line number, whether it was checked whole) of each pair's latest line.
    latest: dict[tuple[int, int], tuple[int, int, bool]] = {}
    unchecked: dict[int, int] = {}  # superseded lines read by their head only: offset: number
    first: int | None = None
    for number, start, raw in _raw_lines(path):
        first = start if first is None else first
        head = _HEAD.match(raw) if raw.endswith(b"\n") else None
        if head is not None:
            pair, whole = (int(head[1]), int(head[2])), False
        else:
            found = _checked(path, number, start, raw, first)
            if found is None:  # a torn last line
                break
            pair, whole = pair_of(found[1]), True
        before = latest.get(pair)
        if before is not None and not before[2]:
            unchecked[before[0]] = before[1]
        latest[pair] = (start, number, whole)
    if not latest or first is None:
        return
    if order == "pair":
        lines = [latest[pair][:2] for pair in sorted(latest)]
        del latest
        with _open(path) as fh:
            for start, number in [*lines, *sorted(unchecked.items())]:
                fh.seek(start)
                found = _checked(path, number, start, fh.readline(), first)
                if found is not None and start not in unchecked:
                    yield found[1] if slim else found[0]
        return
    wanted = {start for start, _, _ in latest.values()}
    del latest
    for number, start, raw in _raw_lines(path):
        if start in wanted:
            found = _checked(path, number, start, raw, first)
            if found is None:
                return
            yield found[1] if slim else found[0]
        elif start in unchecked:
            _checked(path, number, start, raw, first)


#: The head of a line as :func:`~interplay.run.side_files.episode_line` writes it: the
#: episode's info first, its task_idx and rollout in place.
_HEAD = re.compile(rb'\{"info":\{"episode_id":"(?:[^"\\]|\\.)*","env":"(?:[^"\\]|\\.)*",'
                   rb'"task_idx":(-?\d+),"rollout":(\d+)[,}]')


#: A results file's lines run to tens of KB: read in large blocks, reading line by line is
#: several times faster than through the default 8 KB buffer.
_READ_BUFFER = 1 << 20


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb", buffering=_READ_BUFFER)
    except OSError as exc:
        raise InterplayError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _raw_lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """Each line of a results file that is not blank: (its number, its offset, its bytes)."""
    if not path.exists():
        return
    pos = 0
    with _open(path) as fh:
        for number, raw in enumerate(fh, start=1):
            start, pos = pos, pos + len(raw)
            # A line is blank only if it begins blank: strip() would copy every long line.
            if raw[:1] not in b" \t\r\n" or raw.strip():
                yield number, start, raw


def _checked(path: Path, number: int, start: int, raw: bytes,
             first: int) -> tuple[Any, dict[str, Any]] | None:
    """A line parsed and checked: (the record, its :func:`slim_record`); None for a torn last
    line (told by the newline it lacks), which is skipped; InterplayError for any other line
    that is not an episode record. ``first`` is the offset of the file's first line that is
    not blank: when that line is not an episode record and no run's config.json is beside the
    file, it is not a results file at all (another file named by mistake), and the error says
    so rather than how to mend a line."""
    try:
        record = _codec.loads(raw)
    except ValueError:
        # Only the last line can lack its newline.
        if raw.endswith(b"\n"):
            raise _not_a_record(path, number, start == first, "is not JSON") from None
        log.warning("runner.torn_line_skipped", output_path=str(path), line=number)
        return None
    try:
        return record, slim_record(record)
    except ValueError as exc:
        raise _not_a_record(path, number, start == first,
                            f"is not an episode record ({exc})") from None


def _not_a_record(path: Path, number: int, first: bool, why: str) -> InterplayError:
    # A run's episodes are episodes.jsonl beside its config.json (written before any
    # episode): a file that begins with something else and is not that was named by mistake.
    if first and (path.name != "episodes.jsonl"
                  or not (path.parent / "config.json").exists()):
        return InterplayError(f"{path} is not an episodes file of `interplay eval`: its first "
                              f"line {why}; name a results folder (or its episodes.jsonl)")
    return InterplayError(f"{path}: line {number} {why}; something else wrote to this "
                          "episodes file: remove or mend the line, then run the command again")



def _lines(path: Path, *, repair: bool = False) -> Iterator[tuple[int, Any, dict[str, Any]]]:
    """Each episode line of a results file as (its offset, the record, its
    :func:`slim_record`), checked as :func:`read_episodes` says."""
    first: int | None = None
    for number, start, raw in _raw_lines(path):
        first = start if first is None else first
        found = _checked(path, number, start, raw, first)
        if found is None:
            if repair:
                with path.open("r+b") as cut:
                    cut.truncate(start)
            return
        yield start, found[0], found[1]
        if repair and not raw.endswith(b"\n"):
            # A complete record without its newline: end the line before appending.
            with path.open("ab") as tail:
                tail.write(b"\n")
