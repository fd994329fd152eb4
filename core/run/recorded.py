"""An episode record read once into typed values (:func:`read_episode`): what the report,
``interplay view``, the export and the comparison read of an episode, from its line in
episodes.jsonl with its side file put back (:func:`~interplay.run.side_files.whole_record`)
or from a record in memory.

Typed: the episode's head (which episode, its reward, error, metrics and wall time), each
seat's trace (its seat, agent, harness, model, whether it is training data, how it stopped,
its reward and error) and every reward (:class:`RecordedReward`), and what they say together:
the reward that counts (:attr:`RecordedEpisode.scored_reward`), each seat's reward, the reward
components, the turns. Kept as the line holds them, as JSON objects: a transcript's messages,
model calls and tool runs, the task, the env's results and the sandbox's record, which each
reader writes in a shape of its own (the page's rows, OpenAI chat messages, token ids) and
reads defensively where it reads them.

Tolerant as the page has always been (:mod:`interplay.values.plain`): a record may come from
an older interplay, a plugin or a hand, so a field of an unexpected shape reads as absent (an
empty mapping or sequence, no value) or, where it is text, as text; an older record's trace
that names only its agent is that agent's seat. The summary reads its own checked slice of a
line (:mod:`interplay.run.slim`), which also crosses between processes.

This module owns reading a record; it must not read a file, write one, or format a value for
a page.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import attrs

from interplay.run.notes import wake_notes
from interplay.run.slim import counted_reward, finite_number
from interplay.values.plain import as_map, as_seq, as_text

#: Reward components an episode's :meth:`~RecordedEpisode.components` names at most (an env
#: with more is shown by its first ones).
COMPONENTS_KEPT = 64


def _number(value: Any) -> float | None:
    """``value`` when it is a number (an int stays an int; a bool is not one), else None."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _objects(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The entries of a list as objects (an entry of another kind reads as an empty one, so
    that what counts them counts it)."""
    entries = as_seq(value)
    # A list the kernel wrote holds only objects: taken whole, its entries' types told apart
    # without a Python call per entry (an export reads millions of messages).
    if set(map(type, entries)) <= {dict}:
        return tuple(entries)
    return tuple(as_map(v) for v in entries)


@attrs.frozen
class RecordedReward:
    """One verifier's reward as the record holds it."""

    name: str
    #: Its score: a number as the record holds it (a bool a verifier gave stays one); None
    #: when absent or not a number.
    value: float | None
    weight: float | None
    #: The seat it scores ("": the episode).
    seat: str
    reason: str
    #: What more the verifier recorded (a judge's ``criteria``).
    info: Mapping[str, Any]

    @classmethod
    def read(cls, record: Any) -> RecordedReward:
        r = as_map(record)
        value, weight = r.get("value"), r.get("weight")
        return cls(name=as_text(r.get("name")),
                   value=value if isinstance(value, int | float) else None,
                   weight=weight if isinstance(weight, int | float) else None,
                   seat=as_text(r.get("seat")), reason=as_text(r.get("reason")),
                   info=as_map(r.get("info")))


@attrs.frozen
class RecordedTrace:
    """One seat's trace as the record holds it."""

    #: The seat it filled (a record from before seats were recorded: its agent's name).
    seat: str
    #: The agent's name, as the record holds it (None when it holds none).
    agent: str | None
    harness: str
    model: str
    #: Whether it is training data: True or False as the record says, None when it does not
    #: say (the export takes such a trace, the page does not mark it trainable).
    trainable: bool | None
    stop_condition: str | None
    #: Its reward, a number as the record holds it; None when unscored.
    reward: float | None
    error_type: str
    error: str
    #: Its messages in the Chat Completions shape (a value that is not a list of messages is
    #: one message of no known role holding it, so that it is shown rather than dropped).
    messages: tuple[Mapping[str, Any], ...]
    model_calls: tuple[Mapping[str, Any], ...]
    tool_runs: tuple[Mapping[str, Any], ...]
    #: What the harness recorded of its program, and the kernel's ``segment_starts``.
    info: Mapping[str, Any]
    rewards: tuple[RecordedReward, ...]

    @classmethod
    def read(cls, record: Any) -> RecordedTrace:
        t = as_map(record)
        messages = t.get("messages")
        if messages is not None and not isinstance(messages, list | tuple):
            read_messages: tuple[Mapping[str, Any], ...] = ({"role": "?", "content": messages},)
        else:
            read_messages = _objects(messages)
        trainable = t.get("trainable", None)
        return cls(seat=as_text(t.get("seat") or t.get("agent")),
                   agent=_text_or_none(t.get("agent")), harness=as_text(t.get("harness")),
                   model=as_text(t.get("model")),
                   trainable=True if trainable is True else (
                       False if "trainable" in t and not trainable else None),
                   stop_condition=_text_or_none(t.get("stop_condition")),
                   reward=_number(t.get("reward")), error_type=as_text(t.get("error_type")),
                   error=as_text(t.get("error")), messages=read_messages,
                   model_calls=_objects(t.get("model_calls")),
                   tool_runs=_objects(t.get("tool_runs")), info=as_map(t.get("info")),
                   rewards=tuple(map(RecordedReward.read, as_seq(t.get("rewards")))))

    @property
    def segment_starts(self) -> list[int]:
        """Where each of its segments begins among its messages (the kernel records it in
        ``info["segment_starts"]``; a record without it has none)."""
        return [at for at in as_seq(self.info.get("segment_starts"))
                if type(at) is int and at >= 0]

    def without_transcript(self) -> RecordedTrace:
        """The trace without its messages, calls, tool runs, harness info and rewards."""
        return attrs.evolve(self, messages=(), model_calls=(), tool_runs=(), info={},
                            rewards=())


@attrs.frozen
class RecordedEpisode:
    """An episode as its record holds it, read by :func:`read_episode`."""

    #: Which episode, task and rollout (a record from before rollouts holds none: None, read
    #: as the first rollout where rollouts are counted).
    episode_id: str | None
    task_idx: int | None
    rollout: int | None
    seed: int | None
    #: Its reward as the record holds it, a number or None: :attr:`scored_reward` is the
    #: one that counts.
    reward: float | None
    error_type: str | None
    error: str | None
    metrics: Mapping[str, Any]
    wall_s: float | None
    traces: tuple[RecordedTrace, ...]
    rewards: tuple[RecordedReward, ...]
    #: The task (its prompt, system prompt, answer, info), as the record holds it.
    task: Mapping[str, Any]
    #: The env's own results, as the record holds them (an object in any record the kernel
    #: writes; the page shows whatever is there).
    results: Any
    #: The judges' model calls.
    judge_calls: tuple[Mapping[str, Any], ...]
    #: The sandbox's record (``Episode.sandbox``); None when it had none.
    sandbox: Mapping[str, Any] | None

    @property
    def pair(self) -> tuple[int | None, int]:
        """The (task idx, rollout) it is for."""
        return self.task_idx, self.rollout or 0

    @property
    def is_error(self) -> bool:
        """Whether it ended in an error, and so is not scored (the rule of
        :mod:`interplay.run.summary`)."""
        return bool(self.error_type)

    @property
    def scored_reward(self) -> float | None:
        """The reward it counts with: None for an error episode whatever its record holds (a
        line written before that rule may carry one) and for an episode nothing scored."""
        return counted_reward(self.error_type, self.reward)

    @property
    def calls(self) -> int:
        """The model calls of its traces."""
        return sum(len(t.model_calls) for t in self.traces)

    @property
    def turns(self) -> float | None:
        """Its turns: the count its env records (``metrics.turns``), else the most segments
        any of its seats ran; None when neither is known."""
        turns = self.metrics.get("turns")
        if finite_number(turns):
            return turns  # type: ignore[no-any-return]
        counts = [len(t.segment_starts) for t in self.traces]
        return max(counts) if counts and max(counts) > 0 else None

    @property
    def always_on(self) -> Any:
        """An always_on episode's record (``results["always_on"]``), as the record holds it;
        None for any other episode."""
        return as_map(self.results).get("always_on")

    @property
    def keeps_private_notes(self) -> bool:
        """Whether its agent's plain replies are private notes (an always_on episode's),
        whether or not it wrote any."""
        return isinstance(self.always_on, Mapping)

    def private_notes(self) -> list[str]:
        """The private notes of its always_on wakes (none for any other episode)."""
        return wake_notes(self.always_on)

    def seat_rewards(self) -> dict[str, float | None]:
        """Each seat's reward (None for an error episode, which is not scored, and for a seat
        nothing scored)."""
        errored = self.is_error
        return {t.seat: None if errored or not finite_number(t.reward) else t.reward
                for t in self.traces}

    def components(self) -> dict[str, float | None]:
        """Its reward components: each verifier's reward by its name (a seat's own as
        ``NAME (SEAT)``, a name met again as ``NAME #2``), None for an error episode (not
        scored) and for a value that is not a finite number; at most
        :data:`COMPONENTS_KEPT`."""
        errored = self.is_error
        out: dict[str, float | None] = {}
        for r in self.rewards:
            name = r.name or "?"
            if r.seat:
                name = f"{name} ({r.seat})"
            key, n = name, 1
            while key in out:
                n += 1
                key = f"{name} #{n}"
            # One string per name however many rows hold it (the view keeps a row per
            # episode).
            out[sys.intern(key)] = None if errored or not finite_number(r.value) \
                else float(r.value)  # type: ignore[arg-type]
            if len(out) >= COMPONENTS_KEPT:
                break
        return out

    def without_transcripts(self) -> RecordedEpisode:
        """The episode as a reader that keeps every episode holds it: its head, each trace's
        head and its rewards' scores, without transcripts, task, results or sandbox."""
        return attrs.evolve(
            self, traces=tuple(t.without_transcript() for t in self.traces),
            rewards=tuple(attrs.evolve(r, info={}, reason="") for r in self.rewards),
            task={}, results=None, judge_calls=(), sandbox=None)


def read_episode(record: Any) -> RecordedEpisode:
    """An episode record (a whole one: a split line's side file put back) as typed values,
    read as the module's docstring says; never raises for a record's shape."""
    ep = as_map(record)
    info = as_map(ep.get("info"))
    task_idx, rollout, seed = info.get("task_idx"), info.get("rollout"), info.get("seed")
    sandbox = ep.get("sandbox")
    return RecordedEpisode(
        episode_id=_text_or_none(info.get("episode_id")),
        task_idx=task_idx if type(task_idx) is int else None,
        rollout=rollout if type(rollout) is int else None,
        seed=seed if type(seed) is int else None,
        reward=_number(ep.get("reward")), error_type=_text_or_none(ep.get("error_type")),
        error=_text_or_none(ep.get("error")), metrics=as_map(ep.get("metrics")),
        wall_s=_number(ep.get("wall_s")),
        traces=tuple(map(RecordedTrace.read, as_seq(ep.get("traces")))),
        rewards=tuple(map(RecordedReward.read, as_seq(ep.get("rewards")))),
        task=as_map(ep.get("task")), results=ep.get("results"),
        judge_calls=_objects(ep.get("judge_calls")),
        sandbox=sandbox if isinstance(sandbox, Mapping) else None)
