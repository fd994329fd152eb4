"""Builtin steps: ``one_shot`` (one call of one seat) and ``relay`` (the two-session
user-sim relay).

The relay passes the user sim's lines to the assistant and the assistant's replies back. It never
passes an empty line on: the assistant would answer a message nobody wrote. An empty line is
asked for again (``empty_retries`` times per line), then the relay ends with ``user_empty``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from interplay.builtin_envs.llm_user import person_from_task
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.step import Step
from interplay.contracts.usersim import (
    Answer,
    Read,
    ReadMessage,
    UserSim,
    UserSimError,
    answer_or_error,
    chosen_user_sim,
    set_up,
)
from interplay.errors import InterplayError
from interplay.plugins import host as plugins


@attrs.define
class OneShotConfig:
    #: The seat that answers the task's prompt.
    seat: str = "assistant"


class OneShot(Step):
    """One call: the seat answers the task's prompt."""

    name = "one_shot"
    Config: ClassVar[type] = OneShotConfig

    async def run(self, ctx: EpisodeContext) -> None:
        await ctx.agent(self.config.seat).run(ctx.task)


@attrs.define
class RelayConfig:
    """The ``relay`` step's settings (``env.relay.*``): the assistant's seat, the user sim
    and its settings, the turn cap, her done marker and what is hidden from the assistant."""

    #: The seat the modeled user talks to.
    seat: str = "assistant"
    #: The user sim, by registered name (``llm`` plays the user with the ``user`` seat; the
    #: seats a sim plays with are its ``seats()``).
    user_sim: str = "llm"
    #: Settings of the user sim (its own Config: `interplay describe user-sims NAME`).
    user_sim_settings: dict[str, Any] = attrs.Factory(dict)
    #: The persona when the task names none.
    persona: str = "a busy person who wants their problem solved"
    #: Assistant turns before the relay stops.
    max_turns: int = 6
    #: The user's whole reply when they are done (an exact match, not a substring).
    done_marker: str = "###DONE###"
    #: Hide the task's prompt from the assistant (the user brings the scenario).
    mask_prompt: bool = True
    #: Times an empty line from the user sim is asked for again before the relay ends
    #: (``ended_by = "user_empty"``); 0 ends it at the first empty line.
    empty_retries: int = 2


#: What the user sim reads when its line was empty (the assistant never sees it).
EMPTY_LINE_REASK = ("(Your last message was empty, so it was not passed on. Write your next "
                    "message to the assistant.)")


class Relay(Step):
    """A modeled user and the assistant take turns: two chat sessions, relayed. It writes
    ``results["relay"]``: ``turns``, ``ended_by`` (``user_done``, ``max_turns``,
    ``user_empty``, ``user_error``, ``assistant_stopped``), ``done_reason``, ``user_lines``,
    ``closing_line``, and ``error`` when the user sim failed."""

    name = "relay"
    Config: ClassVar[type] = RelayConfig
    writes = frozenset({"relay"})

    def seats(self) -> set[str]:
        cfg: RelayConfig = self.config
        try:
            return {cfg.seat, *make_user_sim(cfg.user_sim, cfg.user_sim_settings).seats()}
        except InterplayError:  # check() reports it
            return {cfg.seat}

    def use_user_sim(self, name: str, settings: dict[str, Any]) -> None:
        cfg: RelayConfig = self.config
        sim, sim_settings = chosen_user_sim(cfg.user_sim, cfg.user_sim_settings, name, settings)
        self.config = attrs.evolve(cfg, user_sim=sim, user_sim_settings=sim_settings)

    def check(self, steps: Sequence[Step]) -> list[str]:
        cfg: RelayConfig = self.config
        problems = []
        if not cfg.done_marker.strip():
            problems.append("done_marker is empty; set a marker the user says when done, "
                            "e.g. done_marker = \"###DONE###\"")
        if cfg.max_turns < 1:
            problems.append(f"max_turns must be at least 1, got {cfg.max_turns}")
        if cfg.empty_retries < 0:
            problems.append(f"empty_retries must be 0 or more, got {cfg.empty_retries}")
        try:
            # Its settings too: a bad one would otherwise fail every episode, not the load.
            make_user_sim(cfg.user_sim, cfg.user_sim_settings)
        except InterplayError as exc:
            problems.append(str(exc))
        return problems

    async def run(self, ctx: EpisodeContext) -> None:
        cfg: RelayConfig = self.config
        sim = make_user_sim(cfg.user_sim, cfg.user_sim_settings)
        person = person_from_task(ctx.task, cfg.persona, done_marker=cfg.done_marker)
        await set_up(sim, person, ctx, name=cfg.user_sim, step=self.name)
        turns = 0
        empty_lines = 0
        ended_by = "max_turns"
        lines: list[str] = []
        done_reason = closing = ""
        malformed = 0
        failure: str | None = None

        async def answer_once(read: Read) -> Answer:
            return await answer_or_error(sim, read, name=cfg.user_sim, step=self.name,
                                         what=f" (turn {read.turn})")

        async def ask(read: Read) -> Answer:
            """The sim's next line, asked again while it is empty (within the budget)."""
            nonlocal empty_lines, malformed
            answer_ = await answer_once(read)
            malformed += int(answer_.used.get("malformed", 0))
            for _ in range(cfg.empty_retries):
                if not _is_empty(answer_):
                    break
                empty_lines += 1
                answer_ = await answer_once(Read(text=EMPTY_LINE_REASK, turn=read.turn))
                malformed += int(answer_.used.get("malformed", 0))
            if _is_empty(answer_):
                empty_lines += 1
            return answer_

        try:
            answer = await ask(Read(text=None, turn=0))
            async with ctx.agent(cfg.seat).chat(ctx.task, mask_prompt=cfg.mask_prompt) as chat:
                while True:
                    if answer.error is not None:
                        ended_by, failure = "user_error", answer.error
                        chat.stop("user_error")
                        break
                    if answer.done or answer.text.strip() == cfg.done_marker:
                        ended_by, done_reason = "user_done", answer.done_reason
                        if answer.done and answer.text.strip() != cfg.done_marker:
                            # Her words with the done: recorded, not passed on (the chat
                            # ends on her done, as tau2-bench's does).
                            closing = answer.text.strip()
                        chat.stop("user_done")
                        break
                    if not answer.text.strip():
                        ended_by = "user_empty"
                        chat.stop("user_empty")
                        break
                    if turns >= cfg.max_turns:
                        chat.stop("max_turns")
                        break
                    lines.append(answer.text)
                    reply = await chat.turn(answer.text)
                    turns += 1
                    if reply.stopped:
                        ended_by = "assistant_stopped"
                        break
                    answer = await ask(Read(
                        text=reply.text, turn=turns,
                        messages=(ReadMessage(turns, reply.text, seat=cfg.seat),)))
        finally:
            await sim.close()
            ctx.metrics["turns"] = float(turns)
            ctx.metrics["empty_user_lines"] = float(empty_lines)
            # Replies the user sim found malformed and asked for again (Answer.used).
            ctx.metrics["user_malformed"] = float(malformed)
            ctx.results["relay"] = {"turns": turns, "ended_by": ended_by,
                                    "done_reason": done_reason, "user_lines": lines,
                                    "closing_line": closing}
            if failure is not None:
                ctx.results["relay"]["error"] = failure
        if failure is not None:
            # The episode is the user sim's failure: a user_error, never scored.
            raise UserSimError(failure)


def make_user_sim(name: str, settings: dict[str, Any]) -> UserSim:
    """The user sim registered as ``name``, configured with ``settings``."""
    sim: UserSim = plugins.get("user-sims", name)()
    sim.configure(settings)
    return sim


def _is_empty(answer: Answer) -> bool:
    """A line with nothing to pass on (a sim that failed or is done is not empty: it ended)."""
    return answer.error is None and not answer.done and not answer.text.strip()
