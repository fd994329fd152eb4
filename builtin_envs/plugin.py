"""Registers the builtin envs, steps and user sims (listed in
interplay.plugins.DEFAULT_PLUGINS)."""

from __future__ import annotations

from interplay import hookimpl
from interplay.hookspecs import Register


@hookimpl
def register_envs(register: Register) -> None:
    from interplay.builtin_envs.envs import EchoEnv, UserSimEnv

    register(EchoEnv)
    register(UserSimEnv)


@hookimpl
def register_steps(register: Register) -> None:
    from interplay.builtin_envs.steps import OneShot, Relay

    register(OneShot)
    register(Relay)


@hookimpl
def register_user_sims(register: Register) -> None:
    from interplay.builtin_envs.usersims import LlmUserSim

    register(LlmUserSim)
