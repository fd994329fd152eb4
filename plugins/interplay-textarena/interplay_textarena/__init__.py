"""TextArena games as interplay envs, on the real library.

How a game is made, seeded, observed, played and closed lives in
:mod:`interplay_textarena.game`; the env, its referee step and its verifier in
:mod:`interplay_textarena.env`; the hook implementations in :mod:`interplay_textarena.plugin`
(found through the ``interplay`` entry-point group). Importing this package does not import
textarena.
"""

from __future__ import annotations

__version__ = "0.1.0"
