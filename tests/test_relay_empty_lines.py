"""The relay never passes an empty line from the user sim to the assistant: the sim is asked
again within ``empty_retries``, then the relay ends with ``user_empty``; words that come with
the done marker are recorded, not passed on (over real HTTP, against the scripted model playing
both the user and the assistant)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from interplay.builtin_envs.steps import EMPTY_LINE_REASK, Relay, RelayConfig
from interplay.contracts.env import Env, SeatSpec
from interplay.errors import InterplayError
from interplay.run.episode import run_episode
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values.records import Task

USER_MARK = "role-playing a user"


class RelayEnv(Env):
    name = "relay-test"
    seats = {"assistant": SeatSpec(harness="null"),
             "user": SeatSpec(harness="null", trainable=False)}

    def __init__(self, **cfg: object) -> None:
        super().__init__()
        self.relay = Relay(RelayConfig(**cfg))  # type: ignore[arg-type]

    def tasks(self) -> list[Task]:
        return []

    def steps(self) -> list[Relay]:
        return [self.relay]


def is_user(request: ScriptedRequest) -> bool:
    return USER_MARK in json.dumps(request.messages[:1])


def handler(user_lines: list[str]) -> Callable[[ScriptedRequest], ScriptedReply]:
    """The user says ``user_lines`` in order (then the done marker); the assistant answers."""
    lines = iter(user_lines)

    def handle(request: ScriptedRequest) -> ScriptedReply:
        if is_user(request):
            return ScriptedReply.text(next(lines, "###DONE###"))
        return ScriptedReply.text("assistant reply")

    return handle


async def run(user_lines: list[str], **cfg: object):
    async with ScriptedModel(handler(user_lines)) as model:
        from interplay.run.episode import RunResources

        resources = RunResources(endpoint=model.endpoint)
        try:
            episode = await run_episode(RelayEnv(**cfg), Task(0, prompt="need help"),
                                        resources=resources)
        finally:
            await resources.aclose()
        return episode, list(model.requests)


async def test_an_empty_user_line_is_asked_again_and_never_reaches_the_assistant() -> None:
    episode, requests = await run(["", "  \n", "hello there"])
    assert episode.error is None
    assert episode.results["relay"] == {"turns": 1, "ended_by": "user_done",
                                        "done_reason": "", "user_lines": ["hello there"],
                                        "closing_line": ""}
    assert episode.metrics["empty_user_lines"] == 2.0
    assistant_users = [m.text for m in episode.trace("assistant").messages if m.role == "user"]
    assert assistant_users == ["hello there"]
    # The sim was told its line was empty; the assistant never saw that note.
    user_requests = [r for r in requests if is_user(r)]
    assert [r.last_user_text() for r in user_requests[1:3]] == [EMPTY_LINE_REASK] * 2
    assert all(EMPTY_LINE_REASK not in json.dumps(r.messages) for r in requests
               if not is_user(r))


async def test_an_empty_line_past_the_budget_ends_the_relay_with_a_reason() -> None:
    episode, requests = await run(["first line", "", "", ""], empty_retries=2)
    assert episode.error is None
    assert episode.results["relay"] == {"turns": 1, "ended_by": "user_empty",
                                        "done_reason": "", "user_lines": ["first line"],
                                        "closing_line": ""}
    assert episode.metrics["empty_user_lines"] == 3.0
    assistant = episode.trace("assistant")
    assert assistant.stop_condition == "user_empty"
    assert [m.text for m in assistant.messages if m.role == "user"] == ["first line"]
    assert sum(1 for r in requests if not is_user(r)) == 1


async def test_an_empty_opening_line_never_opens_the_assistant_chat() -> None:
    episode, requests = await run(["", ""], empty_retries=1)
    assert episode.results["relay"] == {"turns": 0, "ended_by": "user_empty",
                                        "done_reason": "", "user_lines": [],
                                        "closing_line": ""}
    assert all(is_user(r) for r in requests)
    assert episode.trace("assistant").messages == []


def test_a_negative_budget_is_refused_at_load() -> None:
    with pytest.raises(InterplayError, match="empty_retries must be 0 or more"):
        RelayEnv(empty_retries=-1).check()



async def test_closing_words_with_the_done_marker_are_recorded_not_passed_on() -> None:
    episode, requests = await run(["hello there", "Thanks, that fixed it. ###DONE###"])
    assert episode.error is None
    assert episode.results["relay"] == {
        "turns": 1, "ended_by": "user_done", "done_reason": "", "user_lines": ["hello there"],
        "closing_line": "Thanks, that fixed it."}
    assistant_users = [m.text for m in episode.trace("assistant").messages if m.role == "user"]
    assert assistant_users == ["hello there"]
    assert [is_user(r) for r in requests] == [True, False, True]


async def test_the_done_marker_alone_leaves_no_closing_line() -> None:
    episode, _ = await run(["hello there"])
    assert episode.results["relay"]["closing_line"] == ""
