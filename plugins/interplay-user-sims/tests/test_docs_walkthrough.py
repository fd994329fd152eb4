"""The walkthrough in docs/plugins.md ("Writing your own user sim, step by step") runs as
printed: its sim, registered as a plugin, in the relay and in always_on on the scripted model."""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from user_sims_support import (
    agent,
    ao,
    first_task,
    relay_env,
    replies,
    run_relay,
    say,
    scenario_env,
    seats,
)
from user_sims_support import user_lines as lines_of

import interplay_user_sims.plugin
from interplay import InterplayError, Register, Task, hookimpl
from interplay.testing import isolated_plugins

DOCS = Path(__file__).resolve().parents[3] / "docs" / "plugins.md"


@pytest.fixture(autouse=True)
def lines_plugin() -> Iterator[None]:
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
                if "class LinesUser(UserSim)" in b]
    module = types.ModuleType("docs_lines")
    exec(compile(block, str(DOCS), "exec"), module.__dict__)

    @hookimpl
    def register_user_sims(register: Register) -> None:
        register(module.LinesUser)

    module.register_user_sims = register_user_sims
    with isolated_plugins(("user_sims", interplay_user_sims.plugin, "interplay-user-sims"),
                          ("docs_lines", module, "docs-lines")):
        yield


async def test_the_walkthrough_sim_in_order_in_the_relay() -> None:
    env = relay_env("lines", {"lines": ["Hi, are you open Sunday?", "Thanks."]})
    episode, _ = await run_relay(env, Task(0, prompt="p"), replies("No, closed."))
    assert lines_of(episode) == ["Hi, are you open Sunday?", "Thanks."]
    assert episode.results["relay"]["ended_by"] == "user_done"


async def test_the_walkthrough_sim_keyed_in_the_relay() -> None:
    env = relay_env("lines", {"lines": ["#1042"], "match": ["(?i)order number"]})
    episode, _ = await run_relay(env, Task(0, prompt="Cancel my order."),
                                 replies("What is the order number?", "Done."))
    assert lines_of(episode) == ["Cancel my order.", "#1042"]


def test_the_walkthrough_sim_refuses_a_bad_setting() -> None:
    with pytest.raises(InterplayError, match="give one match per line"):
        relay_env("lines", {"lines": ["a", "b"], "match": ["x"]})


async def test_the_walkthrough_sim_keyed_in_always_on(tmp_path: Path) -> None:
    env = scenario_env(tmp_path, {"user_sim": "lines", "user_sim_settings": {
        "lines": ["Yes, book it."], "match": ["(?i)shall i book"]}}, end="P2D",
                       tasks=[{"prompt": "find a venue"}],
                       triggers=[{"name": "t", "at": "2025-06-02T12:00",
                                  "actions": [{"kind": "notify", "text": "ping"}]}])
    handler = seats(agent({"find a venue": say("On it."), "ping": say("Shall I book it?")}))
    episode, _ = await run_relay(env, first_task(env), handler)
    outcomes = [(r["outcome"], r["text"], r["reply_to"]) for r in ao(episode)["replies"]]
    assert outcomes[:2] == [("nothing", "", None), ("replied", "Yes, book it.", 2)]
