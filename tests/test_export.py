"""`interplay export`: real runs on the scripted model (with token capture) turned into SFT
lines, RL lines and dataset folders, read back by what consumes them (a JSON-lines reader
checking the schema, ``datasets.load_from_disk``); group advantages checked by hand."""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from always_on_support import PRIVATE_NOTE, run_note_day

from interplay import ExportFormat, InterplayError, Written, cli, hookimpl
from interplay.export import ExportOptions, export
from interplay.export.files import features
from interplay.run import reading, results
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values.records import (
    Episode,
    EpisodeInfo,
    Message,
    ModelCall,
    Task,
    Tokens,
    ToolCall,
    Trace,
)

# Requests in the order a -c 1 run makes them (rollout by rollout, task by task): the reply
# is right, wrong, or the endpoint fails (the episode ends in an error).
PLAN = ["ok", "bad", "fault", "bad", "ok", "ok", "ok", "ok", "bad"]
# What that gives, by (task, rollout): the reward, or None for the error episode.
REWARDS = {(0, 0): 1.0, (1, 0): 0.0, (2, 0): None, (0, 1): 0.0, (1, 1): 1.0, (2, 1): 1.0,
           (0, 2): 1.0, (1, 2): 1.0, (2, 2): 0.0}
S = math.sqrt(2 / 9)  # the std of {1, 0, 1}
ADVANTAGES = {(0, 0): (1 - 2 / 3) / S, (0, 1): (0 - 2 / 3) / S, (0, 2): (1 - 2 / 3) / S,
              (1, 0): (0 - 2 / 3) / S, (1, 1): (1 - 2 / 3) / S, (1, 2): (1 - 2 / 3) / S,
              (2, 1): 1.0, (2, 2): -1.0}  # task 2: {1, 0}, mean 0.5, std 0.5

TRAINING = Path(__file__).resolve().parents[1] / "docs" / "training.md"


def planned() -> Callable[[ScriptedRequest], ScriptedReply]:
    plan = iter(PLAN)
    lock = threading.Lock()

    def answer(request: ScriptedRequest) -> ScriptedReply:
        with lock:
            step = next(plan)
        word = request.last_user_text().rsplit(" ", 1)[-1]
        if step == "fault":
            return ScriptedReply.fault(500)
        return ScriptedReply.text(f"the word is {word}" if step == "ok" else "no idea")

    return answer


def run_eval(out: Path, url: str, env: str, *args: str) -> None:
    assert cli.main(["eval", env, "--base-url", url, "-o", str(out), "-c", "1", "--quiet",
                     "--no-report", "--set", "model.max_retries=0", *args]) in (0, 1)


@pytest.fixture(scope="module")
def echo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "echo"
    with ScriptedModel(planned()) as model:
        run_eval(out, model.base_url, "echo", "-n", "3", "-r", "3",
                 "--set", "model.capture_tokens=true")
    return out


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


RL_CALL_KEYS = {"group": str, "advantage": float, "episode_id": str, "task_idx": int,
                "rollout": int, "seat": str, "agent": str, "reward": float, "call": int,
                "prompt_ids": list, "completion_ids": list, "logprobs": list,
                "loss_mask": list, "finish_reason": str}


def check_rl_row(row: dict[str, Any], keys: dict[str, type]) -> None:
    assert set(row) == set(keys), set(row) ^ set(keys)
    for key, kind in keys.items():
        assert isinstance(row[key], kind) or (kind is float and isinstance(row[key], int)), key
    assert all(isinstance(i, int) for i in row["prompt_ids"] + row["completion_ids"])
    assert len(row["completion_ids"]) == len(row["logprobs"]) == len(row["loss_mask"])


def test_rl_rows_per_call_carry_tokens_rewards_and_group_advantages(echo_run: Path) -> None:
    result = export(echo_run, options=ExportOptions(format="rl"))
    assert result.output == echo_run / "rl-calls.jsonl"
    rows = read_lines(result.output)
    # Eight scored episodes of one call each; the error episode is never training data.
    assert result.rows == len(rows) == 8 and result.episodes == 9
    assert result.skipped == {"error episodes": 1}
    episodes = {results.pair_of(r): r for r in results.iter_episodes(echo_run / "episodes.jsonl")}
    for row in rows:
        check_rl_row(row, RL_CALL_KEYS)
        pair = (row["task_idx"], row["rollout"])
        assert row["reward"] == REWARDS[pair]
        assert row["advantage"] == pytest.approx(ADVANTAGES[pair])
        assert row["group"] == f"{row['task_idx']}/assistant" and row["seat"] == "assistant"
        # The row's tokens are the call's, as captured.
        call = episodes[pair]["traces"][0]["model_calls"][0]
        assert row["prompt_ids"] == call["tokens"]["prompt_ids"]
        assert row["completion_ids"] == call["tokens"]["completion_ids"]
        assert row["logprobs"] == call["tokens"]["logprobs"]
        assert set(row["loss_mask"]) == {1}


def test_the_advantage_can_be_centered_only(echo_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "rl.jsonl"
    export(echo_run, out, ExportOptions(format="rl", advantage="mean"))
    for row in read_lines(out):
        pair = (row["task_idx"], row["rollout"])
        mean = {0: 2 / 3, 1: 2 / 3, 2: 0.5}[row["task_idx"]]
        assert row["advantage"] == pytest.approx(REWARDS[pair] - mean)


def test_filters_keep_advantages_computed_over_the_whole_group(echo_run: Path,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "rl.jsonl"
    result = export(echo_run, out, ExportOptions(format="rl", min_reward=1.0))
    rows = read_lines(out)
    assert {(r["task_idx"], r["rollout"]) for r in rows} == {
        p for p, reward in REWARDS.items() if reward == 1.0}
    assert all(r["advantage"] == pytest.approx(ADVANTAGES[(r["task_idx"], r["rollout"])])
               for r in rows)
    assert result.skipped["below --min-reward"] == 3
    best = export(echo_run, out, ExportOptions(format="rl", best_of_group=True))
    # The highest reward of each task, the lowest rollout among equals.
    assert {(r["task_idx"], r["rollout"]) for r in read_lines(out)} == {(0, 0), (1, 1), (2, 1)}
    assert best.skipped["not the best of their group"] == 5


def test_sft_lines_are_chat_conversations_for_a_chat_template(echo_run: Path,
                                                              tmp_path: Path) -> None:
    result = export(echo_run, options=ExportOptions(format="sft", min_reward=1.0))
    rows = read_lines(echo_run / "sft.jsonl")
    assert len(rows) == result.rows == 5
    for row in rows:
        assert set(row) == {"messages", "tools"} and row["tools"] == []
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["user", "assistant"]
        assert row["messages"][1]["content"].startswith("the word is")
    out = tmp_path / "meta.jsonl"
    export(echo_run, out, ExportOptions(format="sft", meta=True))
    metas = [r["meta"] for r in read_lines(out)]
    assert sorted((m["task_idx"], m["rollout"]) for m in metas) == sorted(ADVANTAGES)
    assert all(m["reward"] == REWARDS[(m["task_idx"], m["rollout"])] for m in metas)


def test_hf_datasets_open_with_load_from_disk(echo_run: Path, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    sft = export(echo_run, tmp_path / "sft", ExportOptions(format="hf"))
    ds = datasets.load_from_disk(str(sft.output))
    assert len(ds) == 8 and ds.column_names == [
        "messages", "tools", "episode_id", "task_idx", "rollout", "seat", "agent", "reward"]
    first = ds[0]
    assert first["messages"][0]["role"] == "user" and json.loads(first["tools"]) == []
    # The null keys every message has in the dataset, dropped as docs/training.md does, give
    # the messages of sft.jsonl.
    assert first["messages"][0]["tool_calls"] is None
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", TRAINING.read_text(), re.S)
                if "def messages_of" in b]
    scope: dict[str, Any] = {}
    exec(compile(block, "docs/training.md", "exec"), scope)
    lines = read_lines(export(echo_run, tmp_path / "sft.jsonl",
                              ExportOptions(format="sft")).output)
    assert [scope["messages_of"](row) for row in ds] == [line["messages"] for line in lines]
    rl = export(echo_run, tmp_path / "rl", ExportOptions(format="hf", rows="rl"))
    ds = datasets.load_from_disk(str(rl.output))
    lines = read_lines(export(echo_run, tmp_path / "rl.jsonl",
                              ExportOptions(format="rl")).output)
    assert len(ds) == len(lines) == 8
    for row, line in zip(ds, lines, strict=True):
        assert row["prompt_ids"] == line["prompt_ids"]
        assert row["completion_ids"] == line["completion_ids"]
        assert row["advantage"] == pytest.approx(line["advantage"])
        assert row["logprobs"] == pytest.approx(line["logprobs"])
    # Written again over itself (a dataset folder an export wrote), never over anything else.
    export(echo_run, tmp_path / "rl", ExportOptions(format="hf", rows="rl"))
    with pytest.raises(InterplayError, match="not a dataset folder"):
        export(echo_run, tmp_path, ExportOptions(format="hf"))


def test_an_always_on_agents_private_notes_are_marked_in_the_sft_meta(tmp_path: Path) -> None:
    # A private note she never reads: the SFT row's meta says which of its messages are such.
    run_note_day(tmp_path)
    [row] = read_lines(export(tmp_path / "run", tmp_path / "sft.jsonl",
                              ExportOptions(format="sft", meta=True)).output)
    private = row["meta"]["private_messages"]
    said = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"]
    assert private and set(private) < set(said)
    assert {row["messages"][i]["content"] for i in private} == {PRIVATE_NOTE}
    # Without --meta the row is the conversation alone, as for any env.
    [plain] = read_lines(export(tmp_path / "run", tmp_path / "plain.jsonl",
                                ExportOptions(format="sft")).output)
    assert set(plain) == {"messages", "tools"}
    # A dataset folder has the column, and an env without private notes does not.
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_from_disk(str(export(tmp_path / "run", tmp_path / "hf",
                                            ExportOptions(format="hf")).output))
    assert ds.column_names[-1] == "private_messages" and ds[0]["private_messages"] == private


def test_hf_datasets_of_rl_traces_and_of_no_rows_open_too(echo_run: Path,
                                                          tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    traces = export(echo_run, tmp_path / "traces", ExportOptions(format="hf", rows="rl",
                                                                 unit="trace"))
    lines = read_lines(export(echo_run, tmp_path / "traces.jsonl",
                              ExportOptions(format="rl", unit="trace")).output)
    ds = datasets.load_from_disk(str(traces.output))
    assert "calls" in ds.column_names and len(ds) == len(lines) == 8
    assert [row["loss_mask"] for row in ds] == [line["loss_mask"] for line in lines]
    # Filters that leave nothing give an empty dataset with the same columns, not a traceback.
    for rows in ("sft", "rl"):
        empty = export(echo_run, tmp_path / f"empty-{rows}",
                       ExportOptions(format="hf", rows=rows, min_reward=2.0))
        assert empty.rows == 0
        ds = datasets.load_from_disk(str(empty.output))
        assert len(ds) == 0 and ds.features == features(rows, "call")


def test_the_command_prints_what_it_wrote_and_refuses_a_run_without_capture(
        echo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["export", str(echo_run), "--format", "rl", "--min-reward", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == (f"exported 5 rows (5 traces of 9 episodes) to "
                           f"{echo_run / 'rl-calls.jsonl'}")
    assert err.strip() == "left out: below --min-reward (3), error episodes (1)"
    plain = tmp_path / "plain"
    with ScriptedModel(lambda r: "fine") as model:
        run_eval(plain, model.base_url, "echo", "-n", "1")
    capsys.readouterr()
    assert cli.main(["export", str(plain), "--format", "rl"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.capture_tokens=true" in err
    assert not (plain / "rl-calls.jsonl").exists()
    # An SFT export needs no tokens.
    assert cli.main(["export", str(plain), "--format", "sft"]) == 0
    assert cli.main(["export", str(tmp_path / "nothing"), "--format", "sft"]) == 2
    assert "results folder" in capsys.readouterr().err
    # A file that is not a run's, named by mistake, is said to be one: not how to mend it.
    for name, text, why in (("notes.txt", "hello\n", "is not JSON"),
                            ("rows.jsonl", '{"a": 1}\n', "is not an episode record (info: "),
                            ("summary.json", (echo_run / "summary.json").read_text(),
                             "is not JSON")):
        (tmp_path / name).write_text(text)
        assert cli.main(["export", str(tmp_path / name), "--format", "sft"]) == 2
        err = capsys.readouterr().err
        assert err == (f"interplay: error: {tmp_path / name} is not an episodes file of "
                       f"`interplay eval`: its first line {why}"
                       + err.split(why, 1)[1]), err
        assert err.endswith("; name a results folder (or its episodes.jsonl)\n"), err
    assert cli.main(["export", str(echo_run / "summary.json"), "--format", "sft"]) == 2
    assert "summary.json is not an episodes file" in capsys.readouterr().err
    # Options that do not go together are one line each; a seat that matches nothing is said.
    for args, says in ((["--format", "sft", "--unit", "trace"], "--unit goes with RL rows"),
                       (["--format", "rl", "--rows", "rl"], "--rows goes with --format hf"),
                       (["--format", "rl", "--meta"], "--meta goes with --format sft")):
        assert cli.main(["export", str(echo_run), *args]) == 2
        assert says in capsys.readouterr().err
    out = tmp_path / "none.jsonl"
    assert cli.main(["export", str(echo_run), "--format", "sft", "--seat", "user",
                     "-o", str(out)]) == 0
    assert "--seat user: no trainable trace of it" in capsys.readouterr().err
    assert out.read_text() == ""


def test_rl_rows_per_trace_join_the_calls_under_a_loss_mask(tmp_path: Path) -> None:
    """alphabet-sort: a chat of several turns, a model call each; the trace's row is one
    sequence, its completions sampled (mask 1) and the turns between them added (mask 0)."""
    out = tmp_path / "sort"
    with ScriptedModel(lambda r: ScriptedReply.text("Ann Bob")) as model:
        run_eval(out, model.base_url, "alphabet-sort", "-n", "2",
                 "--set", "model.capture_tokens=true")
        result = export(out, options=ExportOptions(format="rl", unit="trace"))
        rows = read_lines(result.output)
        episodes = {results.pair_of(r): r for r in results.iter_episodes(out / "episodes.jsonl")}
        assert result.rows == len(rows) == 2 and result.skipped == {}
        for row in rows:
            check_rl_row(row, {**{k: v for k, v in RL_CALL_KEYS.items() if k != "call"},
                               "calls": int})
            calls = episodes[(row["task_idx"], 0)]["traces"][0]["model_calls"]
            assert row["calls"] == len(calls) >= 2
            tokens = [c["tokens"] for c in calls]
            assert row["prompt_ids"] == tokens[0]["prompt_ids"]
            # The whole sequence is the last call's prompt and its completion...
            assert row["prompt_ids"] + row["completion_ids"] == \
                tokens[-1]["prompt_ids"] + tokens[-1]["completion_ids"]
            # ... in which exactly the sampled tokens are trained on, with their logprobs.
            sampled = [i for i, m in zip(row["completion_ids"], row["loss_mask"], strict=True)
                       if m]
            assert sampled == [i for t in tokens for i in t["completion_ids"]]
            assert [lp for lp, m in zip(row["logprobs"], row["loss_mask"], strict=True) if m] \
                == [lp for t in tokens for lp in t["logprobs"]]
            text = model.tokenizer.decode(row["prompt_ids"] + row["completion_ids"],
                                          special=True)
            assert text.endswith("<|assistant|>Ann Bob<|end|>") and text.count("Ann Bob") \
                == row["calls"]


def write_episodes(path: Path, episodes: list[Episode]) -> None:
    path.write_bytes(b"".join(results.episode_line(e) + b"\n" for e in episodes))


def tool_episode(idx: int, *, stop: str = "agent_completed", finish: str = "stop",
                 trainable: bool = True) -> Episode:
    info = EpisodeInfo(episode_id=f"e{idx}", env="shop", task_idx=idx)
    tool = {"type": "function", "function": {"name": "find_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}}}}
    messages = [Message("system", "You help."), Message("user", "Where is 7?"),
                Message("assistant", None, tool_calls=(ToolCall("c1", "find_order",
                                                                '{"order_id": "7"}'),)),
                Message("tool", "shipped", tool_call_id="c1"),
                Message("assistant", "It has shipped."), Message("user", "thanks")]
    calls = [ModelCall(id=f"m{i}", request={"messages": [], "tools": [tool]},
                       finish_reason=finish if i else "tool_calls",
                       tokens=Tokens([1, 2], [3, 4], [-0.5, -0.25])) for i in range(2)]
    trace = Trace(agent="assistant", episode=info, seat="assistant", trainable=trainable,
                  messages=messages, model_calls=calls, stop_condition=stop, reward=1.0)
    return Episode(info=info, task=Task(idx=idx), traces=[trace], reward=1.0)


def test_sft_keeps_tool_calls_and_results_and_ends_on_the_last_reply(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [tool_episode(0), tool_episode(1, stop="max_turns"),
                          tool_episode(2, finish="length"), tool_episode(3, trainable=False)])
    result = export(path, options=ExportOptions(format="sft"))
    rows = read_lines(result.output)
    assert len(rows) == 3  # the untrainable seat is not training data
    row = rows[0]
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "tool",
                                                    "assistant"]
    assert row["messages"][2]["tool_calls"][0]["function"] == {
        "name": "find_order", "arguments": '{"order_id": "7"}'}
    assert row["messages"][3] == {"role": "tool", "content": "shipped", "tool_call_id": "c1"}
    assert [t["function"]["name"] for t in row["tools"]] == ["find_order"]
    done = export(path, tmp_path / "done.jsonl",
                  ExportOptions(format="sft", completed_only=True))
    assert done.rows == 1 and done.skipped == {"cut short": 2}


def test_a_trace_whose_calls_do_not_extend_each_other_is_left_to_per_call_rows(
        tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [tool_episode(0)])  # the second call's prompt is not an extension
    result = export(path, options=ExportOptions(format="rl", unit="trace"))
    assert result.rows == 0
    assert list(result.skipped) == [
        "traces whose calls do not extend each other (an earlier turn changed; export them "
        "--unit call)"]
    assert export(path, options=ExportOptions(format="rl")).rows == 2


def test_a_trace_whose_reply_was_re_tokenized_is_counted_as_such(tmp_path: Path) -> None:
    episode = tool_episode(0)
    _, second = episode.traces[0].model_calls
    # The second prompt holds the first call's prompt, then the reply split otherwise
    # (3, 4 sampled; 3, 9 read back), then the new turn.
    second.tokens = Tokens([1, 2, 3, 9, 5], [6], [-0.1])
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, [episode])
    result = export(path, options=ExportOptions(format="rl", unit="trace"))
    assert result.rows == 0
    [reason] = result.skipped
    assert reason.startswith("traces the endpoint re-tokenized") and \
        result.skipped[reason] == 1
    second.tokens = Tokens([1, 2, 3, 4, 5], [6], [-0.1])
    write_episodes(path, [episode])
    [row] = read_lines(export(path, options=ExportOptions(format="rl", unit="trace")).output)
    assert row["completion_ids"] == [3, 4, 5, 6] and row["loss_mask"] == [1, 1, 0, 1]


def test_iter_episodes_reads_heads_first_and_refuses_a_broken_line_when_reached(
        tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    episodes = [tool_episode(i) for i in range(3)]
    lines = [results.episode_line(e) for e in episodes]
    # A line that begins as an episode line and breaks further on.
    broken = lines[1][:lines[1].index(b',"task":') + 12] + b'"oops'
    assert reading._HEAD.match(broken)
    path.write_bytes(lines[0] + b"\n" + broken + b"\n" + lines[2] + b"\n")
    streamed = results.iter_episodes(path)
    assert results.pair_of(next(streamed)) == (0, 0)
    with pytest.raises(InterplayError, match="line 2 is not JSON"):
        next(streamed)
    # The same broken line superseded by a later one of its pair is still refused.
    path.write_bytes(broken + b"\n" + lines[1] + b"\n")
    with pytest.raises(InterplayError, match="its first line is not JSON"):
        list(results.iter_episodes(path))
    # A line of another shape is read whole, and refused before anything is yielded.
    path.write_bytes(lines[0] + b"\n" + b'{"info": {"task_idx": "x"}}\n')
    with pytest.raises(InterplayError, match="line 2 is not an episode record"):
        next(results.iter_episodes(path))
    # Superseded lines give way to the latest; a torn tail is skipped.
    path.write_bytes(b"".join(line + b"\n" for line in itertools.chain(lines, lines[:1]))
                     + lines[2][:40])
    assert [results.pair_of(r) for r in results.iter_episodes(path)] == [(1, 0), (2, 0),
                                                                          (0, 0)]


class Rewards(ExportFormat):
    """Each episode's pair and reward, as one JSON array (a plugin's format)."""

    name = "test_rewards"
    default_output = "rewards.json"

    def write(self, episodes: Any, output: Path, *, run_config: Any) -> Written:
        rows, errors = [], 0
        for e in episodes:
            if e["error_type"] is not None:
                errors += 1
                continue
            rows.append([e["info"]["task_idx"], e["info"]["rollout"], e["reward"],
                         run_config["config"]["env"]["name"]])
        output.write_text(json.dumps(rows))
        return Written(episodes=len(rows), skipped={"error episodes": errors} if errors else {})


def test_hook_register_export_formats(register_plugin: Any, echo_run: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    def register_export_formats(register: Any) -> None:
        register(Rewards)

    register_plugin(types.SimpleNamespace(register_export_formats=hookimpl(
        register_export_formats)), "formats")
    assert cli.main(["export", str(echo_run), "--format", "test_rewards"]) == 0
    rows = json.loads((echo_run / "rewards.json").read_text())
    assert {(t, r): reward for t, r, reward, _ in rows} == {
        pair: reward for pair, reward in REWARDS.items() if reward is not None}
    assert {env for *_, env in rows} == {"echo"}
    out = capsys.readouterr()
    assert "exported 8 episodes to" in out.out and "left out: error episodes (1)" in out.err
    # The kernel's row options are not a plugin format's; an unknown format names them all.
    assert cli.main(["export", str(echo_run), "--format", "test_rewards", "--seat", "x"]) == 2
    assert "--seat goes with --format sft/rl/hf" in capsys.readouterr().err
    assert cli.main(["export", str(echo_run), "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert "unknown export format 'csv'; known: inspect, test_rewards" in err
    assert "the kernel's own: sft, rl, hf" in err
    # Written with the mode every export file gets (the kernel's own too), under the umask.
    assert cli.main(["export", str(echo_run), "--format", "sft"]) == 0
    modes = {p.name: p.stat().st_mode & 0o777 for p in (echo_run / "rewards.json",
                                                         echo_run / "sft.jsonl")}
    assert len(set(modes.values())) == 1 and modes["rewards.json"] & 0o044, modes
