"""What the always_on tests share: a scenario written to a file and made an env, a scripted user
sim that records every read it is given, and a scripted agent that answers each wake by what
woke it (all on the scripted model, over real HTTP)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay import cli, hookimpl
from interplay.contracts.env import Env
from interplay.contracts.usersim import Answer, Read, UserSim
from interplay.plugins.hookspecs import Register
from interplay.run.loader import env_from_toml
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, run_scripted
from interplay.values.records import Episode
from interplay.world import App, app_tool

#: Every read the scripted user was given, in order (cleared by each run).
READS: list[Read] = []
#: The Person each scripted user was set up with, in order (cleared by each run).
PEOPLE: list[Any] = []

BASE = {"name": "test-world", "start": "2025-06-02T08:00", "timezone": "Europe/Berlin"}
USER = {"name": "Dana", "timezone": "Europe/Berlin", "user_sim": "script"}


@attrs.define
class ScriptUserConfig:
    #: Answers in order (the last repeats): keys of Answer, and sleep_s (real seconds the
    #: read takes).
    answers: list[dict[str, Any]] = attrs.Factory(lambda: [{"nothing": True}])


class ScriptUser(UserSim):
    """Answers from its settings, in order; records every read."""

    name = "script"
    Config: ClassVar[type] = ScriptUserConfig

    async def setup(self, person: Any, ctx: Any) -> None:
        await super().setup(person, ctx)
        PEOPLE.append(person)
        self.i = 0

    async def answer(self, read: Read) -> Answer:
        READS.append(read)
        answers = self.config.answers
        data = dict(answers[min(self.i, len(answers) - 1)])
        self.i += 1
        await asyncio.sleep(data.pop("sleep_s", 0.0))
        return Answer(**{"text": "", **data})


class ChattyApp(App):
    """An app whose tool takes the name of the agent's channel to the user."""

    kind = "chatty"

    @app_tool(name="message_user")
    def shout(self, text: str) -> str:
        """Say something loudly."""
        return text


@hookimpl
def register_user_sims(register: Register) -> None:
    register(ScriptUser)


def make_env(tmp_path: Path, scenario: Mapping[str, Any], *, user: Mapping[str, Any] | None = None,
             always_on: Mapping[str, Any] | None = None) -> Env:
    user = dict(user or {})
    if "answers" in user:
        user["user_sim_settings"] = {"answers": user.pop("answers")}
    data = {**BASE, "user": {**USER, **user}, **scenario}
    if always_on:
        data["always_on"] = {**data.get("always_on", {}), **always_on}
    path = tmp_path / f"scenario-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(data))
    env = env_from_toml(path)()
    env.check()
    return env


Decide = Callable[[str], "ScriptedReply | str | None"]


class Agent:
    """A scripted agent: ``decide(wake_text)`` answers each wake's first request; a request
    that follows tool results gets ``after_tools`` (plain text ends the turn). Requests of the
    user's and the contacts' seats go to ``user`` and ``contact``."""

    def __init__(self, decide: Decide, *, after_tools: str = "",
                 user: Callable[[ScriptedRequest], ScriptedReply | str] | None = None,
                 contact: Callable[[ScriptedRequest], ScriptedReply | str] | None = None,
                 ) -> None:
        self.decide = decide
        self.after_tools = after_tools
        self.user = user
        self.contact = contact
        self.wakes: list[str] = []
        self.requests: list[ScriptedRequest] = []

    def __call__(self, request: ScriptedRequest) -> ScriptedReply | str:
        msgs = request.messages
        system = str(msgs[0].get("content")) if msgs and msgs[0]["role"] == "system" else ""
        if "role-playing a user" in system:
            assert self.user is not None, "the scenario's user sim called the model"
            return self.user(request)
        if "You receive messages from" in system:
            assert self.contact is not None, "a contact called the model"
            return self.contact(request)
        self.requests.append(request)
        last = msgs[-1]
        if last["role"] == "tool":
            return self.after_tools
        text = str(last.get("content") or "")
        if text.startswith("[always_on] Earlier in this run"):
            # A digest of folded wakes opens the message: the wake is what follows it.
            text = text.split("\n\n", 1)[1]
        self.wakes.append(text)
        return self.decide(text) or ""


def say(text: str) -> ScriptedReply:
    return ScriptedReply.tool_call("message_user", {"text": text})


def quiet() -> ScriptedReply:
    return ScriptedReply.tool_call("stay_quiet", {})


def by_pattern(rules: Mapping[str, ScriptedReply | str],
               default: ScriptedReply | str = "") -> Decide:
    """Answer a wake by the first pattern (a regex) found in its text."""

    def decide(text: str) -> ScriptedReply | str:
        for pattern, reply in rules.items():
            if re.search(pattern, text):
                return reply
        return default

    return decide


async def run(env: Env, agent: Agent, *, seed: int = 0, task_idx: int = 0,
              seats: Mapping[str, Mapping[str, Any]] | None = None) -> Episode:
    READS.clear()
    PEOPLE.clear()
    task = list(env.tasks())[task_idx]
    result = await run_scripted(env, task, agent, seed=seed, seats=seats)
    return result.episode


def timeline(episode: Episode, kind: str | None = None) -> list[dict[str, Any]]:
    entries = episode.results["always_on"]["timeline"]
    return [e for e in entries if kind is None or e["kind"] == kind]


def wakes(episode: Episode) -> list[dict[str, Any]]:
    return timeline(episode, "wake")


#: What the agent of :func:`run_note_day` writes that she never reads.
PRIVATE_NOTE = "private thoughts"


def run_note_day(tmp_path: Path) -> Path:
    """``interplay eval`` of a four-hour always_on day on the scripted model (both seats): the
    agent writes to her once (message_user), then a plain reply, :data:`PRIVATE_NOTE`: a
    private note she never reads. Its results folder (``tmp_path / "run"``)."""
    scenario = tmp_path / "day.json"
    scenario.write_text(json.dumps({
        "start": "2025-06-02T08:00", "end": "PT4H", "timezone": "Europe/Berlin",
        "user": {"name": "Dana", "timezone": "Europe/Berlin", "awake": ["07:00", "23:00"]},
        "tasks": [{"prompt": "plan my day"}]}))

    def handler(request: ScriptedRequest) -> ScriptedReply:
        msgs = request.messages
        if "role-playing a user" in str(msgs[0]["content"]):
            return ScriptedReply.text("sounds good")
        if msgs[-1]["role"] == "tool":
            return ScriptedReply.text(PRIVATE_NOTE)
        if "plan my day" in str(msgs[-1]["content"]):
            return ScriptedReply.tool_call("message_user", {"text": "Your day is free"})
        return ScriptedReply.tool_call("stay_quiet", {})

    out = tmp_path / "run"
    with ScriptedModel(handler) as model:
        assert cli.main(["eval", str(scenario), "--base-url", model.base_url, "-o", str(out),
                         "--quiet", "--no-report"]) == 0
    return out
