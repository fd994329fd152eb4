"""Registers the user sims ``scripted``, ``replay``, ``tau`` and ``busy-person`` (the
``interplay`` entry point of this distribution)."""

from __future__ import annotations

from interplay import Register, hookimpl


@hookimpl
def register_user_sims(register: Register) -> None:
    from interplay_user_sims.busy import BusyPerson
    from interplay_user_sims.replay import ReplayUser
    from interplay_user_sims.scripted import ScriptedUser
    from interplay_user_sims.tau import TauUser

    register(ScriptedUser)
    register(ReplayUser)
    register(TauUser)
    register(BusyPerson)
