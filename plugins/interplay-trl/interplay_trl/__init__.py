"""interplay-trl: train on interplay envs with Hugging Face TRL's ``GRPOTrainer``.

:class:`EnvRollouts` is a ``rollout_func`` that runs any env through :class:`interplay.run.Rollouts`
for the trainer's prompts and returns token-exact rows; :class:`PolicyModel` and
:class:`PolicyServer` serve the trainer's live model to the env as an OpenAI-compatible
endpoint; :func:`load_policy` loads the embedded model's GGUF as a trainable model;
:func:`train` is the ``interplay-trl train`` run. torch and transformers are imported when
used, not on import.
"""

from interplay_trl.policy import PolicyModel, PolicyServer
from interplay_trl.rollout import EnvRollouts, Row, env_reward, task_key, trace_row
from interplay_trl.train import TrainOptions, embedded_gguf, load_policy, train

__all__ = ["EnvRollouts", "PolicyModel", "PolicyServer", "Row", "TrainOptions", "embedded_gguf",
           "env_reward", "load_policy", "task_key", "trace_row", "train"]
