"""Registers the ``harbor`` env, its ``harbor`` step and verifier, Harbor's ``oracle`` and
``nop`` agents as harnesses, and the ``harbor`` export format (a run as a Harbor job folder):
the ``interplay`` entry point of this distribution."""

from __future__ import annotations

from interplay import Register, hookimpl


@hookimpl
def register_envs(register: Register) -> None:
    from interplay_harbor.env import HarborEnv

    register(HarborEnv)


@hookimpl
def register_steps(register: Register) -> None:
    from interplay_harbor.env import HarborTrial

    register(HarborTrial)


@hookimpl
def register_verifiers(register: Register) -> None:
    from interplay_harbor.verifier import HarborVerifier

    register(HarborVerifier)


@hookimpl
def register_harnesses(register: Register) -> None:
    from interplay_harbor.agents import HARNESSES

    for harness in HARNESSES:
        register(harness)


@hookimpl
def register_export_formats(register: Register) -> None:
    from interplay_harbor.export import HarborJob

    register(HarborJob)
