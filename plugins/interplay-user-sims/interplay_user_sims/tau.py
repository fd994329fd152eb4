"""``tau``: the tau2-bench user, played by an LLM from an instruction set.

The instruction set is the reason for the call, what she knows, what she does not know, and
how to go about the task: from the task (``info.instructions``, or the key ``info_key`` names;
tau2's ``user_scenario`` with its ``instructions`` table is read too), else from the person
(``info["instructions"]``: the tau2 envs give each task's own there), else from the settings,
else the person's scenario as the reason for the call. She opens with the reason alone, gives
a piece of what she knows only when the assistant asks for it, and says she does not know
anything not in her instructions rather than making it up.

She ends with the stop token (the goal is met), the transfer token (she was transferred to
someone else) or the out-of-scope token (her instructions do not cover what comes next): each
alone or ending her message, compared exactly (case and all). A token inside a message is
malformed and asked for again once, like a blank reply in always_on.

Dual control: when her seat has tools (in the relay the env's tools for her seat, in
always_on the apps' tools the ``user_sim`` step's ``tools`` name), she is told she may use them
when the assistant asks her to do something on her side; her seat needs a tool-running
harness (``chat``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from interplay import Answer, InterplayError, LlmUserSim, Person, fill_placeholders, reply_target_of
from interplay.contracts import Read

TEMPLATE = (
    "You are playing a customer who contacts an assistant. Never act as the assistant.\n"
    "{persona}"
    "Your instructions:\n{instructions}\n\n"
    "Rules:\n"
    "- Write one message at a time, in a sentence or two, as the customer would.\n"
    "- Start with the reason for your call only. Give a piece of what you know only when the "
    "assistant asks for it.\n"
    "- Never make up anything that is not in your instructions: if you are asked for it, say "
    "you do not know or do not have it.\n"
    "{tools}"
    "- When your goal is met, end your message with {stop}.\n"
    "- If you are transferred to someone else, reply with only {transfer}.\n"
    "- If your instructions do not say what to do next, reply with only {out_of_scope}."
)
TOOLS = ("- You can act on your own side with your tools ({names}): use one only when the "
         "assistant asks you to, then say what you did and saw.\n")
SECTIONS = (("reason_for_call", "Reason for your call"), ("known_info", "What you know"),
            ("unknown_info", "What you do not know"),
            ("task_instructions", "How to go about it"))
BLANK = "Your reply was empty. Write only your next message to the assistant."


@attrs.define
class Instructions:
    #: Why she is calling (tau's reason_for_call).
    reason_for_call: str = ""
    #: What she knows and may tell (tau's known_info).
    known_info: str = ""
    #: What she does not know (tau's unknown_info).
    unknown_info: str = ""
    #: How she goes about it (tau's task_instructions).
    task_instructions: str = ""

    def render(self) -> str:
        return "\n".join(f"{title}: {getattr(self, key)}" for key, title in SECTIONS
                         if getattr(self, key).strip())


@attrs.define
class TauConfig:
    #: The seat whose model plays her (an untrainable seat of the env).
    seat: str = "user"
    #: Used when the task has none.
    instructions: Instructions = attrs.Factory(Instructions)
    #: The task ``info`` key holding her instruction set.
    info_key: str = "instructions"
    #: What she writes when her goal is met: the exchange ends.
    stop_token: str = "###STOP###"
    #: What she writes when she was transferred to someone else: the exchange ends.
    transfer_token: str = "###TRANSFER###"
    #: What she writes when her instructions do not cover what comes next: the exchange ends.
    out_of_scope_token: str = "###OUT-OF-SCOPE###"
    #: What her model is asked for her first message (when the task gives no opening line).
    opening: str = "Write your first message to the assistant."
    #: always_on: her whole reply when she has nothing to say.
    nothing_marker: str = "###NOTHING###"


def instructions_from(raw: Any, where: str) -> Instructions:
    """An instruction set from a task: a table of the four sections (or tau2's
    ``user_scenario``, whose ``instructions`` table holds them), or a string (the task
    instructions)."""
    if isinstance(raw, str):
        return Instructions(task_instructions=raw)
    if isinstance(raw, Mapping) and isinstance(raw.get("instructions"), Mapping | str):
        return instructions_from(raw["instructions"], f"{where}.instructions")
    if not isinstance(raw, Mapping):
        raise InterplayError(f"{where}: expected a table of {', '.join(k for k, _ in SECTIONS)}, "
                             f"got {type(raw).__name__}")
    unknown = set(raw) - {k for k, _ in SECTIONS} - {"domain"}
    if unknown:
        raise InterplayError(f"{where}: unknown key {', '.join(sorted(unknown))}; allowed: "
                             f"{', '.join(k for k, _ in SECTIONS)}")
    return Instructions(**{k: str(raw.get(k) or "") for k, _ in SECTIONS})


class TauUser(LlmUserSim):
    """The tau2-bench user: an instruction set, revealed only when asked, with stop tokens."""

    name = "tau"
    Config: ClassVar[type] = TauConfig

    def configure(self, settings: Mapping[str, Any] | Any) -> None:
        super().configure(settings)
        tokens = self.tokens()
        if any(not t.strip() for t, _ in tokens) or len({t for t, _ in tokens}) < len(tokens):
            raise InterplayError("user_sim.tau: stop_token, transfer_token and "
                                 "out_of_scope_token must be set and differ")

    def task_opening(self) -> str | None:
        """None: as in tau2-bench, she writes her first message herself, from her
        instructions (a task's ``info.opening`` is for the builtin user sim)."""
        return None

    def tokens(self) -> list[tuple[str, str]]:
        cfg: TauConfig = self.config
        return [(cfg.stop_token, "stop"), (cfg.transfer_token, "transfer"),
                (cfg.out_of_scope_token, "out_of_scope")]

    def system_prompt(self, person: Person) -> str:
        cfg: TauConfig = self.config
        task = self.ctx.task
        raw = task.info.get(cfg.info_key)
        given = person.info.get("instructions")
        if raw is not None:
            instructions = instructions_from(raw, f"task {task.idx} info.{cfg.info_key}")
        elif given is not None:
            instructions = instructions_from(given, f"task {task.idx}'s person: instructions")
        elif cfg.instructions.render():
            instructions = cfg.instructions
        else:
            instructions = Instructions(reason_for_call=person.scenario)
        agent = self.ctx.agent(cfg.seat)
        names = [t.name for t in agent.tools]
        if names and agent.spec.harness == "null":
            raise InterplayError(f"tau: her tools ({', '.join(names)}) need a harness that runs "
                                 f"tools on seat {cfg.seat!r}; set seats.{cfg.seat}.harness = "
                                 f"\"chat\"")
        persona = f"Who you are: {person.description}\n" if person.description else ""
        # One pass: her description or instructions may hold a placeholder's text (a persona
        # that mentions "{stop}"), which must stay as she wrote it.
        return fill_placeholders(TEMPLATE, {
            "persona": persona,
            "tools": TOOLS.format(names=", ".join(names)) if names else "",
            "stop": cfg.stop_token, "transfer": cfg.transfer_token,
            "out_of_scope": cfg.out_of_scope_token,
            "instructions": instructions.render(),
        })

    def done_line(self) -> str:
        # The step's done marker is not hers: her stop token ends the chat.
        return f"When your goal is met, end your message with {self.config.stop_token}."

    def parse(self, text: str, read: Read) -> Answer | str:
        cfg: TauConfig = self.config
        if not text:
            return Answer("") if not read.local_time else BLANK
        if read.local_time and text == cfg.nothing_marker:
            return Answer("", nothing=True)
        done_reason = ""
        for token, reason in self.tokens():
            if text.endswith(token) and token not in text[:-len(token)]:
                text, done_reason = text[:-len(token)].strip(), reason
                break
        else:
            for token, _ in self.tokens():
                if token in text:
                    return (f"Your message had {token} inside it. Write your message to the "
                            f"assistant; {token} may only end it, or be your whole reply.")
        replying_to, text = reply_target_of(text) if read.local_time else (None, text)
        return Answer(text, done=bool(done_reason), done_reason=done_reason,
                      replying_to=replying_to)
