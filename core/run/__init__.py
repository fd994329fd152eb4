"""The run: agents and chat sessions (:mod:`~interplay.run.agent`), episodes
(:mod:`~interplay.run.episode`), and ``interplay eval``'s machinery: its config, the results
folder, the summary, the progress display, and the processes episodes run in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interplay._plumbing.facade import lazy_names

if TYPE_CHECKING:
    from interplay.run.agent import Agent
    from interplay.run.episode import RunResources, run_episode
    from interplay.run.loader import env_from_toml
    from interplay.run.results import whole_record
    from interplay.run.rollouts import RolloutGroup, Rollouts

_NAMES = {
    "Agent": "interplay.run.agent:Agent",
    "RolloutGroup": "interplay.run.rollouts:RolloutGroup",
    "Rollouts": "interplay.run.rollouts:Rollouts",
    "RunResources": "interplay.run.episode:RunResources",
    "env_from_toml": "interplay.run.loader:env_from_toml",
    "run_episode": "interplay.run.episode:run_episode",
    "whole_record": "interplay.run.results:whole_record",
}
__all__ = [
    "Agent",
    "RolloutGroup",
    "Rollouts",
    "RunResources",
    "env_from_toml",
    "run_episode",
    "whole_record",
]
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
