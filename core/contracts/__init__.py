"""The contracts a plugin implements: ``env``, ``harness``, ``step``, ``verifier``, ``usersim``,
``sandbox``, ``exporter`` (an export format) and ``scenario`` (a scenario kind for always_on
tasks); and what they are handed (``contexts``: protocols the run implements, and the episode's
store)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interplay._plumbing.facade import lazy_names

if TYPE_CHECKING:
    from interplay.contracts.contexts import EpisodeStore, SegmentClient
    from interplay.contracts.env import EnvOptions
    from interplay.contracts.harness import text_prompt
    from interplay.contracts.sandbox import (
        BoundedOutput,
        ExecResult,
        Mount,
        NotReachable,
        SandboxNeeds,
        SandboxPlan,
    )
    from interplay.contracts.scenario import generate_tasks
    from interplay.contracts.usersim import (
        PhoneNote,
        Read,
        ReadMessage,
        SentLine,
        answer_or_error,
        chosen_user_sim,
    )
    from interplay.contracts.usersim import set_up as set_up_user_sim

_NAMES = {
    "BoundedOutput": "interplay.contracts.sandbox:BoundedOutput",
    "EnvOptions": "interplay.contracts.env:EnvOptions",
    "EpisodeStore": "interplay.contracts.contexts:EpisodeStore",
    "ExecResult": "interplay.contracts.sandbox:ExecResult",
    "Mount": "interplay.contracts.sandbox:Mount",
    "NotReachable": "interplay.contracts.sandbox:NotReachable",
    "PhoneNote": "interplay.contracts.usersim:PhoneNote",
    "Read": "interplay.contracts.usersim:Read",
    "ReadMessage": "interplay.contracts.usersim:ReadMessage",
    "SandboxNeeds": "interplay.contracts.sandbox:SandboxNeeds",
    "SandboxPlan": "interplay.contracts.sandbox:SandboxPlan",
    "SegmentClient": "interplay.contracts.contexts:SegmentClient",
    "SentLine": "interplay.contracts.usersim:SentLine",
    "answer_or_error": "interplay.contracts.usersim:answer_or_error",
    "chosen_user_sim": "interplay.contracts.usersim:chosen_user_sim",
    "generate_tasks": "interplay.contracts.scenario:generate_tasks",
    "set_up_user_sim": "interplay.contracts.usersim:set_up",
    "text_prompt": "interplay.contracts.harness:text_prompt",
}
__all__ = [
    "BoundedOutput",
    "EnvOptions",
    "EpisodeStore",
    "ExecResult",
    "Mount",
    "NotReachable",
    "PhoneNote",
    "Read",
    "ReadMessage",
    "SandboxNeeds",
    "SandboxPlan",
    "SegmentClient",
    "SentLine",
    "answer_or_error",
    "chosen_user_sim",
    "generate_tasks",
    "set_up_user_sim",
    "text_prompt",
]
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
