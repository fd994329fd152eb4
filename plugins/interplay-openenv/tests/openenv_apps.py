"""Small OpenEnv environments for the tests, written with the library's own server classes
(``openenv.core.env_server``) and served by uvicorn on 127.0.0.1, plus one server that speaks
garbage.

- ``say_app``: one string field. Reset names a word (from the seed); each step pays 1 when the
  message is that word, and names the next; done after three words. The message ``crash`` makes
  the environment raise.
- ``walk_app``: several fields. Walk left or right one to three steps towards a goal (from the
  seed) on a line; -0.1 a step, +1 on reaching it, done there. One session at a time.
- ``garbage_app``: declares say_app's schema and answers health checks, then answers every
  session message with text that is not JSON.
- ``all_apps``: the three under /say, /walk and /garbage, in one server (each server process
  spends seconds importing openenv-core).
"""

from __future__ import annotations

import json
import random
from typing import Any, Literal

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from pydantic import Field
from starlette.applications import Starlette
from starlette.routing import Mount

WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger", "piano", "lemon")


class Say(Action):
    message: str = Field(..., description="what you say")


class Heard(Observation):
    prompt: str = ""


class SayEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self._words: list[str] = []

    def reset(self, seed: int | None = None, episode_id: str | None = None) -> Heard:
        self._state = State(episode_id=episode_id, step_count=0)
        self._words = random.Random(seed).sample(WORDS, 3)
        return Heard(prompt=f"Say the word {self._words[0]}.")

    def step(self, action: Say) -> Heard:  # type: ignore[override]
        if action.message == "crash":
            raise RuntimeError("the environment crashed")
        word = self._words[self._state.step_count]
        self._state.step_count += 1
        reward = 1.0 if action.message.strip().lower() == word else 0.0
        if self._state.step_count == len(self._words):
            return Heard(prompt="That was the last word.", reward=reward, done=True)
        return Heard(prompt=f"Say the word {self._words[self._state.step_count]}.",
                     reward=reward)

    @property
    def state(self) -> State:
        return self._state


class Move(Action):
    direction: Literal["left", "right"] = Field(..., description="which way to walk")
    steps: int = Field(default=1, ge=1, le=3, description="how far, 1 to 3")


class Where(Observation):
    position: int = 0
    goal: int = 0


class WalkEnvironment(Environment):
    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self._position = 0
        self._goal = 1

    def reset(self, seed: int | None = None, episode_id: str | None = None) -> Where:
        self._state = State(episode_id=episode_id, step_count=0)
        self._position = 0
        self._goal = random.Random(seed).choice([-6, -5, -4, 4, 5, 6])
        return Where(position=0, goal=self._goal)

    def step(self, action: Move) -> Where:  # type: ignore[override]
        self._state.step_count += 1
        self._position += action.steps if action.direction == "right" else -action.steps
        reached = self._position == self._goal
        return Where(position=self._position, goal=self._goal,
                     reward=1.0 if reached else -0.1, done=reached)

    @property
    def state(self) -> State:
        return self._state


say_app = create_app(SayEnvironment, Say, Heard, max_concurrent_envs=16)
walk_app = create_app(WalkEnvironment, Move, Where, max_concurrent_envs=1)


async def garbage_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await receive()  # startup
        await send({"type": "lifespan.startup.complete"})
        await receive()  # shutdown
        await send({"type": "lifespan.shutdown.complete"})
    elif scope["type"] == "http":
        body = {"health": {"status": "healthy"},
                "schema": {"action": Say.model_json_schema(), "observation": {},
                           "state": {}}}.get(scope["path"].rsplit("/", 1)[-1])
        await send({"type": "http.response.start", "status": 200 if body else 404,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})
    elif scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while (await receive())["type"] != "websocket.disconnect":
            await send({"type": "websocket.send", "text": "this is not json"})


all_apps = Starlette(routes=[Mount("/say", say_app), Mount("/walk", walk_app),
                             Mount("/garbage", garbage_app)])
