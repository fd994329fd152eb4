"""The ``tau2`` user sim: tau2-bench's own user simulator, the default user of the tau2 envs.

Her system prompt is tau2's (``user_simulator.SYSTEM_PROMPT``: its global guidelines, with or
without tools as the domain gives her tools, and the task's user scenario as her
instructions); the assistant's greeting is her first read; she ends the conversation with one
of tau2's tokens (``###STOP###``, ``###TRANSFER###``, ``###OUT-OF-SCOPE###``) anywhere in her
message, as tau2 reads them. In telecom her seat's tools are hers (the env gives the user seat
tau2's user tools on her own device). Her model is the user seat's; an empty reply is passed
on as tau2's relay passes it, never asked again.

What she needs of the task comes in the Person the ``tau2`` step gives her: the scenario
(``str(task.user_scenario)``, tau2's own rendering) and ``info["tau2"]["user_tools"]``.
Any other user sim gets the same Person (:mod:`interplay_tau2.exchange`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from interplay import Answer, LlmUserSim, Person
from interplay.contracts import Read
from interplay_tau2 import domains

#: tau2's tokens that end the conversation, and the done_reason each is recorded with.
TOKENS = {"###STOP###": "stop", "###TRANSFER###": "transfer", "###OUT-OF-SCOPE###": "out_of_scope"}


@attrs.define
class Tau2UserConfig:
    """The ``tau2`` user sim's settings."""

    #: The seat whose model plays her (the tau2 step gives its user_seat).
    seat: str = "user"


def ending(text: str) -> str:
    """The done_reason of the first of tau2's tokens in ``text`` ("" when none is): tau2's
    own reading (``UserSimulator.is_stop``: the token anywhere in the message)."""
    found = [(text.find(token), reason) for token, reason in TOKENS.items() if token in text]
    return min(found)[1] if found else ""


class Tau2UserSim(LlmUserSim):
    """tau2-bench's user simulator: tau2's system prompt and the task's user scenario, her own
    tools in telecom; she ends with tau2's stop, transfer or out-of-scope token."""

    name = "tau2"
    Config: ClassVar[type] = Tau2UserConfig

    def system_prompt(self, person: Person) -> str:
        sim = domains.tau2().user_simulator
        tau2_info: dict[str, Any] = person.info.get("tau2") or {}
        return str(sim.SYSTEM_PROMPT.format(
            global_user_sim_guidelines=sim.get_global_user_sim_guidelines(
                use_tools=bool(tau2_info.get("user_tools"))),
            instructions=person.scenario))

    def parse(self, text: str, read: Read) -> Answer:
        # Her words as written, the token kept: tau2's trajectory holds them so.
        reason = ending(text)
        return Answer(text=text, done=bool(reason), done_reason=reason)
