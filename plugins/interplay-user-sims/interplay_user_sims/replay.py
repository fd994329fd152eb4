"""``replay``: the user's side of a stored episode, replayed against a new assistant.

The episode is found in an earlier run's ``episodes.jsonl`` (``episodes``: the file or the
results folder holding it) by the task's index and the rollout (the episode's own, or the one
``rollout`` names). Missing, the episode is refused in one line naming the file and the key.

- From a relay run (``results["relay"]["user_lines"]``): the first line opens the chat, each
  reply gets the next line, and after the last she is done (as she was, or because the lines
  ran out).
- From an always_on run (``results["always_on"]``): each read gets her next recorded reply
  (or done), written at its recorded task time when that is still ahead (``Answer.at``), else
  after her reply delay; a read past her recorded replies is answered with nothing, and the
  wrap-up with her recorded wrap-up. Her opening and scripted lines come from the scenario
  again, not from here. In the relay, an always_on record's opening opens the chat.

It never calls a model: a regression test for assistants, the user held fixed.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay import Answer, EpisodeContext, InterplayError, Person, UserSim
from interplay.contracts import Read
from interplay.run import whole_record


@attrs.define
class ReplayConfig:
    #: The earlier run: its ``episodes.jsonl``, or the results folder holding it.
    episodes: str = ""
    #: The rollout to replay; None: the episode's own.
    rollout: int | None = None


@attrs.frozen
class Recorded:
    """One line of hers from the stored episode."""

    text: str
    at: float | None = None
    done: bool = False
    reply_to: int | None = None


@attrs.frozen
class Side:
    """Her side of one stored episode (shared by every episode that replays it)."""

    opening: str | None
    lines: list[Recorded]
    done: bool
    done_reason: str = ""
    wrap_up: str | None = None
    #: The relay's: her words that came with her done (recorded, never passed on).
    closing_line: str = ""


def episodes_path(setting: str) -> Path:
    if not setting:
        raise InterplayError("replay needs the earlier run: set episodes = \"path/to/run\" (its "
                             "results folder or episodes.jsonl)")
    path = Path(setting)
    if path.is_dir():
        path = path / "episodes.jsonl"
    if not path.is_file():
        raise InterplayError(f"replay: {path} does not exist; set episodes to an earlier run's "
                             f"results folder or its episodes.jsonl")
    return path


def find_side(path: Path, task_idx: int, rollout: int) -> Side:
    """Her side of the stored episode of (task, rollout) in ``path``; refused, naming the file
    and the key, when there is none or it holds no user side."""
    stat = path.stat()
    sides = _sides(path, stat.st_mtime_ns, stat.st_size)
    if (task_idx, rollout) not in sides:
        raise InterplayError(f"replay: {path} has no episode for task_idx={task_idx}, "
                             f"rollout={rollout}; replay a run of the same taskset, or set "
                             f"user_sim_settings.rollout")
    side = sides[task_idx, rollout]
    if side is None:
        raise InterplayError(f"replay: the episode task_idx={task_idx}, rollout={rollout} in "
                             f"{path} has no user side to replay (neither "
                             f"results.relay.user_lines nor results.always_on)")
    return side


@functools.lru_cache(maxsize=4)
def _sides(path: Path, mtime_ns: int, size: int) -> dict[tuple[Any, Any], Side | None]:
    """Her side of every episode in ``path`` by (task_idx, rollout), None for one without a
    user side: the file is read once per version of it, however many episodes replay it. A
    resumed run may hold an earlier attempt too: the last one counts."""
    sides: dict[tuple[Any, Any], Side | None] = {}
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                episode = json.loads(line)
                info = episode["info"]
                key = (info.get("task_idx"), info.get("rollout"))
            except (ValueError, KeyError, TypeError, AttributeError):
                raise InterplayError(f"replay: {path} line {n} is not an episode record") \
                    from None
            # A long episode's records are in its side file, beside the episodes file.
            episode = whole_record(episode, path)
            try:
                sides[key] = side_of(episode)
            except (ValueError, KeyError, TypeError, AttributeError):
                sides[key] = None  # a user side this cannot read is none to replay
    return sides


def side_of(episode: Mapping[str, Any]) -> Side | None:
    """Her side of one stored episode; None when it has none."""
    results = episode.get("results") or {}
    if "always_on" in results:
        return _always_on_side(results["always_on"])
    relay = results.get("relay")
    if isinstance(relay, Mapping) and "user_lines" in relay:
        lines = [Recorded(str(t)) for t in relay["user_lines"]]
        return Side(opening=lines[0].text if lines else None, lines=lines[1:],
                    done=relay.get("ended_by") == "user_done",
                    done_reason=str(relay.get("done_reason") or ""),
                    closing_line=str(relay.get("closing_line") or ""))
    return None


def _always_on_side(record: Mapping[str, Any]) -> Side:
    opening = next((e["text"] for e in record.get("conversation", ())
                    if e.get("from") == "user" and e.get("kind") == "opening"), None)
    lines, wrap_up = [], None
    for reply in record.get("replies", ()):
        outcome = reply.get("outcome")
        if outcome == "wrap_up":
            wrap_up = str(reply.get("text") or "")
        elif outcome in ("replied", "done"):
            at = reply.get("wrote_at") or reply.get("read_at")
            lines.append(Recorded(str(reply.get("text") or ""),
                                  at=dt.datetime.fromisoformat(at).timestamp() if at else None,
                                  done=bool(reply.get("done")), reply_to=reply.get("reply_to")))
    done = any(line.done for line in lines)
    return Side(opening=opening, lines=lines, done=done, wrap_up=wrap_up)


class ReplayUser(UserSim):
    """The user's side of a stored episode (matched by task and rollout), replayed."""

    name = "replay"
    Config: ClassVar[type] = ReplayConfig

    def configure(self, settings: Mapping[str, Any] | Any) -> None:
        super().configure(settings)
        # A missing file is refused when the env loads, not in every episode.
        self.path = episodes_path(self.config.episodes)

    async def setup(self, person: Person, ctx: EpisodeContext) -> None:
        await super().setup(person, ctx)
        rollout = ctx.info.rollout if self.config.rollout is None else self.config.rollout
        self.side = find_side(self.path, ctx.task.idx, rollout)
        self.next = 0
        self.opened = False

    async def answer(self, read: Read) -> Answer:
        side = self.side
        if not read.local_time:  # the relay
            if not self.opened:
                self.opened = True
                if side.opening is not None:
                    return Answer(side.opening)
            return self._next(read, relay=True)
        if read.last_read:
            return Answer(side.wrap_up or "", nothing=side.wrap_up is None)
        return self._next(read, relay=False)

    def _next(self, read: Read, *, relay: bool) -> Answer:
        side = self.side
        if self.next >= len(side.lines):
            # Her lines ran out: the relay cannot wait, so she is done; always_on waits.
            return Answer(side.closing_line, done=True, done_reason=side.done_reason) \
                if relay else Answer("", nothing=True)
        line = side.lines[self.next]
        self.next += 1
        if relay:
            return Answer(line.text) if line.text else Answer(
                side.closing_line, done=True, done_reason=side.done_reason)
        numbers = {m.number for m in read.messages}
        return Answer(line.text, done=line.done, at=line.at,
                      replying_to=line.reply_to if line.reply_to in numbers else None)
