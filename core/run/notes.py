"""An always_on episode's private notes: what its agent wrote that the user never reads (each
wake's plain replies, recorded as the wake's ``private_note`` in the record's timeline), and
whether a message of a transcript is one. Whatever shows a transcript (the report and
``interplay view``, the Inspect export, an SFT export's ``meta``) marks those messages
private, as the wake table does.

Reads an episode record as its line holds it (dicts), defensively; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def keeps_private_notes(episode: Any) -> bool:
    """Whether an episode record is one whose agent's plain replies are private notes (an
    always_on episode's), whether or not it wrote any."""
    results = episode.get("results") if isinstance(episode, Mapping) else None
    return isinstance(results, Mapping) and isinstance(results.get("always_on"), Mapping)


def private_notes(episode: Any) -> list[str]:
    """The private notes of an episode record's always_on wakes (none for any other
    episode)."""
    results = episode.get("results") if isinstance(episode, Mapping) else None
    return wake_notes(results.get("always_on") if isinstance(results, Mapping) else None)


def wake_notes(always_on: Any) -> list[str]:
    """The private notes of an always_on record's wakes (``results["always_on"]``; none for
    anything else)."""
    timeline = always_on.get("timeline") if isinstance(always_on, Mapping) else None
    if not isinstance(timeline, list | tuple):
        return []
    return [note.strip() for e in timeline if isinstance(e, Mapping)
            and e.get("kind") == "wake" and isinstance(note := e.get("private_note"), str)
            and note.strip()]


def is_private_note(text: str, notes: Sequence[str]) -> bool:
    """Whether an assistant's text is one of the private notes (a wake's notes are recorded
    joined by blank lines)."""
    text = text.strip()
    if not text:
        return False
    for note in notes:
        if text == note or note.startswith(text + "\n\n") or note.endswith("\n\n" + text) \
                or f"\n\n{text}\n\n" in note:
            return True
    return False
