"""The always_on agent's context policy: what of its conversation each of its turns sends.

Every wake adds to the agent's conversation (the wake's lines, its tool calls and their
results, its replies, a nudge) and nothing else bounds it, so on a model with a modest window
a long run stops fitting. Folding keeps the system prompt and the current wake whole, keeps
the most recent earlier wakes in full (at most ``keep_wakes`` of them, and as many as fit
``max_context_tokens``, estimated from characters) and replaces the rest with a digest built
from the world's own records (what was said to and by the user with times, what woke the
agent, the tools it called), never by asking a model. Whole wakes are folded, so a tool call
is never parted from its result, and the fold only moves forward.

This module owns the settings, their resolution for a seat, the estimate, the choice of wakes
and the digest's text. It never changes the conversation the trace keeps: the loop hands what
to send to ``ChatSession.turn(context=...)``, and each model call records what was sent.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from interplay.builtin_envs.always_on.prompts import STEP_MARK as MARK
from interplay.contracts.harness import Harness
from interplay.errors import InterplayError
from interplay.model.local import DEFAULT_MAX_TOKENS, N_CTX
from interplay.values.records import Message
from interplay.world import times

if TYPE_CHECKING:
    from interplay.run.agent import Agent
    from interplay.values.tools import Tool

#: Room the embedded model's window keeps for what the estimate cannot see: it reads about
#: 2.5 characters a token on timestamps and JSON and 4 on prose, against the 3 it assumes.
EMBEDDED_SHARE = 0.75
#: How much of a text the digest keeps (user and agent lines; alerts and answers; arguments).
TALK_CHARS, EVENT_CHARS, ARG_CHARS = 300, 160, 40
#: Tools the digest shows as what they did rather than as calls.
_SHOWN_OTHERWISE = frozenset({"message_user", "stay_quiet", "get_time"})


@attrs.define
class HistoryConfig:
    #: "auto": fold when ``keep_wakes`` or ``max_context_tokens`` is set, or on the embedded
    #: model (with a budget from its window); keep everything otherwise. "all": keep
    #: everything. "fold": fold as ``keep_wakes`` and ``max_context_tokens`` say.
    mode: Literal["auto", "all", "fold"] = "auto"
    #: Earlier wakes sent in full, at most (None: as many as the budget allows).
    keep_wakes: int | None = None
    #: The approximate tokens a turn's request may take: the tools, the system prompt, the
    #: digest, the wakes kept and the current wake (None: no budget).
    max_context_tokens: int | None = None
    #: Characters per token in the estimate.
    chars_per_token: float = 3.0

    @property
    def bounded(self) -> bool:
        return self.keep_wakes is not None or self.max_context_tokens is not None

    @property
    def asks_to_fold(self) -> bool:
        """The settings ask for folding whatever the model."""
        return self.mode == "fold" or (self.mode == "auto" and self.bounded)

    def problems(self) -> list[str]:
        out: list[str] = []
        bounds = self.bounded
        if self.keep_wakes is not None and self.keep_wakes < 0:
            out.append(f"history.keep_wakes is {self.keep_wakes}; set it to 0 or more (0 "
                       f"folds every earlier wake into the digest)")
        if self.max_context_tokens is not None and self.max_context_tokens < 1:
            out.append(f"history.max_context_tokens is {self.max_context_tokens}; set it to "
                       f"the tokens a request may take, or leave it out")
        if not self.chars_per_token > 0:
            out.append("history.chars_per_token must be more than 0")
        if self.mode == "all" and bounds:
            out.append("history.mode = \"all\" keeps everything, so keep_wakes and "
                       "max_context_tokens do nothing; drop them or set mode = \"fold\"")
        if self.mode == "fold" and not bounds:
            out.append("history.mode = \"fold\" needs keep_wakes or max_context_tokens (or "
                       "both)")
        return out


@attrs.frozen
class HistoryPolicy:
    """The policy an episode's agent runs under, resolved from the settings and its seat."""

    mode: str  # "all" or "fold"
    keep_wakes: int | None = None
    max_context_tokens: int | None = None
    chars_per_token: float = 3.0
    #: Why: "settings", "embedded model", "remote endpoint", "harness keeps its session".
    why: str = "settings"

    def record(self) -> dict[str, Any]:
        return attrs.asdict(self)


def keeps_session(harness: type[Harness]) -> bool:
    """A harness that overrides ``resume`` is sent only the new message each turn: its
    program holds the conversation, so nothing can be folded for it."""
    return harness.resume is not Harness.resume


def session_problem(harness: str) -> str:
    return (f"history: the harness {harness!r} keeps its own session, so its history cannot "
            f"be folded; set history.mode = \"all\" (or leave the history settings out)")


def embedded_budget(max_tokens: int) -> int:
    """The budget on the embedded model: its window less the reply and one round of tool
    calls within the turn (each up to ``max_tokens``), of which a share, for the estimate."""
    return int((N_CTX - 2 * max_tokens) * EMBEDDED_SHARE)


def resolve(cfg: HistoryConfig, agent: Agent) -> HistoryPolicy:
    """The policy for ``agent``'s seat. A harness that keeps its own session (one that
    overrides ``resume``) is sent only the new message, so nothing can be folded for it."""
    cpt = cfg.chars_per_token
    if cfg.mode == "all":
        return HistoryPolicy("all", chars_per_token=cpt)
    if not cfg.asks_to_fold and not agent.client.endpoint.is_local:
        return HistoryPolicy("all", chars_per_token=cpt, why="remote endpoint")
    if keeps_session(type(agent.harness)):
        if not cfg.asks_to_fold:
            return HistoryPolicy("all", chars_per_token=cpt, why="harness keeps its session")
        raise InterplayError(f"env.always_on.{session_problem(agent.harness.name)}")
    if cfg.bounded:
        return HistoryPolicy("fold", cfg.keep_wakes, cfg.max_context_tokens, cpt)
    sampling = {**agent.client.endpoint.sampling, **agent.spec.sampling}
    max_tokens = int(sampling.get("max_tokens") or DEFAULT_MAX_TOKENS)
    return HistoryPolicy("fold", None, embedded_budget(max_tokens), cpt, why="embedded model")


def tools_chars(tools: Sequence[Tool]) -> int:
    return len(json.dumps([t.spec() for t in tools], separators=(",", ":")))


def text_chars(text: str) -> int:
    """A text's characters as a message on the wire would carry it."""
    return len(Message("user", text).wire_json())


def floor_tokens(system: str | None, tools: Sequence[Tool], first_wake: str,
                 chars_per_token: float) -> int:
    """The estimate of a request that folds everything: the system prompt, the tools and one
    wake's lines (a budget below it can hold no turn)."""
    chars = tools_chars(tools) + text_chars(first_wake)
    if system:
        chars += len(Message("system", system).wire_json())
    return round(chars / chars_per_token)


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


@attrs.define
class _Line:
    wake: int
    text: str
    #: The user wrote, or the agent wrote to her: such lines are left out of a digest last.
    talk: bool


class HistoryFold:
    """One episode's folding: where each wake starts in the conversation, a digest line per
    finished wake, how far the fold has moved, and what each turn sent."""

    def __init__(self, policy: HistoryPolicy, *, tools: Sequence[Tool], system: str | None,
                 rules: str | None, timezone: str, user_name: str) -> None:
        self.policy = policy
        self.user_name = user_name
        #: The system prompt the opening turn sends; after it, the conversation holds it.
        self.system = system
        self.rules = rules
        self.timezone = timezone
        self.tools_chars = tools_chars(tools) if policy.mode == "fold" else 0
        #: Where each wake's messages start in the conversation (wake n at index n - 1).
        self.starts: list[int] = []
        self.lines: list[_Line] = []
        #: Wakes 1..folded are sent as the digest.
        self.folded = 0
        self.folded_turns = 0
        self._wake: dict[str, Any] = {}

    @property
    def folding(self) -> bool:
        return self.policy.mode == "fold"

    def begin(self, conversation: Sequence[Message]) -> None:
        """A wake begins: its messages start after ``conversation``."""
        self.starts.append(len(conversation))
        self._wake = {}

    def context(self, conversation: Sequence[Message], message: str) -> list[Message] | None:
        """What the coming turn sends, ending with ``message`` (None: the whole conversation).
        The digest opens the first wake sent in full (or ``message``), so roles alternate as
        they did and the system prompt stays as the task made it."""
        if not self.folding:
            return None
        cpt = self.policy.chars_per_token
        if len(self.starts) < 2:
            # Nothing earlier to fold: the whole conversation goes, as it is.
            opening = [Message("system", self.system)] if self.system and not conversation \
                else conversation
            self._note(0, 0, 0, self.tools_chars + text_chars(message)
                       + sum(len(m.wire_json()) for m in opening))
            return None
        if self.starts[0] == 0:
            # The first wake opened the chat: the system prompt the task made comes first.
            self.starts[0] = next((i for i, m in enumerate(conversation)
                                   if m.role != "system"), len(conversation))
        head = list(conversation[:self.starts[0]])
        earlier = len(self.starts) - 1
        sizes = [sum(len(m.wire_json()) for m in conversation[a:b])
                 for a, b in zip(self.starts, self.starts[1:], strict=False)]
        fixed = (self.tools_chars + text_chars(message)
                 + sum(len(m.wire_json()) for m in head)
                 + sum(len(m.wire_json()) for m in conversation[self.starts[-1]:]))
        budget, keep = self.policy.max_context_tokens, self.policy.keep_wakes
        folded, left_out = earlier, None
        for f in range(self.folded, earlier + 1):
            if keep is not None and earlier - f > keep:
                continue
            if budget is None or (fixed + sum(sizes[f:]) + self._digest_chars(f)) / cpt \
                    <= budget:
                folded, left_out = f, []
                break
        if left_out is None:
            left_out = self._left_out(earlier, fixed)
        self.folded = folded
        sent = [*conversation[self.starts[folded]:], Message("user", message)]
        digest = self.digest(folded, left_out)
        if digest:
            sent[0] = Message("user", f"{digest}\n\n{sent[0].text}")
            self.folded_turns += 1
        sent = [*head, *sent]
        self._note(folded, earlier - folded, len(left_out),
                   self.tools_chars + sum(len(m.wire_json()) for m in sent))
        return sent

    def _note(self, folded: int, kept: int, left_out: int, chars: int) -> None:
        """What this wake's turns sent (the largest estimate of its turns)."""
        est = max(round(chars / self.policy.chars_per_token), self._wake.get("est_tokens", 0))
        budget = self.policy.max_context_tokens
        self._wake = {"folded_wakes": folded, "kept_wakes": kept, "digest_left_out": left_out,
                      "est_tokens": est, "over_budget": budget is not None and est > budget}

    def end(self, entry: dict[str, Any], sent: Sequence[tuple[int, int, str]]) -> None:
        """A wake ended (``entry`` its timeline record, ``sent`` its messages to the user as
        number, task time in µs, text): its digest line is made, and what its turns sent is
        recorded on it."""
        self.lines.append(self._line(entry, sent))
        if self.folding:
            entry["context"] = self._wake

    # -- the digest ---------------------------------------------------------------------------

    def digest(self, folded: int, left_out: Sequence[int] = ()) -> str:
        """The digest of wakes 1..``folded`` (without the wakes in ``left_out``)."""
        if folded == 0:
            return ""
        gone = set(left_out)
        tz = "UTC" if self.timezone == "UTC" else self.timezone
        span = "wake 1" if folded == 1 else f"wakes 1-{folded}"
        out = [f"{MARK} Earlier in this run ({span}, folded to keep the conversation short; "
               f"times {tz}):"]
        if self.rules:
            out.append(f"{MARK} {self.rules}")
        if gone:
            out.append(f"({len(gone)} of these wakes are left out to fit the context.)")
        out += [line.text for line in self.lines[:folded] if line.wake not in gone]
        return "\n".join(out)

    def _digest_chars(self, folded: int) -> int:
        # Merged into a message's text: its own characters as the wire escapes them.
        return text_chars(self.digest(folded) + "\n\n") - text_chars("") if folded else 0

    def _left_out(self, folded: int, fixed: int) -> list[int]:
        """The wakes a digest of every earlier wake leaves out to fit the budget: first those
        without a word to or from the user, oldest first, then the oldest."""
        budget = self.policy.max_context_tokens
        if budget is None or folded == 0:
            return []
        order = [line.wake for line in self.lines[:folded] if not line.talk] + \
            [line.wake for line in self.lines[:folded] if line.talk]
        chars = fixed + self._digest_chars(folded)
        sizes = {line.wake: len(line.text) + 1 for line in self.lines[:folded]}
        out: list[int] = []
        for wake in order:
            if chars / self.policy.chars_per_token <= budget:
                break
            out.append(wake)
            chars -= sizes[wake]
        return out

    def _line(self, entry: dict[str, Any], sent: Sequence[tuple[int, int, str]]) -> _Line:
        tz, user_name = self.timezone, self.user_name
        wake_t = dt.datetime.fromisoformat(entry["at"]).timestamp()
        heard: list[str] = []
        talk = bool(sent)
        for s in entry["sources"]:
            kind = s["kind"]
            when = _when(s.get("due"), entry["at"])
            if kind in ("opening", "line"):
                heard.append(f'{when}{user_name} (the user) wrote: "'
                             f'{clip(s["text"], TALK_CHARS)}"')
            elif kind == "user_reply":
                about = f" to your #{s['reply_to']}" if s.get("reply_to") else ""
                heard.append(f'{when}{user_name} (the user) replied{about}: "'
                             f'{clip(s["text"], TALK_CHARS)}"')
            elif kind == "alert":
                heard.append(f'{when}alert from {s["source"]}: "'
                             f'{clip(s["text"], EVENT_CHARS)}"')
            elif kind == "contact_reply":
                heard.append(f'{when}{s["contact"]} answered: "{clip(s["text"], EVENT_CHARS)}"')
            elif kind == "check":
                heard.append(f'{when}your check #{s["check"]} was due: "'
                             f'{clip(s["text"], EVENT_CHARS)}"')
            talk = talk or kind in ("opening", "line", "user_reply")
        did: list[str] = []
        for call in entry.get("tool_calls", ()):
            if call["name"] in _SHOWN_OTHERWISE:
                continue
            args = ", ".join(f"{k}={clip(json.dumps(v, ensure_ascii=False), ARG_CHARS)}"
                             for k, v in (call.get("arguments") or {}).items())
            failed = " (failed)" if "error" in call else ""
            did.append(f"called {call['name']}({args}){failed}")
        for number, at_us, text in sent:
            when = times.local(at_us / 1e6, tz)
            did.append(f'sent #{number} at {when:%H:%M}: "{clip(text, TALK_CHARS)}"')
        if entry.get("quiet"):
            did.append("stayed quiet")
        head = f"- Wake {entry['wake']}, {times.readable(wake_t, tz).rsplit(' ', 1)[0]}: "
        text = head + ("; ".join(heard) or "woken") + ". You: " + ("; ".join(did) or
                                                                  "nothing") + "."
        return _Line(entry["wake"], text, talk)


def _when(due: str | None, wake_at: str) -> str:
    """A source's own time, when it is not the wake's minute (both ISO-8601, one zone)."""
    if due is None or due[:16] == wake_at[:16]:
        return ""
    return f"[{due[11:16]}] " if due[:10] == wake_at[:10] else f"[{due[:16].replace('T', ' ')}] "
