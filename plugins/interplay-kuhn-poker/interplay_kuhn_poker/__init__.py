"""Kuhn poker for interplay: a two-seat self-play env refereed by the host.

The rules live in :mod:`interplay_kuhn_poker.rules` (pure Python, no model), what each seat is
told and how its reply is read in :mod:`interplay_kuhn_poker.messages`, the referee step and the
env in :mod:`interplay_kuhn_poker.env`, scripted baseline players in
:mod:`interplay_kuhn_poker.strategies`, and the hook implementations in
:mod:`interplay_kuhn_poker.plugin` (found through the ``interplay`` entry-point group).
"""

from __future__ import annotations

__version__ = "0.1.0"
