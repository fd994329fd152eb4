"""Registers the ``textarena`` env, step and verifier (the ``interplay`` entry point of this
distribution). textarena itself is imported only when a game is described or played."""

from __future__ import annotations

from interplay import Register, hookimpl


@hookimpl
def register_envs(register: Register) -> None:
    from interplay_textarena.env import TextArenaEnv

    register(TextArenaEnv)


@hookimpl
def register_steps(register: Register) -> None:
    from interplay_textarena.env import TextArenaMatch

    register(TextArenaMatch)


@hookimpl
def register_verifiers(register: Register) -> None:
    from interplay_textarena.env import GameReward

    register(GameReward)
