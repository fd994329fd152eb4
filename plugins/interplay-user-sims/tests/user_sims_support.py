"""What the user sims' tests share: the relay env and an always_on scenario made with a given
user sim, and a scripted model that answers each seat by its system prompt (the assistant, the
LLM-played user), all over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from interplay import Env, Episode, Task, lookup
from interplay.run import env_from_toml
from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted

Answerer = Callable[[ScriptedRequest], "ScriptedReply | str"]

#: Words in each LLM-played sim's system prompt, to tell its requests from the assistant's.
USER_MARKS = ("role-playing a user", "You are playing a customer", "role-playing a busy person")


def is_user(request: ScriptedRequest) -> bool:
    msgs = request.messages
    system = str(msgs[0].get("content")) if msgs and msgs[0]["role"] == "system" else ""
    return any(mark in system for mark in USER_MARKS)


def seats(assistant: Answerer, user: Answerer | None = None) -> Answerer:
    """A handler: the user seat's requests to ``user``, every other to ``assistant``."""

    def handle(request: ScriptedRequest) -> ScriptedReply | str:
        if is_user(request):
            assert user is not None, "the user sim called the model"
            return user(request)
        return assistant(request)

    return handle


def replies(*texts: str | ScriptedReply) -> Answerer:
    """Answer in order; past the end, the last again."""
    items = list(texts)

    def answer(request: ScriptedRequest) -> ScriptedReply | str:
        return items.pop(0) if len(items) > 1 else items[0]

    return answer


def relay_env(user_sim: str, settings: Mapping[str, Any] | None = None, *,
              env: str = "user-sim", **relay: Any) -> Env:
    cls = lookup("envs", env)
    made = cls(cls.Config(relay=attrs.evolve(cls.Config().relay, user_sim=user_sim,
                                             user_sim_settings=dict(settings or {}), **relay)))
    made.check()
    return made


async def run_relay(env: Env, task: Task, handler: Answerer, *, seed: int = 0,
                    rollout: int = 0, seats: Mapping[str, Mapping[str, Any]] | None = None,
                    ) -> tuple[Episode, list[ScriptedRequest]]:
    result = await run_scripted(env, task, handler, seed=seed, rollout=rollout, seats=seats)
    return result.episode, result.requests


BASE = {"name": "sims-world", "start": "2025-06-02T08:00", "timezone": "Europe/Berlin"}


def scenario_env(tmp_path: Path, user: Mapping[str, Any], **scenario: Any) -> Env:
    """An always_on env from a scenario (one sitting unless ``end`` spans days)."""
    data = {**BASE, "user": {"name": "Dana", "timezone": "Europe/Berlin", **user}, **scenario}
    path = tmp_path / f"scenario-{len(list(tmp_path.glob('scenario-*')))}.json"
    path.write_text(json.dumps(data))
    env = env_from_toml(path)()
    env.check()
    return env


def first_task(env: Env) -> Task:
    return next(iter(env.tasks()))


def say(text: str) -> ScriptedReply:
    return ScriptedReply.tool_call("message_user", {"text": text})


def quiet() -> ScriptedReply:
    return ScriptedReply.tool_call("stay_quiet", {})


def agent(rules: Mapping[str, ScriptedReply | str], default: ScriptedReply | str = "",
          ) -> Answerer:
    """An always_on agent: each wake answered by the first rule whose text is in the wake's
    last message; after tool results it ends its turn."""

    def answer(request: ScriptedRequest) -> ScriptedReply | str:
        last = request.messages[-1]
        if last["role"] == "tool":
            return ""
        text = str(last.get("content") or "")
        for key, reply in rules.items():
            if key in text:
                return reply
        return default

    return answer


def ao(episode: Episode) -> dict[str, Any]:
    assert episode.error is None, episode.error
    return episode.results["always_on"]


def user_lines(episode: Episode, seat: str = "assistant") -> list[str]:
    return [m.text for m in episode.trace(seat).messages if m.role == "user"]
