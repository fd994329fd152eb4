"""tau2-bench on interplay: tau2's domains as envs, its user simulator as the envs' default user
sim, any harness in the agent's seat, scored by tau2's own evaluator.

What another plugin builds on is importable from here (the plugin's own API): the ``tau2``
verifier and its settings, to subclass (``class Mine(Tau2Reward)``), the ``tau2`` user sim,
and the ``tau2`` step's settings. Importing it does not import tau2 itself.
"""

from interplay_tau2.exchange import ExchangeConfig, StepConfig, Tau2Exchange
from interplay_tau2.scoring import Tau2Reward, Tau2RewardConfig
from interplay_tau2.user import Tau2UserConfig, Tau2UserSim

__all__ = ["ExchangeConfig", "StepConfig", "Tau2Exchange", "Tau2Reward", "Tau2RewardConfig",
           "Tau2UserConfig", "Tau2UserSim"]
