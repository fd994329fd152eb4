"""The builtin envs and steps, registered by name, and what a plugin builds on: the relay step
(:class:`Relay`, :class:`RelayConfig`, :func:`person_from_task`) for an env with a modeled user,
the LLM-played user sim (:class:`LlmUserSim`, :class:`LlmUserConfig`, :func:`reply_target_of`,
:func:`fill_placeholders`) to subclass, and the shop's start state (:class:`InitState`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interplay._plumbing.facade import lazy_names

if TYPE_CHECKING:
    from interplay.builtin_envs.llm_user import (
        LlmUserConfig,
        LlmUserSim,
        fill_placeholders,
        person_from_task,
        reply_target_of,
    )
    from interplay.builtin_envs.shop import InitState, InitStateConfig
    from interplay.builtin_envs.steps import Relay, RelayConfig

_NAMES = {
    "InitState": "interplay.builtin_envs.shop:InitState",
    "InitStateConfig": "interplay.builtin_envs.shop:InitStateConfig",
    "LlmUserConfig": "interplay.builtin_envs.llm_user:LlmUserConfig",
    "LlmUserSim": "interplay.builtin_envs.llm_user:LlmUserSim",
    "Relay": "interplay.builtin_envs.steps:Relay",
    "RelayConfig": "interplay.builtin_envs.steps:RelayConfig",
    "fill_placeholders": "interplay.builtin_envs.llm_user:fill_placeholders",
    "person_from_task": "interplay.builtin_envs.llm_user:person_from_task",
    "reply_target_of": "interplay.builtin_envs.llm_user:reply_target_of",
}
__all__ = [
    "InitState",
    "InitStateConfig",
    "LlmUserConfig",
    "LlmUserSim",
    "Relay",
    "RelayConfig",
    "fill_placeholders",
    "person_from_task",
    "reply_target_of",
]
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
