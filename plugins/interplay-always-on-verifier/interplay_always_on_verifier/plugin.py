"""Registers ``always_on_agent_verifier`` (the ``interplay`` entry point of this distribution)."""

from __future__ import annotations

from interplay import Register, hookimpl


@hookimpl
def register_verifiers(register: Register) -> None:
    from interplay_always_on_verifier.verifier import AlwaysOnAgentVerifier

    register(AlwaysOnAgentVerifier)
