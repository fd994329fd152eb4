"""Tasksets: JSONL files (with clear errors for bad rows) and Python iterables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interplay.errors import InterplayError
from interplay.values import taskset
from interplay.values.records import Message, Task


def test_jsonl_rows_become_tasks(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    rows = [
        {"prompt": "hi", "answer": "a", "difficulty": "easy"},
        {},
        {"idx": 10, "prompt": [{"role": "user", "content": "x"}], "system_prompt": "s",
         "info": {"k": 1}},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    tasks = taskset.load_jsonl(path)
    assert tasks[0] == Task(0, prompt="hi", answer="a", info={"difficulty": "easy"})
    assert tasks[1] == Task(1)
    assert tasks[2].idx == 10
    assert tasks[2].prompt == (Message("user", "x"),)
    assert tasks[2].messages() == [Message("system", "s"), Message("user", "x")]


@pytest.mark.parametrize(("line", "says"), [
    ("not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"prompt": [{"role": "wizard", "content": "x"}]}', "role must be one of"),
    ('{"prompt": 5}', "prompt must be text"),
    ('{"prompt": [{"role": "assistant", "tool_calls": ["call"]}]}',
     "tool_calls[0] must be an object, got str"),
    ('{"prompt": [{"role": "assistant", "tool_calls": [{"id": "c", "function": "f"}]}]}',
     "tool_calls[0].function must be an object, got str"),
    ('{"prompt": [{"role": "assistant", "tool_calls": {"id": "c"}}]}',
     "tool_calls must be a list, got dict"),
    ('{"prompt": [{"role": "user", "content": "x", "name": 3}]}',
     "message name must be a string, got int"),
    ('{"prompt": [{"role": "tool", "content": "x", "tool_call_id": ["c"]}]}',
     "message tool_call_id must be a string, got list"),
])
def test_a_bad_row_names_file_and_line(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(InterplayError) as err:
        taskset.load_jsonl(path)
    assert str(err.value).startswith(f"{path}:2: ")
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InterplayError, match="does not exist"):
        taskset.load_jsonl(tmp_path / "nope.jsonl")


def test_generators_yield_tasks() -> None:
    def gen():  # type: ignore[no-untyped-def]
        yield {"prompt": "a"}
        yield Task(5, prompt="b")

    tasks = list(taskset.from_iterable(gen()))
    assert [t.prompt for t in tasks] == ["a", "b"]
    assert [t.idx for t in tasks] == [0, 5]
