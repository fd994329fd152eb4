"""alphabet-sort and color-codeword end to end over real HTTP with the scripted model.

The winning scripts are independent oracles: they read the names (or the code book) from the
requests the model received and answer from them, so the test checks the env's instructions
and its grading together.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from interplay.builtin_envs.puzzles import parse_name_list
from interplay.contracts.env import Env
from interplay.errors import InterplayError
from interplay.run.loader import env_class
from interplay.testing import ScriptedRequest, run_scripted
from interplay.values.records import Episode

NAME = re.compile(r"^([A-Z][a-z]+) ([A-Z][a-z]+)$")


async def run(env_name: str, handler: Callable[[ScriptedRequest], str], *, task_idx: int = 0,
              seed: int = 1, rollout: int = 0, config: Any = None
              ) -> tuple[Episode, list[ScriptedRequest]]:
    env: Env = env_class(env_name)(config)
    env.check()
    task = list(env.tasks())[task_idx]
    run = await run_scripted(env, task, handler, seed=seed, rollout=rollout)
    return run.episode, run.requests


def user_texts(req: ScriptedRequest) -> list[str]:
    return [m["content"] for m in req.messages if m["role"] == "user"]


def names_given(req: ScriptedRequest) -> list[str]:
    return [ln for text in user_texts(req) for ln in text.splitlines() if NAME.match(ln)]


def sort_oracle(req: ScriptedRequest) -> str:
    """Sorts every name given so far by last name, A to Z (task 0's rule)."""
    assert "by LAST name" in user_texts(req)[-1]
    names = sorted(names_given(req), key=lambda n: (n.split()[1], n.split()[0]))
    return "Here you go:\n" + "\n".join(f"{i}. {n}" for i, n in enumerate(names, 1))


async def test_alphabet_sort_winning_script_scores_every_turn() -> None:
    episode, requests = await run("alphabet-sort", sort_oracle)
    assert episode.error is None
    assert len(requests) == 3  # one model call per turn, one chat held open
    # Turn 1 gives 4 names, each later turn adds 2, and the chat keeps the whole conversation.
    assert [len(names_given(r)) for r in requests] == [4, 6, 8]
    assert len(requests[-1].messages) == 1 + 3 + 2  # system, 3 user turns, 2 earlier replies
    assert episode.reward == 1.0
    assert episode.results["alphabet_sort"]["correct"] == 3
    assert episode.metrics["turns"] == 3.0 and episode.metrics["turns_correct"] == 3.0
    trace = episode.trace("assistant")
    assert trace.reward == 1.0
    assert trace.stop_condition == "user_done"


async def test_alphabet_sort_losing_scripts_score_the_fraction_right() -> None:
    episode, _ = await run("alphabet-sort", lambda req: "I would rather not.")
    assert episode.reward == 0.0
    assert episode.results["alphabet_sort"]["correct"] == 0

    def first_turn_only(req: ScriptedRequest) -> str:
        if len(user_texts(req)) == 1:
            return sort_oracle(req)
        # Later turns forget the earlier names: only the new ones, sorted.
        new = [ln for ln in user_texts(req)[-1].splitlines() if NAME.match(ln)]
        return "\n".join(sorted(new, key=lambda n: n.split()[1]))

    episode, _ = await run("alphabet-sort", first_turn_only)
    assert episode.reward == pytest.approx(1 / 3)
    rounds = episode.results["alphabet_sort"]["rounds"]
    assert [r["correct"] for r in rounds] == [True, False, False]


async def test_alphabet_sort_is_reproducible_from_the_seed() -> None:
    _, a = await run("alphabet-sort", sort_oracle, seed=7)
    _, b = await run("alphabet-sort", sort_oracle, seed=7)
    _, c = await run("alphabet-sort", sort_oracle, seed=7, rollout=1)
    assert names_given(a[-1]) == names_given(b[-1])
    assert names_given(a[-1]) != names_given(c[-1])


async def test_alphabet_sort_reverse_order_task() -> None:
    def desc_by_last(req: ScriptedRequest) -> str:
        assert "REVERSE" in user_texts(req)[-1]
        names = sorted(names_given(req), key=lambda n: (n.split()[1], n.split()[0]),
                       reverse=True)
        return ", ".join(names)  # comma separated is read too

    episode, requests = await run("alphabet-sort", desc_by_last, task_idx=2)
    assert len(requests) == 4
    assert episode.reward == 1.0


def test_name_list_parsing_rules() -> None:
    assert parse_name_list("Sorted:\n1. Ada Moreau\n2) Hugo Novak.\n- 'Vera Osei'") == [
        "Ada Moreau", "Hugo Novak", "Vera Osei"]
    assert parse_name_list("Ada Moreau, Hugo  Novak, Vera Osei") == [
        "Ada Moreau", "Hugo Novak", "Vera Osei"]
    assert parse_name_list("thinking...\n<sorted>\nAda Moreau\nHugo Novak\n</sorted>") == [
        "Ada Moreau", "Hugo Novak"]
    assert parse_name_list("```\nAda Moreau\nHugo Novak\n```") == ["Ada Moreau", "Hugo Novak"]
    assert parse_name_list("") == []


async def test_alphabet_sort_bad_task_parameters_are_refused() -> None:
    cls = env_class("alphabet-sort")
    env = cls(cls.Config(puzzle=cls.Config().puzzle.__class__(turns=30, first=30)))
    with pytest.raises(InterplayError, match="at most"):
        env.check()


# -- color-codeword --------------------------------------------------------------------------


def codeword_oracle(req: ScriptedRequest) -> str:
    system = req.messages[0]["content"]
    book = dict(re.findall(r"^- (\w+): (\w+)$", system, re.M))
    assert book, "the code book is in the system prompt"
    for text in user_texts(req):
        book.update(re.findall(r"(\w+) is now (\w+)", text))
    colors = re.search(r"Colors: (.*)", user_texts(req)[-1])
    assert colors is not None
    return "Code: " + " ".join(book[c.strip()] for c in colors.group(1).split(","))


async def test_color_codeword_winning_script_tracks_the_changing_code_book() -> None:
    episode, requests = await run("color-codeword", codeword_oracle)
    assert episode.error is None
    assert len(requests) == 3
    assert "Code book change" in user_texts(requests[1])[-1]
    assert episode.reward == 1.0
    assert episode.results["color_codeword"]["correct"] == 3


async def test_color_codeword_stale_code_book_loses_the_changed_turns() -> None:
    def stale(req: ScriptedRequest) -> str:
        book = dict(re.findall(r"^- (\w+): (\w+)$", req.messages[0]["content"], re.M))
        colors = re.search(r"Colors: (.*)", user_texts(req)[-1])
        assert colors is not None
        return " ".join(book[c.strip()] for c in colors.group(1).split(","))

    episode, _ = await run("color-codeword", stale)
    rounds = episode.results["color_codeword"]["rounds"]
    assert rounds[0]["correct"] is True
    # A later turn is wrong exactly when its sequence uses a re-coded color.
    assert episode.reward == pytest.approx(sum(r["correct"] for r in rounds) / 3)
    assert episode.reward < 1.0

    episode, _ = await run("color-codeword", lambda req: "")
    assert episode.reward == 0.0
    assert episode.metrics["turns"] == 3.0
