"""Registers the builtin envs, steps, user sims and scenario kinds (listed in
interplay.plugins.host.DEFAULT_PLUGINS)."""

from __future__ import annotations

from interplay.plugins.hookspecs import Register, hookimpl


@hookimpl
def register_envs(register: Register) -> None:
    from interplay.builtin_envs.always_on.generated import GeneratedEnv
    from interplay.builtin_envs.envs import EchoEnv, UserSimEnv, data_file
    from interplay.builtin_envs.puzzles import AlphabetSortEnv, ColorCodewordEnv
    from interplay.builtin_envs.shop import UserSimToolsEnv
    from interplay.builtin_envs.wordle import WordleEnv
    from interplay.builtin_envs.workspace import WorkspaceEnv

    register(EchoEnv)
    register(UserSimEnv)
    register(AlphabetSortEnv)
    register(ColorCodewordEnv)
    register(WordleEnv)
    register(UserSimToolsEnv)
    register(WorkspaceEnv)
    # An env written as a TOML file of steps, registered by its path.
    register(data_file("echo_toml.toml"))
    # always_on scenarios, registered by their paths like any scenario file.
    register(data_file("always_on_week.toml"))
    register(data_file("always_on_sitting.toml"))
    register(data_file("always_on_month.json"))
    register(GeneratedEnv)


@hookimpl
def register_steps(register: Register) -> None:
    from interplay.builtin_envs.always_on.step import AlwaysOn
    from interplay.builtin_envs.puzzles import AlphabetSort, ColorCodeword
    from interplay.builtin_envs.shop import InitState
    from interplay.builtin_envs.steps import OneShot, Relay
    from interplay.builtin_envs.user_sim_step import UserSimStep
    from interplay.builtin_envs.wordle import Wordle

    register(OneShot)
    register(Relay)
    register(AlphabetSort)
    register(ColorCodeword)
    register(Wordle)
    register(InitState)
    register(UserSimStep)
    register(AlwaysOn)


@hookimpl
def register_user_sims(register: Register) -> None:
    from interplay.builtin_envs.llm_user import LlmUserSim

    register(LlmUserSim)


@hookimpl
def register_scenario_kinds(register: Register) -> None:
    from interplay.builtin_envs.always_on.errands import Errands

    register(Errands)
