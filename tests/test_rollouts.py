"""The rollout API: groups of k finished episodes per task from the runner `interplay eval`
uses, with rewards and token records; the GRPO example of docs/training.md, run as written."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from interplay import Endpoint, InterplayError, Task
from interplay.export import ExportOptions, export
from interplay.run import Rollouts
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "training.md"


def alternating() -> Callable[[ScriptedRequest], ScriptedReply]:
    """Right on each prompt's 1st and 3rd request, wrong on its 2nd and 4th: every group of
    four has rewards 1, 0, 1, 0 in some order, however the episodes interleave."""
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def answer(request: ScriptedRequest) -> ScriptedReply:
        prompt = request.last_user_text()
        with lock:
            seen[prompt] += 1
            right = seen[prompt] % 2 == 1
        word = prompt.rsplit(" ", 1)[-1]
        return ScriptedReply.text(f"it is {word}" if right else "no idea")

    return answer


def example() -> Callable[..., Any]:
    text = DOCS.read_text()
    block = re.search(r"<!-- grpo-example -->\n```python\n(.*?)```", text, re.S)
    assert block is not None, "docs/training.md lost its GRPO example"
    assert len(block.group(1).strip().splitlines()) <= 25
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), str(DOCS), "exec"), namespace)
    return namespace["grpo_batch"]


async def test_the_grpo_example_in_the_docs_runs_as_written() -> None:
    grpo_batch = example()
    async with ScriptedModel(alternating()) as model:
        batch = await grpo_batch(model.base_url, k=4)
    assert len(batch) == 16  # four tasks, four rollouts, one call each
    for prompt_ids, completion_ids, logprobs, advantage in batch:
        reply = model.tokenizer.decode(completion_ids)
        # Rewards 1, 0, 1, 0: mean 0.5, std 0.5, so +1 for a right answer and -1 for a wrong.
        assert advantage == (1.0 if reply.startswith("it is") else -1.0)
        assert len(logprobs) == len(completion_ids)
        assert model.tokenizer.decode(prompt_ids, special=True).startswith("<|user|>Reply")


async def test_groups_come_as_they_finish_with_rewards_tokens_and_errors(
        tmp_path: Path) -> None:
    calls = Counter[str]()

    def answer(request: ScriptedRequest) -> ScriptedReply:
        word = request.last_user_text().rsplit(" ", 1)[-1]
        calls[word] += 1
        if word == "river" and calls[word] == 2:
            return ScriptedReply.fault(500)  # one episode of one group ends in an error
        return ScriptedReply.text(f"it is {word}")

    tasks = [Task(idx=10 + i, prompt=f"Reply with exactly one word: {w}", answer=w)
             for i, w in enumerate(["apple", "river", "stone"])]
    async with ScriptedModel(answer) as model:
        endpoint = attrs.evolve(model.endpoint, capture_tokens=True, max_retries=0)
        async with Rollouts("echo", model=endpoint, concurrency=4,
                            output=tmp_path) as runner:
            groups = [g async for g in runner.groups(tasks, k=3)]
            again = [g async for g in runner.groups(tasks[:1], k=2)]
    assert sorted(g.task.idx for g in groups) == [10, 11, 12]
    for group in groups:
        assert [e.info.rollout for e in group.episodes] == [0, 1, 2]
        assert all(e.info.task_idx == group.task.idx for e in group.episodes)
        for episode in group.episodes:
            if episode.error_type is None:
                assert episode.reward == 1.0
                (call,) = episode.trace("assistant").model_calls
                assert call.tokens is not None and call.tokens.missing == []
    river = next(g for g in groups if g.task.idx == 11)
    assert river.rewards.count(None) == 1
    # Each call of groups() draws new seeds.
    seeds = {e.info.seed for g in groups for e in g.episodes}
    assert not seeds & {e.info.seed for e in again[0].episodes}
    # What each call ran is a results file `interplay export` reads.
    result = export(tmp_path / "step-00000", options=ExportOptions(format="rl"))
    assert result.episodes == 9 and result.rows == 8
    assert result.skipped == {"error episodes": 1}
    assert export(tmp_path / "step-00001", options=ExportOptions(format="rl")).rows == 2


async def test_leaving_the_loop_early_cancels_the_rest() -> None:
    async with ScriptedModel(lambda r: ScriptedReply.text("ok", latency_s=0.05)) as model:
        async with Rollouts("echo", model=model.endpoint, concurrency=2) as runner:
            async for group in runner.groups(k=2, n=5):
                assert len(group.episodes) == 2
                break
        started = len(model.requests)
    assert started < 10


async def test_mistakes_are_one_line() -> None:
    async with ScriptedModel(["x"]) as model:
        async with Rollouts("echo", model=model.endpoint) as runner:
            with pytest.raises(InterplayError, match="idx 3 appears twice"):
                [g async for g in runner.groups([Task(idx=3), Task(idx=3)], k=1)]
            with pytest.raises(InterplayError, match="k: must be at least 1"):
                [g async for g in runner.groups(k=0)]
    with pytest.raises(InterplayError, match="no such seat"):
        Rollouts("echo", model=Endpoint(base_url="http://127.0.0.1:9/v1"),
                 seats={"judge": {}})
