"""Registers the ``openenv`` env (the ``interplay`` entry point of this distribution).

Its step and verifier are not registered on their own: the step shares the env's server (a URL
or a local app started once per run), which only the env holds. openenv-core is imported when
the env is loaded, not when plugins are listed.
"""

from __future__ import annotations

from interplay import Register, hookimpl


@hookimpl
def register_envs(register: Register) -> None:
    from interplay_openenv.env import OpenEnvEnv

    register(OpenEnvEnv)
