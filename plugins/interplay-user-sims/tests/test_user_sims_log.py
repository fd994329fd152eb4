"""Nothing of a persona, an instruction set or a user's line reaches the process log, for the
LLM-played sims (``tau``, ``busy-person``) and the ones that say stored or scripted lines, in
the relay and in always_on: the log at debug level, searched for sentinel strings."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from user_sims_support import agent, first_task, relay_env, replies, run_relay, say, scenario_env
from user_sims_support import seats as by_seat

from interplay import Task
from interplay.testing import ScriptedReply, captured_log
from interplay.values import to_json

S = {k: f"SENTINEL-SIMS-{k.upper()}-{i}" for i, k in enumerate(
    ("reason", "known", "unknown", "how", "persona", "scenario", "line", "description",
     "assistant", "script", "busy"))}
INSTRUCTIONS = {"reason_for_call": S["reason"], "known_info": S["known"],
                "unknown_info": S["unknown"], "task_instructions": S["how"]}


@pytest.fixture
def log_buffer() -> Iterator[io.StringIO]:
    with captured_log() as buffer:
        yield buffer


def assert_clean(text: str) -> None:
    assert '"agent.turn"' in text  # the run logged
    for where, sentinel in S.items():
        assert sentinel not in text, f"{where} leaked into the log"


async def test_no_persona_or_instructions_reach_the_log(log_buffer: io.StringIO,
                                                         tmp_path: Path) -> None:
    task = Task(0, prompt=S["scenario"], info={"persona": S["persona"],
                                               "instructions": INSTRUCTIONS})
    # tau in the relay, with a malformed reply and a stop.
    user = replies(f"{S['line']} ###STOP### {S['line']}", f"{S['line']} ###STOP###")
    episode, _ = await run_relay(relay_env("tau", max_turns=3), task,
                                 by_seat(replies(S["assistant"]), user))
    assert episode.metrics["user_malformed"] == 1.0
    # busy-person and tau in always_on.
    for sim in ("busy-person", "tau"):
        env = scenario_env(tmp_path, {"user_sim": sim, "description": S["description"],
                                      "busy": [{"start": "09:00", "end": "17:00",
                                                "label": S["busy"]}]},
                           end="PT10H", tasks=[{"prompt": S["scenario"],
                                                "info": {"instructions": INSTRUCTIONS}}])
        episode, _ = await run_relay(env, first_task(env), by_seat(
            agent({S["scenario"]: say(S["assistant"])}),
            replies("", f"#1 {S['line']} ###STOP###")))
        assert episode.results["always_on"]["summary"]["counts"]["user_replies"] == 1
    # scripted, then replay of what it said, in the relay.
    scripted, _ = await run_relay(relay_env("scripted", {"lines": [S["script"]]}), task,
                                  by_seat(replies(S["assistant"])))
    file = tmp_path / "episodes.jsonl"
    file.write_text(to_json(scripted) + "\n")
    replayed, _ = await run_relay(relay_env("replay", {"episodes": str(file)}), task,
                                  by_seat(replies(ScriptedReply.text(S["assistant"]))))
    assert replayed.error is None
    assert_clean(log_buffer.getvalue())
