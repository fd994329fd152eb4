"""docs/reference/episode.schema.json, the JSON Schema of an episodes.jsonl record, held to the
writer: the records of real runs (two seats, tool calls, token capture, an error episode) fit
it, every field they hold is in it, and it is what docs/reference/generate.py makes of the
record classes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from interplay import Env, SeatSpec, Task, lookup, tool
from interplay.run import whole_record
from interplay.run.results import EpisodeLog
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    run_interplay,
    run_scripted,
)

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = ROOT / "docs" / "reference" / "episode.schema.json"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("generate_reference",
                                                  ROOT / "docs" / "reference" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _problems(validator: jsonschema.Draft202012Validator, record: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(record)]


def test_the_schema_file_is_what_the_record_classes_make() -> None:
    generator = _generator()
    assert SCHEMA_FILE.read_text() == generator.schema_text(), (
        f"docs/reference/episode.schema.json is out of date; regenerate it with: "
        f"{generator.COMMAND}")


def two_seats(request: ScriptedRequest) -> ScriptedReply | str:
    system = request.messages[0]["content"] if request.messages else ""
    if "role-playing a user" in system:
        if "museum" in system:  # the second task's user: a failure, an error episode
            return ScriptedReply(status=500)
        said = sum(m["role"] == "assistant" for m in request.messages)
        return "###DONE###" if said else "When does the library open on Saturday?"
    return "It opens at 10 on Saturday."


def test_the_records_a_run_writes_fit_the_schema(tmp_path: Path,
                                                 validator: Any) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"prompt": "Library hours?", "answer": "10",
                    "info": {"opening": "When does the library open on Saturday?"}}) + "\n"
        + json.dumps({"prompt": "The museum?", "answer": "9",
                      "info": {"opening": "When does the museum open?"}}) + "\n")
    with ScriptedModel(two_seats) as model:
        out = run_interplay("eval", "user-sim", "-o", str(tmp_path / "run"), "--no-report",
                            "--base-url", model.base_url, "--set", f"env.taskset={str(tasks)!r}",
                            "--set", "model.capture_tokens=true", "--set", "model.max_retries=0")
    assert out.returncode in (0, 1), out.stderr
    episodes = tmp_path / "run" / "episodes.jsonl"
    lines = [json.loads(line) for line in episodes.read_text().splitlines()]
    assert len(lines) == 2 and any(line["error"] for line in lines)
    for line in lines:
        record = whole_record(line, episodes)
        assert _problems(validator, record) == []
        assert any(c.get("tokens") for t in record["traces"] for c in t["model_calls"])


async def test_a_record_with_tool_calls_and_rewards_fits_the_schema(tmp_path: Path,
                                                                    validator: Any) -> None:
    class Counter(Env):
        """Adds with a tool."""

        name = "counter"
        seats = {"assistant": SeatSpec(harness="chat")}

        def tasks(self) -> list[Task]:
            return [Task(0, prompt="Add 2.", answer="2", info={"n": 1})]

        def steps(self) -> list[Any]:
            return [lookup("steps", "one_shot")()]

        def verifiers(self) -> list[Any]:
            return [lookup("verifiers", "contains")()]

        def tools(self, seat: str, ctx: Any) -> list[Any]:
            @tool
            def bump(by: int) -> str:
                """Add to the counter."""
                return str(by)

            return [bump]

    def answer(request: ScriptedRequest) -> ScriptedReply | str:
        if request.messages[-1]["role"] == "tool":
            return "It is 2."
        return ScriptedReply.calls([("bump", {"by": 2}), ("nope", {})], text="Adding.")

    env = Counter()
    run = await run_scripted(env, next(iter(env.tasks())), answer)
    log = EpisodeLog(tmp_path / "episodes.jsonl")
    log.open()
    log.append_episode(run.episode)
    await log.aclose()
    (line,) = (tmp_path / "episodes.jsonl").read_text().splitlines()
    record = whole_record(json.loads(line), tmp_path / "episodes.jsonl")
    assert record["traces"][0]["tool_runs"] and record["rewards"]
    assert _problems(validator, record) == []


def test_the_schema_refuses_a_field_it_does_not_know(validator: Any) -> None:
    record = {"info": {"episode_id": "e", "env": "x", "task_idx": 0, "rollout": 0,
                       "seed": None}}
    assert any("required" in p for p in _problems(validator, record))
    assert any("Additional properties" in p
               for p in _problems(validator, {**record, "surprise": 1}))
