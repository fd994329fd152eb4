"""Registers the tau2 envs (one per domain), the ``tau2`` step, the ``tau2`` user sim (tau2's
own user simulator, the envs' default user), the ``tau2`` verifier and the ``tau2`` export
format (the ``interplay`` entry point of this distribution). tau2 itself is imported only when
a domain is played, scored or exported."""

from __future__ import annotations

from interplay import Register, hookimpl


@hookimpl
def register_envs(register: Register) -> None:
    from interplay_tau2.env import ENVS

    for env in ENVS:
        register(env)


@hookimpl
def register_user_sims(register: Register) -> None:
    from interplay_tau2.user import Tau2UserSim

    register(Tau2UserSim)


@hookimpl
def register_steps(register: Register) -> None:
    from interplay_tau2.exchange import Tau2Exchange

    register(Tau2Exchange)


@hookimpl
def register_verifiers(register: Register) -> None:
    from interplay_tau2.scoring import Tau2Reward

    register(Tau2Reward)


@hookimpl
def register_export_formats(register: Register) -> None:
    from interplay_tau2.export import Tau2Results

    register(Tau2Results)
