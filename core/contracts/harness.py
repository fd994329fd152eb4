"""The Harness contract: a program that runs an agent for one segment.

A segment is one launch of the agent's program: assistant -> tools -> ... until it yields.
``launch(task, ctx)`` runs the first segment; ``resume(messages, ctx)`` every continuation.
The default ``resume`` relaunches on the accreted conversation as a messages prompt, so any
stateless chat program takes part in a multi-turn exchange; a harness with session state of
its own (codex) overrides ``resume`` natively. Whether a harness can go multi-turn is derived
from that contract (:meth:`Harness.can_resume`), never declared.

This module owns the contract only; what a harness is handed (``ctx``) is
:class:`~interplay.contracts.contexts.SegmentContext`, and builtin harnesses live in
``interplay.builtin_harnesses``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from interplay.config.loading import settle
from interplay.contracts.contexts import SegmentContext
from interplay.contracts.sandbox import SandboxNeeds
from interplay.errors import InterplayError
from interplay.values.records import Message, Task


@attrs.define
class NoConfig:
    """A component with no settings."""


@attrs.define
class Segment:
    """What one segment produced.

    ``messages`` are the messages the segment added after its input (assistant and tool
    messages, in order). ``stop_condition`` is set when the agent can go no further (a turn
    cap, an error, a timeout); the exchange is then over. A failed segment says why in
    ``error`` (one line) and ``error_type`` (an :class:`~interplay.errors.ErrorType`).
    """

    messages: list[Message] = attrs.Factory(list)
    stop_condition: str | None = None
    error: str | None = None
    error_type: str | None = None

    @property
    def text(self) -> str:
        for m in reversed(self.messages):
            if m.role == "assistant":
                return m.text
        return ""


def text_prompt(task: Task) -> tuple[str | None, str]:
    """``(system prompt, prompt text)`` of ``task`` for a program that takes its instructions
    and one text prompt apart (codex, Claude Code).

    System and developer messages become the system prompt (joined by a blank line); the rest
    is the prompt: one user message as it is, several user messages joined, a longer
    conversation as a labelled transcript (each message under ``[role]``, tool calls noted).
    """
    messages = task.messages()
    system = [m.text for m in messages if m.role in ("system", "developer") and m.text]
    rest = [m for m in messages if m.role not in ("system", "developer")]
    if len(rest) == 1 and rest[0].role == "user":
        prompt = rest[0].text
    elif all(m.role == "user" for m in rest):
        prompt = "\n\n".join(m.text for m in rest if m.text)
    else:
        parts = []
        for m in rest:
            body = m.text
            if m.tool_calls:
                body = "\n".join([body, *(f"(called {c.name} {c.arguments})"
                                          for c in m.tool_calls)]).strip()
            parts.append(f"[{m.role}]\n{body}")
        prompt = "\n\n".join(parts)
    return ("\n\n".join(system) or None), prompt


class Harness:
    """Base class of every harness. Subclass it and register it with ``register_harnesses``.

    ``Config`` is an attrs class of the harness's settings (structured from a seat's
    ``harness_config``); an instance is made per agent, so per-trace state belongs on ``ctx``.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig
    #: Whether ``launch`` accepts a task whose prompt is a list of messages. A harness whose
    #: program takes only text sets this to False (derived by the command harness from its
    #: config); the default ``resume`` needs it.
    accepts_messages: ClassVar[bool] = True

    def __init__(self, config: Any = None) -> None:
        self.config = settle(config, self, "harness")

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        """Run the first segment on ``task`` and return what it added."""
        raise NotImplementedError(f"harness {self.name!r} does not implement launch()")

    async def resume(self, messages: Sequence[Message], ctx: SegmentContext) -> Segment:
        """Run a continuation on the conversation so far (which ends with the new input).

        The default relaunches on the whole conversation as a messages prompt. System messages
        the task or a user supplied are kept; only the one synthesized from the task's
        ``system_prompt`` is dropped here, since ``launch`` synthesizes it again.
        """
        if not self.accepts_messages:
            raise InterplayError(
                f"harness {self.name!r} takes a text prompt only, so it cannot continue a chat; "
                f"give it a program that reads a message list, or use a harness that resumes"
            )
        msgs = list(messages)
        system_prompt = ctx.wire_task.system_prompt
        system = None
        if system_prompt and msgs and msgs[0].role == "system" and msgs[0].content == system_prompt:
            system, msgs = msgs[0], msgs[1:]
        return await self.launch(ctx.wire_task.with_prompt(tuple(msgs), system=system), ctx)

    async def close(self, ctx: SegmentContext) -> None:
        """Release what this harness holds for one trace (called once, also after errors)."""

    def check(self) -> list[str]:
        """What keeps this harness from running on this machine, one line each saying what to
        change (a program it starts that is not installed); none by default. A run asks every
        seat's harness when it starts, before its results folder is made and before any
        episode, on the machine its episodes run on (not on a Ray cluster's driver), and
        stops on the first problem; never when a run is only read (regrade, export)."""
        return []

    def sandbox_needs(self) -> SandboxNeeds:
        """What this harness needs of the sandbox its seat works in, asked before the
        sandbox starts: paths of this machine brought in read-only (its program) and
        whether a program inside calls the model boundary (so the sandbox's network must let
        it out). Nothing by default: the ``chat`` harness's tools run commands inside and its
        model calls are made from here."""
        return SandboxNeeds()

    def can_resume(self) -> bool:
        """Can this harness continue an exchange? Derived from the contract, not declared."""
        return type(self).resume is not Harness.resume or self.accepts_messages
