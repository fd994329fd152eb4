"""interplay envs as TRL GRPO rollouts: :class:`EnvRollouts` is a ``rollout_func`` for
``GRPOTrainer`` that runs an env's episodes through :class:`interplay.run.Rollouts` against the
trainer's live model (served by :mod:`interplay_trl.policy`) and hands back one token-exact
row per episode.

The trainer's prompts are task keys (:meth:`EnvRollouts.dataset` makes the dataset of them);
they arrive repeated ``num_generations`` times, each run of one key one task's group, run as
that many rollouts of the task. Each row is the trained seat's trace as one sequence: the
first call's ``prompt_ids``, then in ``completion_ids`` every call's sampled ids and, between
them, what the next call's prompt added (the user's turns, tool results), with ``env_mask`` 1
on the sampled ids and 0 on the added ones, and ``logprobs`` as the policy computed them (0.0
on the added ones). The env's reward goes to the reward functions as ``env_reward``
(:func:`env_reward` is the reward function that reads it).

An episode that ended in an error, or whose trace is no one sequence, cannot be trained on:
its row is the end-of-turn token alone, masked out, with reward None, which TRL counts as
unscorable (left out of its group's baseline, advantage 0).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from interplay import Endpoint, Episode, InterplayError, Task, Trace, get_logger
from interplay.run import Rollouts

log = get_logger("interplay_trl.rollout")

KEY_PREFIX = "interplay-task:"


def task_key(task: Task) -> str:
    """The prompt a task is known by in the trainer's dataset."""
    return f"{KEY_PREFIX}{task.idx}"


@attrs.define
class Row:
    """One episode's training row (see the module docstring)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    env_mask: list[int]
    reward: float | None
    #: Why the episode could not be trained on (None: it can).
    unusable: str | None = None


def trace_row(trace: Trace, reward: float | None, eos: int) -> Row:
    """The trace as one sequence; a masked-out row when it is not one (see the module
    docstring)."""
    calls = [c for c in trace.model_calls if c.error_type is None]
    tokens = [c.tokens for c in calls]
    if not calls or any(t is None or t.prompt_ids is None or t.completion_ids is None
                        or t.logprobs is None for t in tokens):
        return _unusable(calls, eos, "a model call without token ids")
    sequence = list(tokens[0].prompt_ids)
    prompt = list(sequence)
    completion: list[int] = []
    logprobs: list[float] = []
    mask: list[int] = []
    for t in tokens:
        ids = list(t.prompt_ids)
        if ids[:len(sequence)] != sequence:
            return _unusable(calls, eos, "a call that does not continue the previous one")
        added = ids[len(sequence):]
        sampled = list(t.completion_ids)
        completion += added + sampled
        logprobs += [0.0] * len(added) + list(t.logprobs)
        mask += [0] * len(added) + [1] * len(sampled)
        sequence = ids + sampled
    return Row(prompt, completion, logprobs, mask, reward)


def _unusable(calls: Sequence[Any], eos: int, why: str) -> Row:
    first = next((c.tokens.prompt_ids for c in calls
                  if c.tokens is not None and c.tokens.prompt_ids is not None), None)
    return Row(list(first) if first is not None else [eos], [eos], [0.0], [0], None,
               unusable=why)


def env_reward(completions: list[Any], env_reward: list[float | None],
               **_: Any) -> list[float | None]:
    """The reward function of an env's rollouts: the env's own reward of each episode."""
    return list(env_reward)


class EnvRollouts:
    """A ``rollout_func`` running ``env`` (a name, env file or Env) for the trainer's prompts.

    ``base_url`` is the policy's endpoint (:class:`interplay_trl.policy.PolicyServer`);
    ``seat`` the seat trained (its trace makes the rows; the others, a modeled user, run as
    their own settings say); ``eos`` the policy's end-of-turn id. ``sampling`` applies to the
    trained seat's calls (temperature, max_tokens). ``output``: each step's episodes go to
    ``output/train-NNNNN/episodes.jsonl``, for ``interplay report`` and ``export``.
    ``on_rows`` is handed each step's episodes and their rows, in the trainer's order.
    """

    def __init__(self, env: Any, *, base_url: str, eos: int, seat: str = "assistant",
                 env_settings: dict[str, Any] | None = None,
                 sampling: dict[str, Any] | None = None,
                 seats: dict[str, dict[str, Any]] | None = None, concurrency: int = 4,
                 output: str | Path | None = None, seed: int = 0,
                 on_rows: Callable[[list[Episode], list[Row]], None] | None = None) -> None:
        self.endpoint = Endpoint(base_url=base_url, model="policy", capture_tokens=True,
                                 timeout_s=600.0, max_retries=0)
        self.env, self.env_settings = env, env_settings
        self.seat, self.eos = seat, eos
        self.seats = {**(seats or {})}
        # Calls wait their turn for the one model: on a CPU a segment may take many minutes,
        # and a segment cut by the seat's usual limit (600 s) is an episode lost.
        self.seats[seat] = {"timeout_s": 3600.0, **self.seats.get(seat, {})}
        if sampling:
            self.seats[seat] = {**self.seats[seat],
                                "sampling": {**self.seats[seat].get("sampling", {}),
                                             **sampling}}
        self.concurrency = concurrency
        self.output = Path(output) if output is not None else None
        self.seed = seed
        self.on_rows = on_rows
        self.steps = 0
        self._tasks: dict[str, Task] = {}
        #: Each step's rewards and unusable episodes (what :mod:`interplay_trl.train` writes).
        self.history: list[dict[str, Any]] = []

    def _runner(self, output: Path | None = None) -> Rollouts:
        # Each step's episodes get seeds of their own: the same seeds every step would sample
        # the same user turns and settings again.
        return Rollouts(self.env, model=self.endpoint, env_settings=self.env_settings,
                        seats=self.seats, concurrency=self.concurrency,
                        seed=self.seed + 7919 * self.steps, output=output)

    def tasks(self, n: int | None = None, *, skip: int = 0) -> list[Task]:
        """The env's tasks (``n`` of them after the first ``skip``), known from now on by
        their keys."""
        runner = self._runner()
        found = list(runner.env.tasks())[skip:]
        found = found[:n] if n is not None else found
        for task in found:
            self._tasks[task_key(task)] = task
        return found

    def dataset(self, n: int | None = None, *, skip: int = 0) -> Any:
        """A ``datasets.Dataset`` of task keys, the trainer's ``train_dataset``."""
        from datasets import Dataset

        return Dataset.from_dict({"prompt": [task_key(t) for t in self.tasks(n, skip=skip)]})

    def __call__(self, prompts: list[Any], trainer: Any = None) -> dict[str, list[Any]]:
        rows = asyncio.run(self.run(prompts))
        return {"prompt_ids": [r.prompt_ids for r in rows],
                "completion_ids": [r.completion_ids for r in rows],
                "logprobs": [r.logprobs for r in rows],
                "env_mask": [r.env_mask for r in rows],
                "env_reward": [r.reward for r in rows]}

    async def run(self, prompts: Sequence[Any]) -> list[Row]:
        """One row per prompt, in their order (see the module docstring)."""
        keys = [str(p) for p in prompts]
        unknown = sorted({k for k in keys if k not in self._tasks})
        if unknown:
            raise InterplayError(f"prompt {unknown[0]!r} is no task of this rollout function; "
                                 f"make the trainer's dataset with EnvRollouts.dataset()")
        counts = Counter(keys)
        by_k: dict[int, list[Task]] = {}
        for key, k in counts.items():
            by_k.setdefault(k, []).append(self._tasks[key])
        output = self.output / f"train-{self.steps:05d}" if self.output is not None else None
        self.steps += 1
        episodes: dict[str, list[Episode]] = {}
        async with self._runner(output) as runner:
            for k, tasks in by_k.items():
                async for group in runner.groups(tasks, k=k):
                    episodes[task_key(group.task)] = list(group.episodes)
        rows = []
        ordered = []
        taken: Counter[str] = Counter()
        for key in keys:
            episode = episodes[key][taken[key]]
            taken[key] += 1
            ordered.append(episode)
            rows.append(self.row(episode))
        if self.on_rows is not None:
            self.on_rows(ordered, rows)
        rewards = [r.reward for r in rows if r.reward is not None]
        self.history.append({"episodes": len(rows), "rewards": rewards,
                             "unusable": Counter(r.unusable for r in rows if r.unusable)})
        log.info("trl.rollouts", episodes=len(rows), scored=len(rewards),
                 unusable=len(rows) - sum(1 for r in rows if r.unusable is None))
        return rows

    def row(self, episode: Episode) -> Row:
        if episode.error_type is not None:
            calls = episode.trace(self.seat).model_calls if self._has(episode) else []
            return _unusable(calls, self.eos, f"an episode that ended in {episode.error_type}")
        trace = episode.trace(self.seat)
        reward = trace.reward if trace.reward is not None else episode.reward
        return trace_row(trace, reward, self.eos)

    def _has(self, episode: Episode) -> bool:
        return any(t.seat == self.seat or t.agent == self.seat for t in episode.traces)
