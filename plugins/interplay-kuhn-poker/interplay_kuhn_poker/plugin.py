"""Registers the ``kuhn-poker`` env and the ``kuhn_poker`` step (the ``interplay`` entry point
of this distribution)."""

from __future__ import annotations

from interplay import Register, hookimpl


@hookimpl
def register_envs(register: Register) -> None:
    from interplay_kuhn_poker.env import KuhnPokerEnv

    register(KuhnPokerEnv)


@hookimpl
def register_steps(register: Register) -> None:
    from interplay_kuhn_poker.env import KuhnPokerMatch

    register(KuhnPokerMatch)
