"""OpenEnv environments as interplay envs, on the real library.

How replies become actions and observations messages: :mod:`interplay_openenv.schema`; the
server's protocol and its failures: :mod:`interplay_openenv.session`; an app served for a run:
:mod:`interplay_openenv.server`; the env, its step and its verifier:
:mod:`interplay_openenv.env`; a small environment to try it on: :mod:`interplay_openenv.demo`;
the hook implementation: :mod:`interplay_openenv.plugin` (found through the ``interplay``
entry-point group).
"""

from __future__ import annotations

__version__ = "0.1.0"
