"""The TRL bridge: the rows a trace makes (fast, records only), and two GRPO steps on the CPU
through the bridge with the embedded model's weights (marked ``training``: minutes, not in the
default run; ``pytest -m training plugins/interplay-trl/tests``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interplay import Message, ModelCall, Tokens, Trace
from interplay.model import assistant_message
from interplay.values import EpisodeInfo
from interplay_trl import TrainOptions, trace_row, train

EOS = 2
INFO = EpisodeInfo(episode_id="e0", env="alphabet-sort", task_idx=0)


def call(prompt: list[int], completion: list[int]) -> ModelCall:
    return ModelCall(id=f"c{len(prompt)}", tokens=Tokens(prompt, completion,
                                                          [-0.5] * len(completion)))


def test_a_trace_is_one_sequence_masked_to_what_the_policy_sampled() -> None:
    trace = Trace(agent="assistant", episode=INFO, seat="assistant", model_calls=[
        call([1, 2], [3, 4, EOS]), call([1, 2, 3, 4, EOS, 7, 8], [5, EOS])])
    row = trace_row(trace, 0.5, EOS)
    assert row.prompt_ids == [1, 2]
    assert row.completion_ids == [3, 4, EOS, 7, 8, 5, EOS]
    assert row.env_mask == [1, 1, 1, 0, 0, 1, 1]
    assert row.logprobs == [-0.5, -0.5, -0.5, 0.0, 0.0, -0.5, -0.5]
    assert row.reward == 0.5 and row.unusable is None


def test_a_trace_that_is_no_one_sequence_is_masked_out_and_unscored() -> None:
    # The second prompt re-tokenized the first reply (3, 4 read back as 9).
    trace = Trace(agent="assistant", episode=INFO, seat="assistant", model_calls=[
        call([1, 2], [3, 4, EOS]), call([1, 2, 9, EOS, 7], [5, EOS])])
    row = trace_row(trace, 1.0, EOS)
    assert row.completion_ids == [EOS] and row.env_mask == [0] and row.reward is None
    assert row.unusable == "a call that does not continue the previous one"
    empty = trace_row(Trace(agent="assistant", episode=INFO, seat="assistant"), 1.0, EOS)
    assert empty.prompt_ids == [EOS] and empty.unusable == "a model call without token ids"


@pytest.mark.training
@pytest.mark.slow
def test_two_grpo_steps_train_on_token_exact_rows(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")  # the embedded model's package holds the weights
    from transformers import AutoTokenizer

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"info": {"turns": 2, "first": 2, "per_turn": 1,
                                                  "by": "first"}}) + "\n" for _ in range(4)))
    seen: list[tuple[list, list]] = []
    out = tmp_path / "run"
    final = train(TrainOptions(env="alphabet-sort", output=out, steps=2, tasks_per_step=1,
                               generations=2, max_tokens=16, save_every=2,
                               env_settings={"taskset": str(tasks)}),
                  on_rows=lambda episodes, rows: seen.append((episodes, rows)))
    tokenizer = AutoTokenizer.from_pretrained(str(final))
    assert len(seen) == 2
    for episodes, rows in seen:
        assert len(rows) == 2
        for episode, row in zip(episodes, rows, strict=True):
            trace = episode.trace("assistant")
            assert episode.error_type is None and row.unusable is None
            # The reward TRL scores with is the episode's.
            assert row.reward == trace.reward
            assert len(row.completion_ids) == len(row.env_mask) == len(row.logprobs)
            # The masked-in runs are exactly what each call sampled, and decode to its reply.
            runs = _runs(row.completion_ids, row.env_mask)
            sampled = [ids for ids, m in runs if m == 1]
            added = [ids for ids, m in runs if m == 0]
            calls = trace.model_calls
            assert sampled == [list(c.tokens.completion_ids) for c in calls]
            for ids, c in zip(sampled, calls, strict=True):
                text = tokenizer.decode([i for i in ids if i != tokenizer.eos_token_id],
                                        clean_up_tokenization_spaces=False)
                assert text == assistant_message(c).text
                assert all(lp <= 0 for lp in c.tokens.logprobs)
            # What the policy did not sample (the env's next turn) is masked out, and holds it.
            users = [m for m in trace.messages if isinstance(m, Message) and m.role == "user"]
            assert len(added) == len(calls) - 1
            for ids, user in zip(added, users[1:], strict=True):
                assert user.text in tokenizer.decode(ids, clean_up_tokenization_spaces=False)
            assert user_in_prompt(tokenizer, row.prompt_ids, users[0].text)
    lines = [json.loads(x) for x in (out / "rewards.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    assert all(x["reward"]["n"] == 2 for x in lines)
    assert (out / "checkpoint-2" / "config.json").is_file()


def user_in_prompt(tokenizer: object, ids: list[int], text: str) -> bool:
    return text in tokenizer.decode(ids, clean_up_tokenization_spaces=False)


def _runs(ids: list[int], mask: list[int]) -> list[tuple[list[int], int]]:
    out: list[tuple[list[int], int]] = []
    for i, m in zip(ids, mask, strict=True):
        if out and out[-1][1] == m:
            out[-1][0].append(i)
        else:
            out.append(([i], m))
    return out
