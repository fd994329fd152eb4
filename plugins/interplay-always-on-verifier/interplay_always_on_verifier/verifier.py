"""``always_on_agent_verifier``: interplay's ``rubric`` judge for an always_on run.

The judge reads the user's chat with its times (the rubric's transcript of an always_on
agent), the run's context (the scenario and the trigger log, unless ``context`` names other
parts) and a wake-by-wake summary, added through the rubric's ``judge_prompt_sections``: never
every wake's trajectory, never the agent's private notes. Optional deterministic criteria
(reply latency in her awake hours, silence) are scored next to the judge's and weighed in
with them.

Refused when the env loads: an env without an always_on step, a seat other than an
always_on step's agent, and what grades a run by its trajectory (``use_trajectory``,
``grade_up_to_turn``, an ``output_format`` citing per-criterion screenshots). A run whose
agent turn failed (``error_type`` set) is skipped, before anything else: no reward, no error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from interplay import (
    Criterion,
    Episode,
    EpisodeContext,
    Reward,
    Rubric,
    RubricConfig,
    Step,
    always_on_seats,
    get_logger,
)
from interplay_always_on_verifier import measures, summary

log = get_logger("interplay.verifiers.always_on_agent")


def default_criteria() -> list[Criterion]:
    """What the judge grades when the verifier names no criteria of its own."""
    return [
        Criterion("outcome", "By the end, what the user asked for was done in the world (read "
                  "the wake summary and the run's end, not the assistant's claims).", 2.0),
        Criterion("kept_informed", "The user was told what mattered when it mattered, without "
                  "being flooded or left wondering."),
        Criterion("asked_first", "The assistant asked her before acting for her where she "
                  "wanted to be asked (spending money, commitments)."),
        Criterion("truthful", "What the assistant told her matches what it did and what "
                  "happened in the world."),
    ]


@attrs.define
class AlwaysOnVerifierConfig(RubricConfig):
    #: What the judge scores; by default the always_on criteria (each from 0 to 1: name,
    #: description, weight).
    criteria: list[Criterion] = attrs.Factory(default_criteria)
    #: Parts of the run's context the judge reads: scenario, user, triggers, phone, apps.
    context: list[str] = attrs.Factory(lambda: list(summary.DEFAULT_CONTEXT))
    #: Characters of the context and of the wake-by-wake summary, each; longer ones keep
    #: whole lines from both ends.
    max_summary_chars: int = 40000
    #: Reply latency in her awake hours, a criterion of its own (off when not set).
    latency: measures.LatencyConfig | None = None
    #: Silence graded, a criterion of its own (off when not set).
    silence: measures.SilenceConfig | None = None
    #: Refused when set: what graders of one-transcript runs take, which an always_on run
    #: cannot give. Kept as fields so the refusal says why rather than "unknown key".
    use_trajectory: bool = False
    #: Refused when set (a one-transcript grader's setting, kept so the refusal says why).
    grade_up_to_turn: int | None = None
    #: Refused unless "scores" (a one-transcript grader's setting, kept so the refusal says why).
    output_format: str = "scores"


class AlwaysOnAgentVerifier(Rubric):
    """Grades an always_on run as the user lived it: her chat with times, the run's context
    and a wake-by-wake summary, by an LLM judge against weighted criteria."""

    name = "always_on_agent_verifier"
    Config: ClassVar[type] = AlwaysOnVerifierConfig

    def check(self, steps: Sequence[Step]) -> list[str]:
        cfg: AlwaysOnVerifierConfig = self.config
        problems = []
        if cfg.use_trajectory:
            problems.append("use_trajectory: an always_on run's wakes do not fit one judge "
                            "prompt, and their trajectories hold the agent's private notes, "
                            "which the user never read; remove it (the judge reads her chat, "
                            "the run's context and a wake-by-wake summary)")
        if cfg.grade_up_to_turn is not None:
            problems.append("grade_up_to_turn: an always_on run is graded whole, as the user "
                            "lived it, not up to a turn; remove it")
        if cfg.output_format != "scores":
            problems.append(f"output_format {cfg.output_format!r}: the verdict is a score and a "
                            f"reason per criterion, citing no per-criterion screenshots (an "
                            f"always_on run has none); remove it")
        seats = always_on_seats(steps)
        if not seats:
            problems.append("the env has no always_on step, whose run this verifier grades; "
                            "use kind = \"rubric\" for a conversation")
        elif cfg.seat not in seats:
            problems.append(f"seat {cfg.seat!r} is not the agent of an always_on step; set "
                            f"seat = one of {sorted(set(seats))}")
        unknown = sorted(set(cfg.context) - set(summary.CONTEXT_PARTS))
        if unknown:
            problems.append(f"context: unknown part {', '.join(unknown)}; the parts are "
                            f"{', '.join(summary.CONTEXT_PARTS)}")
        if cfg.max_summary_chars < 200:
            problems.append(f"max_summary_chars must be 200 or more, got "
                            f"{cfg.max_summary_chars}")
        if cfg.latency is not None:
            problems += measures.latency_problems(cfg.latency)
        if cfg.silence is not None:
            problems += measures.silence_problems(cfg.silence)
        return problems + super().check(steps)

    def judge_prompt_sections(self, episode: Episode,
                              ctx: EpisodeContext | None) -> list[str]:
        cfg: AlwaysOnVerifierConfig = self.config
        # score() has checked the record is there; a preview of any episode still renders.
        record = episode.results.get("always_on") or {}
        user = episode.results.get("user") or {}
        sections = [summary.PREAMBLE]
        if cfg.context:
            sections.append(summary.context(record, user, cfg.context, cfg.max_summary_chars))
        sections.append(summary.wakes(record, cfg.max_summary_chars))
        return sections

    def measured(self, episode: Episode) -> list[measures.Measured]:
        """The deterministic criteria the verifier is set to grade, for this run."""
        cfg: AlwaysOnVerifierConfig = self.config
        record = episode.results["always_on"]
        out = []
        if cfg.latency is not None:
            found = measures.latency(record, episode.results.get("user") or {}, cfg.latency)
            if found is not None:
                out.append(found)
        if cfg.silence is not None:
            out.append(measures.silence(record, cfg.silence))
        return out

    async def score(self, episode: Episode, ctx: EpisodeContext) -> Reward | list[Reward]:
        record = episode.results.get("always_on")
        failed = episode.error_type or (record.get("error_type") if isinstance(record, dict)
                                        else None)
        if failed:
            # A run cut short by a failed turn is an error episode, never scored: a judge
            # call on it would be spent on nothing.
            log.info("always_on_agent.skipped", episode_id=episode.info.episode_id,
                     error_type=failed)
            return []
        if not isinstance(record, dict) or record.get("seat") != self.config.seat:
            raise RuntimeError(f"the episode has no always_on record of seat "
                               f"{self.config.seat!r}")
        if "side_file" in record:
            # A stored episode's line: its timeline and chat are in its side file.
            raise RuntimeError(f"the episode's always_on record is its line in episodes.jsonl, "
                               f"whose timeline and chat are in {record['side_file']}; load "
                               f"the episode with interplay.run.whole_record(record, folder) "
                               f"before scoring it")
        found = self.measured(episode)
        reward = await super().score(episode, ctx)
        return with_measured(reward, found, sum(c.weight for c in self.config.criteria))


def with_measured(reward: Reward, found: Sequence[measures.Measured],
                  judge_weight: float) -> Reward:
    """The judge's reward with the deterministic criteria weighed in beside its own."""
    if not found:
        return reward
    total = judge_weight + sum(m.weight for m in found)
    value = (reward.value * judge_weight + sum(m.score * m.weight for m in found)) / total \
        if total > 0 else reward.value
    info: dict[str, Any] = dict(reward.info)
    info["criteria"] = {**info.get("criteria", {}),
                        **{m.name: {"score": m.score, "weight": m.weight, "reason": m.reason,
                                    "measured": m.figures} for m in found}}
    reason = "; ".join([reward.reason or "",
                        *(f"{m.name} {m.score:.2f}: {m.reason}" for m in found)]).strip("; ")
    return attrs.evolve(reward, value=value, reason=reason, info=info)
