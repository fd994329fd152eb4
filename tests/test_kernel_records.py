"""Records: every record round-trips through JSON; messages keep the OpenAI shape."""

from __future__ import annotations

import inspect
import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interplay import InterplayError
from interplay._plumbing import codec as _codec
from interplay.values import records, splicing
from interplay.values.records import (
    CommandRecord,
    Episode,
    EpisodeInfo,
    FileChange,
    Message,
    ModelCall,
    Repo,
    Reward,
    SandboxRecord,
    Task,
    Tokens,
    ToolCall,
    ToolRun,
    Trace,
    Usage,
    Workspace,
    WorkspaceChanges,
    make_converter,
)

text = st.text(max_size=20)
small_int = st.integers(min_value=-(2**40), max_value=2**40)
finite = st.floats(allow_nan=False, allow_infinity=False)
json_scalar = st.none() | st.booleans() | small_int | finite | text
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
json_object = st.dictionaries(text, json_value, max_size=3)

tool_calls = st.builds(ToolCall, id=text, name=text,
                       arguments=st.builds(json.dumps, json_object))
content = st.none() | text | st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=2)
messages = st.builds(
    Message,
    role=st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
    content=content,
    name=st.none() | text,
    tool_calls=st.lists(tool_calls, max_size=2).map(tuple),
    tool_call_id=st.none() | text,
)
repos = st.builds(Repo, url=text, commit=st.none() | text)
workspaces = st.builds(
    Workspace, image=st.none() | text, dockerfile=st.none() | text, workdir=st.none() | text,
    files=st.dictionaries(text, text, max_size=2), folder=st.none() | text,
    repo=st.none() | repos, setup=st.lists(text, max_size=2),
    env=st.dictionaries(text, text, max_size=2), cpus=st.none() | finite,
    memory_mb=st.none() | small_int)
tasks = st.builds(
    Task,
    idx=st.integers(min_value=0, max_value=10**6),
    prompt=st.none() | text | st.lists(messages, max_size=3).map(tuple),
    system_prompt=st.none() | text,
    answer=json_value,
    info=json_object,
    workspace=st.none() | workspaces,
)
command_records = st.builds(CommandRecord, command=text, exit_code=st.none() | small_int,
                            output=text, output_cut=small_int, timed_out=st.booleans(),
                            duration_s=finite)
file_changes = st.builds(FileChange, path=text,
                         status=st.sampled_from(["added", "modified", "deleted"]),
                         size=small_int)
workspace_changes = st.builds(WorkspaceChanges, files=st.lists(file_changes, max_size=2),
                              files_cut=small_int, diff=text, diff_cut=small_int,
                              note=st.none() | text)
sandbox_records = st.builds(
    SandboxRecord, kind=text, image=st.none() | text, workdir=text, start_s=finite,
    setup=st.lists(command_records, max_size=2), setup_s=finite,
    changes=st.none() | workspace_changes, stop_s=finite, info=json_object,
    error=st.none() | text)
usages = st.builds(Usage, small_int, small_int, small_int)
token_ids = st.none() | st.lists(st.integers(min_value=0, max_value=300_000), max_size=5)
tokens = st.builds(Tokens, prompt_ids=token_ids, completion_ids=token_ids,
                   logprobs=st.none() | st.lists(finite, max_size=5),
                   missing=st.lists(text, max_size=2), warnings=st.lists(text, max_size=2))
model_calls = st.builds(
    ModelCall,
    id=text, api=st.sampled_from(["chat.completions", "responses"]), model=text,
    request=json_object, response=st.none() | json_object.map(_codec.dumps_kept),
    usage=st.none() | usages,
    started_at=finite, latency_s=finite, first_token_s=st.none() | finite,
    finish_reason=st.none() | text, streamed=st.booleans(), attempts=small_int,
    status=st.none() | small_int, error=st.none() | text, error_type=st.none() | text,
    tokens=st.none() | tokens, caller=st.none() | st.sampled_from(["program", "other"]),
)
tool_runs = st.builds(ToolRun, call_id=text, name=text, duration_s=finite,
                      error_type=st.none() | text)
rewards = st.builds(Reward, name=text, value=finite, weight=finite, reason=st.none() | text,
                    seat=st.none() | text, info=json_object)
episode_infos = st.builds(EpisodeInfo, episode_id=text, env=text, task_idx=small_int,
                          rollout=small_int, seed=st.none() | small_int)
metrics = st.dictionaries(text, finite, max_size=3)
traces = st.builds(
    Trace,
    agent=text, episode=episode_infos, trainable=st.booleans(), seat=st.none() | text,
    harness=text, model=text, messages=st.lists(messages, max_size=3),
    model_calls=st.lists(model_calls, max_size=2), tool_runs=st.lists(tool_runs, max_size=2),
    stop_condition=st.none() | text, error=st.none() | text, error_type=st.none() | text,
    rewards=st.lists(rewards, max_size=2), reward=st.none() | finite, metrics=metrics,
    info=json_object, started_at=finite, ended_at=st.none() | finite,
)
episodes = st.builds(
    Episode,
    info=episode_infos, task=tasks, traces=st.lists(traces, max_size=2), results=json_object,
    rewards=st.lists(rewards, max_size=2), reward=st.none() | finite, metrics=metrics,
    judge_calls=st.lists(model_calls, max_size=1), sandbox=st.none() | sandbox_records,
    error=st.none() | text, error_type=st.none() | text, started_at=finite, wall_s=finite,
)

STRATEGIES: dict[type, st.SearchStrategy[Any]] = {
    ToolCall: tool_calls, Message: messages, Task: tasks, Usage: usages, Tokens: tokens,
    ModelCall: model_calls, ToolRun: tool_runs, Reward: rewards, EpisodeInfo: episode_infos,
    Trace: traces, Episode: episodes, Repo: repos, Workspace: workspaces,
    CommandRecord: command_records, FileChange: file_changes,
    WorkspaceChanges: workspace_changes, SandboxRecord: sandbox_records,
}


def test_every_record_has_a_round_trip_strategy() -> None:
    defined = {cls for _, cls in inspect.getmembers(records, inspect.isclass)
               if attrs.has(cls) and cls.__module__ == records.__name__}
    assert defined == set(STRATEGIES)


@pytest.mark.parametrize("cls", list(STRATEGIES), ids=lambda c: c.__name__)
def test_round_trip_through_json(cls: type) -> None:
    conv = make_converter()

    @settings(max_examples=60, deadline=None)
    @given(STRATEGIES[cls])
    def check(record: Any) -> None:
        wire = json.loads(json.dumps(conv.unstructure(record)))
        assert conv.structure(wire, cls) == record

    check()


@given(traces)
@settings(max_examples=20, deadline=None)
def test_to_json_and_from_json_agree(trace: Trace) -> None:
    assert records.from_json(records.to_json(trace), Trace) == trace


def test_message_has_the_openai_shape_with_tool_calls() -> None:
    msg = Message("assistant", None, tool_calls=(
        ToolCall("call_1", "get_weather", '{"city": "Oslo"}'),))
    wire = make_converter().unstructure(msg)
    assert wire == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}],
    }
    reply = Message("tool", "12C", tool_call_id="call_1")
    assert reply.to_openai() == {"role": "tool", "content": "12C", "tool_call_id": "call_1"}
    assert Message.from_openai(wire) == msg
    assert msg.tool_calls[0].parsed_arguments() == {"city": "Oslo"}


def test_message_from_openai_accepts_object_arguments_and_text_parts() -> None:
    msg = Message.from_openai({
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "tool_calls": [{"id": "c", "type": "function",
                        "function": {"name": "f", "arguments": {"x": 1}}}],
    })
    assert msg.text == "ab"
    assert msg.tool_calls[0].parsed_arguments() == {"x": 1}


@pytest.mark.parametrize("bad", [
    {"role": "robot", "content": "x"},
    {"role": "user", "content": 3},
    "not a message",
])
def test_bad_messages_are_refused(bad: Any) -> None:
    with pytest.raises(InterplayError):
        Message.from_openai(bad)


def test_stored_records_carry_the_schema_version() -> None:
    info = EpisodeInfo("e1", "echo", 0)
    trace = make_converter().unstructure(Trace(agent="a", episode=info))
    episode = make_converter().unstructure(Episode(info=info, task=Task(idx=0)))
    assert trace["schema_version"] == records.SCHEMA_VERSION
    assert episode["schema_version"] == records.SCHEMA_VERSION


@pytest.mark.parametrize("cls", [Trace, Episode], ids=lambda c: c.__name__)
def test_a_newer_schema_version_is_refused(cls: type) -> None:
    info = EpisodeInfo("e1", "echo", 0)
    record = Trace(agent="a", episode=info) if cls is Trace else Episode(info, Task(idx=0))
    data = make_converter().unstructure(record)
    data["schema_version"] = records.SCHEMA_VERSION + 1
    with pytest.raises(InterplayError, match=r"newer than this interplay reads.*upgrade"):
        make_converter().structure(data, cls)


def test_task_messages_put_the_system_prompt_first() -> None:
    task = Task(idx=1, prompt="hi", system_prompt="be brief")
    assert [m.role for m in task.messages()] == ["system", "user"]
    assert Task(idx=2).messages() == []


def test_make_converter_builds_independent_converters() -> None:
    assert make_converter() is not make_converter()


@given(episodes, st.sampled_from(["compact", "pretty", "utf16", "none"]), st.booleans(),
       st.booleans())
@settings(max_examples=80, deadline=None)
def test_to_json_bytes_reads_back_as_to_json(episode: Episode, form: str, warm: bool,
                                             imitate: bool) -> None:
    """An episode line splices in the JSON records already hold (each message's wire JSON,
    each response as it came); it must read back exactly as the plain encoding does, stay one
    line, and keep text that looks like JSON as text."""
    for trace in episode.traces:
        if imitate:
            trace.messages.append(Message("user", '\x00"}]}\n{"id": 1}'))
        if warm:
            for m in trace.messages:
                m.wire_json()
        wire = [m.wire() for m in trace.messages]
        for k, call in enumerate(trace.model_calls):
            # Requests that grow by a message or two (a chat), repeat, shrink or reorder.
            cut = (2 * k) % (len(wire) + 1)
            call.request = {"model": "m",
                            "messages": wire[:cut] if k % 3 else wire[::-1][:cut]}
            body = {"id": "x", "choices": [{"message": {"content": "é\n\u2028"}}]}
            call.response = {
                "compact": json.dumps(body, ensure_ascii=False).encode(),
                "pretty": json.dumps(body, indent=2).encode(),
                "utf16": json.dumps(body).encode("utf-16-le"),
                "none": None,
            }[form]
    line = splicing.to_json_bytes(episode)
    assert b"\n" not in line
    if form == "compact" and not imitate and any(t.model_calls for t in episode.traces):
        # Spliced in as it came (spaces and all), not parsed and encoded again.
        assert b'{"id": "x", "choices": [{"message": {"content": "\xc3\xa9' in line
    assert json.loads(line) == json.loads(records.to_json(episode))
    assert records.from_json(line, Episode) == episode


def test_json_helpers_agree_with_the_standard_library_and_fall_back_to_it() -> None:
    value = {"a": [1, 2.5, None, True, "é ✓ \u2028"], 3: {"nested": "x"}, "big": 2**70}
    # orjson refuses the integer past 64 bits: the standard library writes it, the same way.
    assert json.loads(_codec.dumps(value)) == json.loads(json.dumps(value))
    assert _codec.dumps({"k": 1}) == b'{"k":1}'
    # Some servers write NaN and Infinity in logprobs: not JSON, but read as Python reads them.
    parsed = _codec.loads(b'{"logprob": -Infinity, "x": NaN}')
    assert parsed["logprob"] == float("-inf") and parsed["x"] != parsed["x"]
    assert _codec.loads('{"a": 1}') == {"a": 1}


def test_a_kept_message_json_costs_its_size_not_a_buffer() -> None:
    """orjson's result holds a 4 KB buffer; a run keeps one per message of every live episode."""
    import tracemalloc

    messages = [Message("user", f"message {i}") for i in range(2000)]
    tracemalloc.start()
    try:
        for m in messages:
            m.wire()  # the dict is not what is measured
        before = tracemalloc.get_traced_memory()[0]
        for m in messages:
            m.wire_json()
        per_message = (tracemalloc.get_traced_memory()[0] - before) / len(messages)
    finally:
        tracemalloc.stop()
    assert per_message < 200, per_message
