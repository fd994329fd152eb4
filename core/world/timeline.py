"""The timeline: everything that happened in an always_on run, in order, as plain JSON.

Each entry is a dict with ``kind``, ``at`` (the task time, ISO-8601 in the user's zone) and
``t`` (seconds since the run's start), then its own fields. Two kinds of entry can come in
floods and are folded: clock jumps (the first ``JUMPS_KEPT`` between two wakes are kept, the
rest become one ``jumps_folded`` entry with their count, span, what they jumped to and the
triggers at work across them) and app changes (the first
``CHANGES_KEPT`` of each wake are kept, the rest are counted in one ``changes_folded`` entry).
The entry kinds are listed in docs/always_on.md.

It uses nothing of the world but the time helpers (:mod:`interplay.world.times`): it is given
its start and time zone, and the parts and the loop write to it.
"""

from __future__ import annotations

from typing import Any

from interplay.world import times

JUMPS_KEPT = 20
CHANGES_KEPT = 200


class Timeline:
    def __init__(self, start: float, timezone: str) -> None:
        self.start = start
        self.timezone = timezone
        self.entries: list[dict[str, Any]] = []
        self.jumps = 0
        self._gap_jumps = 0
        self._jump_fold: dict[str, Any] | None = None
        self._wake_changes: dict[int, int] = {}
        self._change_folds: dict[int, dict[str, Any]] = {}

    def stamp(self, at_us: int) -> dict[str, Any]:
        t = at_us / 1_000_000
        return {"at": times.iso(t, self.timezone), "t": round(t - self.start, 6)}

    def add(self, kind: str, at_us: int, **fields: Any) -> dict[str, Any]:
        entry = {"kind": kind, **self.stamp(at_us), **fields}
        self.entries.append(entry)
        return entry

    def jump(self, from_us: int, to_us: int, to_kind: str,
             at_work: list[str] | None = None) -> None:
        """The clock jumped from one mark to the next event's, with the triggers whose fires
        were still at work across it (``at_work``, kept when there are any)."""
        self.jumps += 1
        self._gap_jumps += 1
        if self._gap_jumps <= JUMPS_KEPT:
            entry = self.add("jump", from_us, to=times.iso(to_us / 1e6, self.timezone),
                             seconds=round((to_us - from_us) / 1e6, 6), next=to_kind)
            if at_work:
                entry["at_work"] = list(at_work)
            return
        if self._jump_fold is None:
            self._jump_fold = self.add("jumps_folded", from_us, count=0, next={})
        fold = self._jump_fold
        fold["count"] += 1
        fold["until"] = times.iso(to_us / 1e6, self.timezone)
        fold["seconds"] = round((to_us - from_us) / 1e6 + fold.get("seconds", 0.0), 6)
        # What each folded jump went to, counted, and the triggers at work across any of them.
        fold["next"][to_kind] = fold["next"].get(to_kind, 0) + 1
        if at_work:
            fold["at_work"] = sorted({*fold.get("at_work", ()), *at_work})

    def gap(self) -> None:
        """A wake starts: the next jumps are counted afresh."""
        self._gap_jumps = 0
        self._jump_fold = None

    def change(self, at_us: int, wake: int, fields: dict[str, Any]) -> None:
        count = self._wake_changes.get(wake, 0) + 1
        self._wake_changes[wake] = count
        if count <= CHANGES_KEPT:
            self.add("change", at_us, wake=wake, **fields)
            return
        fold = self._change_folds.get(wake)
        if fold is None:
            fold = self._change_folds[wake] = self.add("changes_folded", at_us, wake=wake,
                                                       count=0)
        fold["count"] += 1
        fold["until"] = times.iso(at_us / 1e6, self.timezone)

    @property
    def changes(self) -> int:
        return sum(self._wake_changes.values())
