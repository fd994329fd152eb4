"""``rubric``: an LLM judge scores a seat's transcript against weighted criteria.

The judge (the run's endpoint unless ``judge`` names another) reads one seat's conversation
(the assistant's by default; ``seat = "user"`` reads the modeled user's side of a relay) and
answers with a JSON verdict: a score in [0, 1] and a reason per criterion. The verdict is read
tolerantly (a bare object, one inside a code fence, or one inside prose; a list of
``{name, score, reason}`` or a mapping by criterion name). Output that cannot be read is sent
back to the judge with what was wrong, up to ``retries`` times; after that the verifier raises,
and the episode records a ``verifier_error`` (no reward is invented). A judge call that fails
(after the retries its endpoint's policy makes) is such an error at once. Every judge call is
appended to ``episode.judge_calls`` (so its usage counts in the episode's).

Subclass :class:`Rubric` for a judge of your own; :func:`is_rubric` recognizes any verifier
(a class, an instance, a registered name or a stored config) whose class is one. A subclass adds
to the judge's prompt through :meth:`Rubric.judge_prompt_sections` (nothing by default, so a
plain rubric's prompt is what it always was).

A plain rubric is refused on the seat of an always_on step: one run's wakes, world and chat do
not fit one transcript; ``always_on_agent_verifier`` (the interplay-always-on-verifier
package) grades such a run from the user's chat, the run's context and a summary of its wakes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from interplay.builtin_verifiers.match import always_on_record
from interplay.config.endpoint import Endpoint
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.log import get_logger
from interplay.model.wire import assistant_message
from interplay.plugins import host as plugins
from interplay.values.records import Episode, Message, Reward

log = get_logger("interplay.verifiers.rubric")

JUDGE_SYSTEM = (
    "You are a careful, impartial grader. You read the transcript of a conversation and score "
    "it against each criterion you are given, from 0 (not met at all) to 1 (fully met). "
    "Judge only what the transcript shows. Reply with only a JSON object."
)
VERDICT_SHAPE = ('{"criteria": [{"name": "<criterion name>", "score": <number from 0 to 1>, '
                 '"reason": "<one sentence>"}]}')


@attrs.define
class Criterion:
    """One thing the judge scores from 0 to 1: its ``name`` (as the verdict names it), what
    it asks (``description``), and its ``weight`` in the reward (the weighted mean)."""

    #: The criterion's name, as the judge's verdict names it (unique in the rubric, ignoring case).
    name: str
    #: What the judge asks of the transcript for this criterion.
    description: str
    #: Its weight in the reward, the weighted mean of the criteria's scores (0 to 1).
    weight: float = 1.0


@attrs.define
class RubricConfig:
    """The ``rubric`` verifier's settings (``[[verifiers]]`` entries or a subclass's
    ``Config``)."""

    #: What the judge scores, each from 0 to 1 ([[verifiers.criteria]] rows: name, description,
    #: weight); a subclass may fix them in its Config's default.
    criteria: list[Criterion] = attrs.Factory(list)
    #: The judge's endpoint, laid over the run's key by key as a seat's model table is (one
    #: that names only its model keeps the run's server and key); None is the run's.
    judge: Endpoint | None = None
    #: Whose transcript the judge reads.
    seat: str = "assistant"
    #: Times malformed judge output is sent back for another try.
    retries: int = 1
    #: Show the judge the task's reference answer, when it has one.
    include_answer: bool = True
    #: More context for the judge (what the task was about, what good looks like).
    instructions: str = ""
    #: Sampling settings of the judge's calls (temperature 0 by default, for repeatable verdicts).
    sampling: dict[str, Any] = attrs.Factory(lambda: {"temperature": 0.0})
    #: Characters of transcript shown; a longer one keeps its start and end.
    max_transcript_chars: int = 40000
    #: Its share of the episode's reward, a mean of the verifiers' rewards weighted by this (0
    #: records the reward without counting it).
    weight: float = 1.0


class VerdictError(ValueError):
    """The judge's output is not a usable verdict; the message says why."""


class JudgeFailed(RuntimeError):
    """The judge gave no usable verdict within its retries."""


def is_rubric(obj_or_name: Any) -> bool:
    """Is this verifier (class, instance, registered name, or a stored config row or
    description, see :func:`interplay.plugins.host.is_kind`) a rubric or a subclass of one?"""
    return plugins.is_kind(obj_or_name, "verifiers", "rubric")


def always_on_seats(steps: Sequence[Step]) -> list[str]:
    """The agent seats of the always_on steps among ``steps``."""
    return [str(getattr(getattr(s, "config", None), "seat", "")) for s in steps
            if "always_on" in s.writes]


def render_transcript(episode: Episode, seat: str, max_chars: int) -> str:
    """The seat's messages as text, its own messages marked ASSISTANT. For the agent of an
    always_on run: the user's chat with its times (never the agent's private notes)."""
    record = always_on_record(episode, seat)
    lines: list[str] = [] if record is None else render_chat(record)
    for trace in episode.traces if record is None else ():
        if trace.seat != seat:
            continue
        for m in trace.messages:
            role = m.role.upper()
            if m.text:
                lines.append(f"[{role}] {m.text}")
            for call in m.tool_calls:
                lines.append(f"[{role} called tool {call.name}] {call.arguments}")
    text = "\n".join(lines)
    if len(text) > max_chars:
        half = max_chars // 2
        text = f"{text[:half]}\n[... {len(text) - max_chars} characters left out ...]\n" \
               f"{text[-half:]}"
    return text


def render_chat(record: Mapping[str, Any]) -> list[str]:
    """An always_on run's conversation for graders as lines of text."""
    lines = []
    for entry in record["conversation"]:
        kind = entry["kind"]
        if entry["from"] == "agent":
            lines.append(f"[ASSISTANT message #{entry['n']}, {entry['at']}, wake "
                         f"{entry['wake']}] {entry['text']}")
        elif entry["from"] == "step":
            lines.append(f"[END {entry['reason']}, {entry['at']}] {entry['note']}")
        elif kind == "undelivered":
            lines.append(f"[USER, {entry['at']}, never reached the assistant] {entry['text']}")
        elif kind == "wrap_up":
            lines.append(f"[USER after the end, {entry['at']}, not sent] {entry['text']}")
        else:
            about = f" to #{entry['reply_to']}" if entry.get("reply_to") else ""
            lines.append(f"[USER {kind}{about}, {entry['at']}] {entry['text']}")
    return lines


def _candidates(text: str) -> list[Any]:
    """JSON values found in a reply: fenced blocks first, then the whole text, then every
    object that starts at a '{'."""
    found: list[Any] = []
    decoder = json.JSONDecoder()
    for block in re.findall(r"```(?:json|JSON)?\s*\n?(.*?)```", text, re.S):
        try:
            found.append(json.loads(block))
        except ValueError:
            pass
    try:
        found.append(json.loads(text))
    except ValueError:
        pass
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        found.append(value)
    return found


def _score(value: Any, name: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise VerdictError(f"the score of {name!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise VerdictError(f"the score of {name!r} is not a number")
    if not 0.0 <= value <= 1.0:
        raise VerdictError(f"the score of {name!r} is {value}, outside [0, 1]")
    return float(value)


def _entries(data: Any, names: Sequence[str]) -> dict[str, Any]:
    """Raw per-criterion entries from any of the accepted verdict shapes."""
    if isinstance(data, Mapping) and "criteria" in data:
        data = data["criteria"]
    elif isinstance(data, Mapping) and "score" in data and len(names) == 1:
        return {names[0]: data}
    if isinstance(data, list):
        out = {}
        for item in data:
            if isinstance(item, Mapping) and "name" in item:
                out[str(item["name"])] = item
        return out
    if isinstance(data, Mapping):
        return {str(k): v for k, v in data.items()}
    raise VerdictError("the verdict is not a JSON object")


def parse_verdict(text: str, names: Sequence[str]) -> dict[str, tuple[float, str]]:
    """``{criterion: (score, reason)}`` read from the judge's reply; raises VerdictError."""
    if not text.strip():
        raise VerdictError("the reply is empty")
    first_problem: str | None = None
    for candidate in _candidates(text):
        try:
            entries = {k.strip().casefold(): v for k, v in _entries(candidate, names).items()}
            verdict = {}
            for name in names:
                entry = entries.get(name.strip().casefold())
                if entry is None:
                    raise VerdictError(f"criterion {name!r} is missing")
                if isinstance(entry, Mapping):
                    score = _score(entry.get("score"), name)
                    reason = str(entry.get("reason") or "")
                else:
                    score, reason = _score(entry, name), ""
                verdict[name] = (score, reason)
            return verdict
        except VerdictError as exc:
            first_problem = first_problem or str(exc)
    raise VerdictError(first_problem or "no JSON object in the reply")


class Rubric(Verifier):
    """An LLM judge: weighted criteria, a JSON verdict with a reason per criterion."""

    name = "rubric"
    Config: ClassVar[type] = RubricConfig

    def check(self, steps: Sequence[Step]) -> list[str]:
        cfg: RubricConfig = self.config
        problems = []
        if not cfg.criteria:
            problems.append("no criteria; add [[verifiers.criteria]] entries with name, "
                            "description and weight")
        names = [c.name.strip().casefold() for c in cfg.criteria]
        if any(not n for n in names):
            problems.append("every criterion needs a name")
        if len(set(names)) != len(names):
            problems.append("criterion names must be unique")
        if any(c.weight < 0 for c in cfg.criteria) or (
                cfg.criteria and sum(c.weight for c in cfg.criteria) <= 0):
            problems.append("criterion weights must be >= 0 with a positive sum")
        if cfg.retries < 0:
            problems.append(f"retries must be 0 or more, got {cfg.retries}")
        if cfg.max_transcript_chars < 2:
            # Shortening keeps half from each end: below 2 there is nothing to keep.
            problems.append(f"max_transcript_chars must be 2 or more, "
                            f"got {cfg.max_transcript_chars}")
        opened = set().union(*(s.seats() for s in steps)) if steps else set()
        if cfg.seat not in opened:
            problems.append(f"no step opens seat {cfg.seat!r}, whose transcript the judge reads; "
                            f"set seat = one of {sorted(opened)}")
        adds_nothing = type(self).judge_prompt_sections is Rubric.judge_prompt_sections
        if adds_nothing and any(cfg.seat == seat for seat in always_on_seats(steps)):
            problems.append(f"seat {cfg.seat!r} is an always_on step's agent, whose run a plain "
                            f"rubric cannot grade from one transcript; use kind = "
                            f"\"always_on_agent_verifier\" (pip install "
                            f"interplay-always-on-verifier)")
        return problems

    def judge_prompt_sections(self, episode: Episode,
                              ctx: EpisodeContext | None) -> list[str]:
        """Sections of text a subclass adds to the judge's prompt, after the transcript (e.g. a
        summary of the run): none here. ``ctx`` is the episode's context while it is scored,
        None when the prompt is built outside a run."""
        return []

    def judge_messages(self, episode: Episode,
                       ctx: EpisodeContext | None = None) -> list[Message]:
        """What the judge is first sent: :meth:`prompt`, with the sections
        :meth:`judge_prompt_sections` adds, if any."""
        sections = self.judge_prompt_sections(episode, ctx)
        return self.prompt(episode, sections) if sections else self.prompt(episode)

    def prompt(self, episode: Episode, sections: Sequence[str] = ()) -> list[Message]:
        """The judge's messages: instructions, criteria, the reference answer, the transcript,
        then ``sections``."""
        cfg: RubricConfig = self.config
        parts = []
        if cfg.instructions:
            parts.append(cfg.instructions)
        parts.append("Criteria:\n" + "\n".join(f"- {c.name}: {c.description}"
                                                for c in cfg.criteria))
        if cfg.include_answer and episode.task.answer not in (None, ""):
            parts.append(f"Reference answer: {episode.task.answer}")
        transcript = render_transcript(episode, cfg.seat, cfg.max_transcript_chars)
        parts.append(f"Transcript (the conversation as the {cfg.seat!r} seat saw it; its own "
                     f"messages are marked ASSISTANT):\n<transcript>\n{transcript or '(empty)'}\n"
                     f"</transcript>")
        parts.extend(sections)
        parts.append(f"Reply with only a JSON object with one entry per criterion:\n"
                     f"{VERDICT_SHAPE}")
        return [Message("system", JUDGE_SYSTEM), Message("user", "\n\n".join(parts))]

    async def score(self, episode: Episode, ctx: EpisodeContext) -> Reward:
        cfg: RubricConfig = self.config
        client = ctx.resources.client(cfg.judge)
        names = [c.name for c in cfg.criteria]
        messages = self.judge_messages(episode, ctx)
        problem = "no attempt made"
        attempts = 0
        for attempt in range(1, cfg.retries + 2):
            attempts = attempt
            call = await client.chat(messages, **cfg.sampling)
            episode.judge_calls.append(call)
            if call.error_type is not None:
                # The client has retried it as the endpoint's policy says: asking again here
                # would be a second policy.
                raise JudgeFailed(f"the judge call failed ({call.error_type}) after "
                                  f"{call.attempts} attempt(s): {call.error}")
            msg = assistant_message(call)
            text = msg.text if msg is not None else ""
            try:
                verdict = parse_verdict(text, names)
            except VerdictError as exc:
                problem = str(exc)
                log.info("rubric.malformed_verdict", episode_id=episode.info.episode_id,
                         attempt=attempt, reply_chars=len(text))
                messages = [*messages, Message("assistant", text),
                            Message("user", f"Your reply could not be used: {problem}. Reply "
                                            f"again with only the JSON object:\n{VERDICT_SHAPE}")]
                continue
            return self.reward(verdict, attempt, client.endpoint.model)
        raise JudgeFailed(f"the judge gave no usable verdict in {attempts} attempt(s): {problem}")

    def reward(self, verdict: Mapping[str, tuple[float, str]], attempts: int,
               judge_model: str) -> Reward:
        cfg: RubricConfig = self.config
        total = sum(c.weight for c in cfg.criteria)
        value = sum(verdict[c.name][0] * c.weight for c in cfg.criteria) / total
        reason = "; ".join(f"{c.name} {verdict[c.name][0]:.2f}: {verdict[c.name][1]}"
                           for c in cfg.criteria)
        info = {"criteria": {c.name: {"score": verdict[c.name][0], "weight": c.weight,
                                      "reason": verdict[c.name][1]} for c in cfg.criteria},
                "attempts": attempts, "judge_model": judge_model}
        return Reward(self.name, value, weight=cfg.weight, reason=reason, info=info)
