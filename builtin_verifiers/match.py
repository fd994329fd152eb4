"""``exact``, ``contains`` and ``regex``: compare a seat's last reply with the task's answer.

For the agent of an always_on run a "reply" is a message it sent the user (the run's graded
response), never its plain replies: those are private notes the user never read."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import attrs

from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.values.records import Episode, Reward


@attrs.define
class MatchConfig:
    #: The seat whose replies are compared (for an always_on agent: its messages to the user).
    seat: str = "assistant"
    #: Compare letter case too; by default both texts are casefolded (regex: the pattern matches
    #: ignoring case).
    case_sensitive: bool = False
    #: Its share of the episode's reward, a mean of the verifiers' rewards weighted by this (0
    #: records the reward without counting it).
    weight: float = 1.0
    #: The expected text; empty means the task's ``answer``.
    expected: str = ""
    #: Compare with the seat's last reply, or pass when any of its replies matches.
    scope: Literal["last", "any"] = "last"


def always_on_record(episode: Episode, seat: str) -> dict[str, Any] | None:
    """The always_on record of ``seat``'s run in the episode, if it ran one."""
    record = episode.results.get("always_on")
    return record if isinstance(record, dict) and record.get("seat") == seat else None


def replies(episode: Episode, seat: str) -> list[str]:
    """Every assistant text of ``seat`` in the episode, in order (for an always_on agent: its
    messages to the user)."""
    record = always_on_record(episode, seat)
    if record is not None:
        return [m["text"] for m in record["response"]]
    return [m.text for t in episode.traces if t.seat == seat
            for m in t.messages if m.role == "assistant" and m.text]


def last_reply(episode: Episode, seat: str) -> str:
    """The text of the last assistant message of ``seat``'s last trace ("" when none); for an
    always_on agent, its last message to the user."""
    record = always_on_record(episode, seat)
    if record is not None:
        return record["response"][-1]["text"] if record["response"] else ""
    for trace in reversed(episode.traces):
        if trace.seat == seat:
            for m in reversed(trace.messages):
                if m.role == "assistant" and m.text:
                    return m.text
            return ""
    return ""


class _Match(Verifier):
    Config: ClassVar[type] = MatchConfig
    #: Compare casefolded text unless ``case_sensitive``; a pattern matcher folds by flag instead.
    folds_case: ClassVar[bool] = True

    def check(self, steps: Sequence[Step]) -> list[str]:
        seat = self.config.seat
        if not any(seat in s.seats() for s in steps):
            return [f"no step opens seat {seat!r}; set seat = one of "
                    f"{sorted(set().union(*(s.seats() for s in steps)))}"]
        return []

    def expected(self, episode: Episode) -> str:
        return self.config.expected or ("" if episode.task.answer is None
                                        else str(episode.task.answer))

    def matches(self, got: str, expected: str) -> bool:
        raise NotImplementedError

    async def score(self, episode: Episode, ctx: EpisodeContext) -> Reward:
        cfg: MatchConfig = self.config
        candidates = ([last_reply(episode, cfg.seat)] if cfg.scope == "last"
                      else replies(episode, cfg.seat))
        expected = self.expected(episode)
        fold = not cfg.case_sensitive and self.folds_case
        if fold:
            expected = expected.casefold()
        ok = bool(expected) and any(
            self.matches(got.casefold() if fold else got, expected) for got in candidates)
        return Reward(self.name, 1.0 if ok else 0.0, weight=self.config.weight,
                      reason=f"{self.name} {'matched' if ok else 'did not match'} "
                             f"the expected answer")


class Exact(_Match):
    """Reward 1 when the reply equals the answer (trimmed)."""

    name = "exact"

    def matches(self, got: str, expected: str) -> bool:
        return got.strip() == expected.strip()


class Contains(_Match):
    """Reward 1 when the reply contains the answer."""

    name = "contains"

    def matches(self, got: str, expected: str) -> bool:
        return expected.strip() in got


class Regex(_Match):
    """Reward 1 when the answer, a regular expression, matches the reply."""

    name = "regex"
    folds_case = False

    def check(self, steps: Sequence[Step]) -> list[str]:
        problems = super().check(steps)
        if self.config.expected:
            try:
                re.compile(self.config.expected)
            except re.error as exc:
                problems.append(f"expected is not a valid regular expression: {exc}")
        return problems

    async def score(self, episode: Episode, ctx: EpisodeContext) -> Reward:
        try:
            re.compile(self.expected(episode))
        except re.error as exc:
            return Reward(self.name, 0.0, weight=self.config.weight,
                          reason=f"{self.name}: the expected answer is not a valid regular "
                                 f"expression ({exc})")
        return await super().score(episode, ctx)

    def matches(self, got: str, expected: str) -> bool:
        flags = 0 if self.config.case_sensitive else re.IGNORECASE
        return re.search(expected, got, flags) is not None
