"""The ``interplay-trl`` command: ``train`` (a GRPO run on an env) and ``serve`` (a model,
the embedded one or a run's checkpoint, as an OpenAI-compatible endpoint for
``interplay eval --base-url``)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

from interplay import InterplayError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="interplay-trl", description="Train on interplay envs "
                                "with TRL's GRPOTrainer, on the trainer's live model.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="GRPO on an env; reward per step to OUT/rewards.jsonl, "
                       "checkpoints to OUT/checkpoint-N")
    t.add_argument("env", help="env name (`interplay list envs`) or env file")
    t.add_argument("-o", "--output", type=Path, required=True, help="the run's folder")
    t.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    t.add_argument("--tasks-per-step", type=int, default=2,
                   help="tasks per step, each a group (default 2)")
    t.add_argument("-g", "--generations", type=int, default=4,
                   help="rollouts per task: the GRPO group (default 4)")
    t.add_argument("--train-tasks", type=int, default=None,
                   help="train on the env's first N tasks (the rest are held out)")
    t.add_argument("--lr", type=float, default=1e-5, help="learning rate (default 1e-5)")
    t.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    t.add_argument("--max-tokens", type=int, default=64, help="tokens per model call")
    t.add_argument("--save-every", type=int, default=10, help="checkpoint every N steps")
    t.add_argument("--env-settings", default="{}", metavar="JSON",
                   help="the env's settings as a JSON object, e.g. "
                   "'{\"taskset\": \"tasks.jsonl\"}'")
    t.add_argument("--start", type=Path, default=None,
                   help="start from this checkpoint folder or GGUF (default: the embedded "
                   "model's GGUF)")
    t.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("serve", help="serve a checkpoint (or the embedded model's GGUF) as an "
                       "OpenAI-compatible endpoint; prints its URL")
    s.add_argument("model", nargs="?", type=Path, default=None,
                   help="a checkpoint folder or GGUF (default: the embedded model's GGUF)")
    s.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
        return _serve(args)
    except InterplayError as exc:
        print(f"interplay-trl: {exc}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace) -> int:
    from interplay_trl.train import TrainOptions, train

    try:
        settings = json.loads(args.env_settings)
    except ValueError:
        raise InterplayError("--env-settings must be a JSON object") from None
    if not isinstance(settings, dict):
        raise InterplayError("--env-settings must be a JSON object")
    final = train(TrainOptions(
        env=args.env, output=args.output, steps=args.steps, tasks_per_step=args.tasks_per_step,
        generations=args.generations, train_tasks=args.train_tasks, learning_rate=args.lr,
        temperature=args.temperature, max_tokens=args.max_tokens, save_every=args.save_every,
        env_settings=settings, start=args.start, seed=args.seed))
    print(f"trained: {final} (rewards per step: {args.output / 'rewards.jsonl'})")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from interplay_trl.policy import PolicyModel, PolicyServer
    from interplay_trl.train import load_policy

    model, tokenizer = load_policy(args.model)
    name = args.model.name if args.model is not None else "policy"
    with PolicyServer(PolicyModel(model, tokenizer, name=name), port=args.port) as server:
        print(server.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
