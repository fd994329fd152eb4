"""User simulators for interplay: ``scripted``, ``replay``, ``tau`` and ``busy-person``.

Each is an ``interplay.UserSim`` registered through this distribution's ``interplay`` entry
point (:mod:`interplay_user_sims.plugin`) and works in the user-sim relay and in always_on.
"""
