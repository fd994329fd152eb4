"""OpenEnv environments played end to end: real servers (the library's own server classes,
served by uvicorn on 127.0.0.1), the library's own client, real chat sessions and scoring, with
interplay's scripted model standing in for the model."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from interplay import Episode, InterplayError, Task
from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted, survivors
from interplay_openenv.env import OpenEnvConfig, OpenEnvEnv
from interplay_openenv.server import _free_port

#: This folder: the servers the tests start import the test apps from it.
TESTS = Path(__file__).parent


def env(**settings: Any) -> OpenEnvEnv:
    made = OpenEnvEnv(OpenEnvConfig(**settings))
    made.check()
    return made


@pytest.fixture
def envs() -> Iterator[list[OpenEnvEnv]]:
    """Envs made by a test, closed after it (their local servers stopped)."""
    made: list[OpenEnvEnv] = []
    yield made
    for e in made:
        e.close()


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """The test apps served by uvicorn in a process of their own, reached by URL."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "openenv_apps:all_apps",
                             "--host", "127.0.0.1", "--port", str(port), "--log-level",
                             "warning"], env={**os.environ, "PYTHONPATH": str(TESTS)})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/say/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def say(served: str) -> Any:
    return lambda **settings: env(base_url=f"{served}/say", **settings)


@pytest.fixture
def walk_url(served: str) -> str:
    return f"{served}/walk"


def last_user(request: ScriptedRequest) -> str:
    return request.last_user_text()


def say_the_word(request: ScriptedRequest) -> ScriptedReply:
    words = re.findall(r"Say the word (\w+)\.", last_user(request))
    return ScriptedReply.text(words[-1] if words else "nothing to say")


def walker(request: ScriptedRequest) -> ScriptedReply:
    users = "\n".join(str(m.get("content")) for m in request.messages if m.get("role") == "user")
    seen = [json.loads(m.group(0)) for m in re.finditer(r"\{[^{}]*\"position\"[^{}]*\}", users)]
    where = seen[-1]
    gap = where["goal"] - where["position"]
    move = {"direction": "right" if gap > 0 else "left", "steps": min(3, abs(gap))}
    return ScriptedReply.text(f"Walking: ```json\n{json.dumps(move)}\n```")


def task(idx: int = 0) -> Task:
    return Task(idx=idx, prompt=None, system_prompt="You act in an environment.")


def users(episode: Episode) -> list[str]:
    return [m.text for m in episode.trace("assistant").messages if m.role == "user"]


# -- a single-field action: the reply's text --------------------------------------------------


async def test_a_single_field_schema_takes_the_reply_text(say: Any) -> None:
    made = say()
    episode = (await run_scripted(made, task(), say_the_word, seed=4)).episode
    assert episode.error is None
    record = episode.results["openenv"]
    assert record["ended_by"] == "done" and record["done"] is True
    assert [s["reward"] for s in record["steps"]] == [1.0, 1.0, 1.0]
    assert record["reward"] == 3.0 and episode.reward == 3.0
    assert all(set(s["action"]) == {"message"} for s in record["steps"])
    first = users(episode)[0]
    assert first.startswith("Your whole reply is sent to the environment as the action's "
                            "message (string, required): what you say.")
    assert first.endswith(f"Say the word {record['steps'][0]['action']['message']}.")
    assert episode.metrics["steps"] == 3.0 and episode.metrics["done"] == 1.0
    assert episode.trace("assistant").stop_condition == "done"


async def test_rewards_are_summed_whatever_they_are(say: Any) -> None:
    replies = iter(["wrong", "also wrong", "still wrong"])
    episode = (await run_scripted(say(), task(), lambda r: next(replies), seed=4)).episode
    assert episode.results["openenv"]["reward"] == 0.0 and episode.reward == 0.0
    assert episode.results["openenv"]["ended_by"] == "done"


async def test_an_empty_reply_is_never_stepped_and_gets_the_observation_again(say: Any) -> None:
    replies = iter(["", "  "])

    def handler(request: ScriptedRequest) -> ScriptedReply:
        text = next(replies, None)
        return ScriptedReply.text(text) if text is not None else say_the_word(request)

    episode = (await run_scripted(say(), task(), handler, seed=4)).episode
    record = episode.results["openenv"]
    # Three words, three steps: the two empty replies reached the environment as nothing.
    assert [s["reward"] for s in record["steps"]] == [1.0, 1.0, 1.0]
    assert record["steps"][0]["refused"] == ["empty", "empty"]
    assert episode.metrics["empty_replies"] == 2.0
    word = record["steps"][0]["action"]["message"]
    again = users(episode)[1]
    assert again.startswith("Your reply was empty, so nothing was sent to the environment.")
    assert again.endswith(f"Say the word {word}.")


async def test_replies_with_nothing_to_step_past_the_budget_end_the_episode(say: Any) -> None:
    replies = iter(["", "", ""])

    def handler(request: ScriptedRequest) -> ScriptedReply:
        return ScriptedReply.text(say_the_word(request).content if "Say the word" in
                                  last_user(request) and len(request.messages) < 3
                                  else next(replies))

    episode = (await run_scripted(say(reask_budget=2), task(), handler, seed=4)).episode
    assert episode.error is None
    record = episode.results["openenv"]
    assert record["ended_by"] == "no_action"
    assert [s["action"] is None for s in record["steps"]] == [False, True]
    assert record["steps"][1]["refused"] == ["empty"] * 3
    assert episode.reward == 1.0  # what the environment paid before
    assert episode.trace("assistant").stop_condition == "no_action"


async def test_the_episodes_seed_resets_the_environment(say: Any) -> None:
    made = say()

    async def words(seed: int) -> list[str]:
        episode = (await run_scripted(made, task(), say_the_word, seed=seed)).episode
        return [s["action"]["message"] for s in episode.results["openenv"]["steps"]]

    assert await words(9) == await words(9)
    assert await words(9) != await words(10)


async def test_seed_from_task_resets_every_rollout_alike(say: Any) -> None:
    made = say(seed_from="task")
    seeds = [(await run_scripted(made, task(5), say_the_word, seed=s)).episode
             .results["openenv"]["seed"] for s in (1, 2)]
    assert seeds == [5, 5]


async def test_max_steps_ends_an_episode_that_is_not_done(say: Any) -> None:
    episode = (await run_scripted(say(max_steps=2), task(), say_the_word, seed=4)).episode
    record = episode.results["openenv"]
    assert record["ended_by"] == "max_steps" and not record["done"]
    assert record["reward"] == 2.0


# -- a multi-field action: JSON ---------------------------------------------------------------


async def test_a_multi_field_schema_takes_json(walk_url: str) -> None:
    made = env(base_url=walk_url)
    episode = (await run_scripted(made, task(), walker, seed=2)).episode
    assert episode.error is None
    record = episode.results["openenv"]
    assert record["done"] and record["ended_by"] == "done"
    assert all(set(s["action"]) == {"direction", "steps"} for s in record["steps"])
    # -0.1 a step on the way, +1 on arrival.
    n = len(record["steps"])
    assert record["reward"] == pytest.approx(1.0 - 0.1 * (n - 1))
    first = users(episode)[0]
    assert first.startswith("Reply with the action as one JSON object with these fields: "
                            "direction (string, required, one of \"left\", \"right\"): which "
                            "way to walk; steps (integer, optional): how far, 1 to 3.")
    # An observation of several fields is shown as JSON.
    shown = json.loads(first.split("\n\n", 1)[1])
    assert shown["position"] == 0 and abs(shown["goal"]) >= 4


async def test_a_reply_that_does_not_parse_gets_the_reason_and_is_not_stepped(
        walk_url: str) -> None:
    scripted = iter(["left, two steps", '{"direction": "up"}', '{"steps": 2}'])

    def answer(request: ScriptedRequest) -> ScriptedReply:
        text = next(scripted, None)
        return ScriptedReply.text(text) if text is not None else walker(request)

    episode = (await run_scripted(env(base_url=walk_url, reask_budget=3), task(), answer,
                                  seed=2)).episode
    record = episode.results["openenv"]
    assert record["steps"][0]["refused"] == ["unparsed"] * 3
    assert episode.metrics["unparsed_replies"] == 3.0
    told = users(episode)[1:4]
    assert told[0].startswith("Nothing was sent to the environment: your reply could not be "
                              "read as JSON")
    assert "direction must be one of \"left\", \"right\", got \"up\"" in told[1]
    assert "missing direction" in told[2]
    assert all("Reply with one JSON object with these fields: direction" in t for t in told)
    assert record["done"]


async def test_an_action_the_server_refuses_is_told_back_not_stepped(walk_url: str) -> None:
    scripted = iter(['{"direction": "right", "steps": 9}'])

    def answer(request: ScriptedRequest) -> ScriptedReply:
        text = next(scripted, None)
        return ScriptedReply.text(text) if text is not None else walker(request)

    episode = (await run_scripted(env(base_url=walk_url), task(), answer, seed=2)).episode
    record = episode.results["openenv"]
    assert record["steps"][0]["refused"] == ["refused"]
    assert episode.metrics["refused_actions"] == 1.0
    told = users(episode)[1]
    assert told.startswith("The environment refused that action as invalid (")
    assert "steps: Input should be less than or equal to 3" in told
    assert record["done"]


async def test_episodes_beyond_the_servers_capacity_wait_for_a_session(walk_url: str) -> None:
    made = env(base_url=walk_url)  # walk_app allows one session at a time
    episodes = await asyncio.gather(*(run_scripted(made, task(i), walker, seed=i)
                                      for i in range(3)))
    assert [e.episode.error for e in episodes] == [None, None, None]
    assert all(e.episode.results["openenv"]["done"] for e in episodes)


# -- servers that fail --------------------------------------------------------------------------


async def test_a_server_that_is_down_gives_an_episode_with_an_error_type() -> None:
    made = env(base_url=f"http://127.0.0.1:{_free_port()}", connect_timeout_s=2)
    run = await run_scripted(made, task(), say_the_word, seed=1)
    episode = run.episode
    assert episode.error_type == "env_unreachable"
    assert "schema" in (episode.error or "")
    assert episode.results["openenv"]["ended_by"] == "env_error"
    assert episode.rewards == [] and episode.reward is None
    assert run.requests == []  # the model was never asked


async def test_a_server_that_answers_garbage_gives_an_episode_with_an_error_type(
        served: str) -> None:
    made = env(base_url=f"{served}/garbage")
    episode = (await run_scripted(made, task(), say_the_word, seed=1)).episode
    assert episode.error_type == "env_bad_response"
    assert "not JSON" in (episode.error or "")
    assert episode.rewards == []


async def test_an_environment_that_raises_gives_an_env_server_error(say: Any) -> None:
    episode = (await run_scripted(say(), task(), lambda r: "crash", seed=1)).episode
    assert episode.error_type == "env_server_error"
    assert "the environment crashed" in (episode.error or "")
    assert episode.results["openenv"]["reward"] is None


async def test_a_server_that_dies_mid_episode_gives_an_error_type(
        envs: list[OpenEnvEnv]) -> None:
    made = env(app="openenv_apps:say_app")
    envs.append(made)
    pid = made.server._local.pid  # type: ignore[union-attr]

    def handler(request: ScriptedRequest) -> ScriptedReply:
        if sum(1 for m in request.messages if m.get("role") == "user") == 2:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        return say_the_word(request)

    episode = (await run_scripted(made, task(), handler, seed=1)).episode
    assert episode.error_type == "env_unreachable"
    assert len([s for s in episode.results["openenv"]["steps"] if s["action"]]) == 1


# -- the local server ---------------------------------------------------------------------------


def test_a_local_app_is_started_at_load_and_stopped_on_close() -> None:
    made = env(app="openenv_apps:say_app")
    local = made.server._local
    assert local is not None and local.pid is not None
    assert httpx.get(f"{local.url}/health").json() == {"status": "healthy"}
    pid = local.pid
    made.close()
    assert survivors([pid], within_s=0) == set()


@pytest.mark.parametrize(("settings", "message"), [
    ({"app": "no_such_package.server.app:app"}, "No module named 'no_such_package'"),
    ({"app": "broken_app:app"}, "did not start: it exited with code 1: RuntimeError: this "
                                "environment is broken"),
    ({}, "set exactly one of base_url"),
    ({"base_url": "127.0.0.1:8000"}, "base_url must start with http://"),
    ({"base_url": "http://x", "app": "y"}, "set exactly one of base_url"),
    ({"base_url": "http://x", "reask_budget": -1}, "reask_budget must be 0 or more"),
])
def test_bad_settings_are_refused_in_one_line_when_the_env_loads(
        settings: dict[str, Any], message: str) -> None:
    with pytest.raises(InterplayError) as info:
        env(**settings)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
