"""A harness says when a run starts what keeps it from running on this machine
(``Harness.check``, a program not installed): ``interplay eval`` stops there with that one
line, before its results folder is made and before any model call, as a resumed run and
``Rollouts`` do; a regrade of a run made with it, which runs no harness, never asks."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from interplay import InterplayError, cli, hookimpl
from interplay.builtin_harnesses.chat import ChatHarness
from interplay.run import Rollouts
from interplay.testing import ScriptedModel


class Needy(ChatHarness):
    """The chat harness, with a program it needs that may be missing."""

    name = "test_needy"
    #: What check() says; empty: the program is there.
    problems: list[str] = []
    asked = 0

    def check(self) -> list[str]:
        Needy.asked += 1
        return list(Needy.problems)


@pytest.fixture(autouse=True)
def needy(register_plugin: Any) -> Any:
    def register_harnesses(register: Any) -> None:
        register(Needy)

    register_plugin(types.SimpleNamespace(register_harnesses=hookimpl(register_harnesses)),
                    "needy")
    Needy.problems, Needy.asked = [], 0
    yield
    Needy.problems, Needy.asked = [], 0


MISSING = "harness 'test_needy': 'needy-cli' is not installed; install it with `npm i needy`"


def eval_args(model: ScriptedModel, out: Path, *more: str) -> list[str]:
    return ["eval", "echo", "-n", "2", "--base-url", model.base_url, "-o", str(out),
            "--quiet", "--no-report", "--set", 'seats.assistant.harness="test_needy"', *more]


def test_a_program_missing_stops_the_run_before_its_folder_and_any_call(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Needy.problems = [MISSING]
    with ScriptedModel(["the word is x"]) as model:
        assert cli.main(eval_args(model, tmp_path / "run")) == 2
        assert model.requests == []
    assert capsys.readouterr().err == f"interplay: error: seats.assistant: {MISSING}\n"
    assert not (tmp_path / "run").exists()
    assert Needy.asked == 1


def test_a_resumed_run_asks_again_and_keeps_its_episodes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    with ScriptedModel(["the word is x"]) as model:
        assert cli.main(eval_args(model, out)) == 0
        before = (out / "episodes.jsonl").read_bytes()
        served = len(model.requests)
        Needy.problems = [MISSING]
        capsys.readouterr()
        assert cli.main(["eval", "--resume", str(out), "--retry-errors", "--quiet",
                         "--no-report"]) == 2
        assert len(model.requests) == served
    assert capsys.readouterr().err.endswith(f"seats.assistant: {MISSING}\n")
    assert (out / "episodes.jsonl").read_bytes() == before
    # A regrade runs no harness: the same run is regraded with the program still missing.
    asked = Needy.asked
    assert cli.main(["regrade", str(out), "-o", str(tmp_path / "regraded"), "--quiet"]) == 0
    assert (tmp_path / "regraded" / "episodes.jsonl").exists()
    assert Needy.asked == asked


def test_rollouts_ask_when_they_are_made() -> None:
    Needy.problems = [MISSING]
    with pytest.raises(InterplayError, match=r"^seats\.assistant: harness 'test_needy'"):
        Rollouts("echo", seats={"assistant": {"harness": "test_needy"}})
    Needy.problems = []
    Rollouts("echo", seats={"assistant": {"harness": "test_needy"}})
