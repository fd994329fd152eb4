"""What every env takes from the run beside its own settings (interplay.contracts.EnvOptions): the
user sim of any env with a user (the relay's, always_on's) and verifiers beside or instead of the
env's own; the refusals in one line; `interplay describe run` and its flags."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import attrs
import pytest

from interplay import Answer, InterplayError, UserSim, cli, hookimpl, load_env
from interplay.cli import build_parser
from interplay.contracts import Read
from interplay.run.config import FLAGS, RunConfig
from interplay.testing import ScriptedModel, run_scripted


@attrs.define
class LinesConfig:
    #: Her lines, in order; then she is done.
    lines: list[str] = attrs.Factory(list)


class Lines(UserSim):
    """Says her lines in order, then is done (no model)."""

    name = "test_lines"
    Config = LinesConfig

    async def answer(self, read: Read) -> Answer:
        lines = self.config.lines
        return Answer(lines[read.turn]) if read.turn < len(lines) else Answer("", done=True)


LINES = {"lines": ["Where is my order #7?"]}


@pytest.fixture(autouse=True)
def lines_sim(register_plugin: Any) -> None:
    def register_user_sims(register: Any) -> None:
        register(Lines)

    module = types.ModuleType("lines_plugin")
    module.register_user_sims = hookimpl(register_user_sims)  # type: ignore[attr-defined]
    register_plugin(module)


async def test_the_relays_user_is_the_runs_user_sim() -> None:
    env = load_env("user-sim", {"user_sim": "test_lines", "user_sim_settings": LINES})
    env.check()
    (relay,) = env.run_steps()
    assert (relay.config.user_sim, relay.config.user_sim_settings) == ("test_lines", LINES)
    # A sim without a model needs no user seat: the relay asks for the assistant's alone.
    assert relay.seats() == {"assistant"}
    task = next(iter(env.tasks()))
    run = await run_scripted(env, task, ["It ships today."], seed=1)
    assert run.episode.error is None, run.episode.error
    assert run.episode.results["relay"]["user_lines"] == ["Where is my order #7?"]
    assert run.episode.results["relay"]["ended_by"] == "user_done"
    # The env's own settings of its relay stay as the env chose them.
    assert relay.config.max_turns == env.config.relay.max_turns


def test_user_sim_settings_alone_are_laid_over_the_envs_own_sim() -> None:
    env = load_env("user-sim", {"relay": {"user_sim_settings": {"opening": "Hi", "seat": "user"}},
                                "user_sim_settings": {"opening": "Hello there"}})
    (relay,) = env.run_steps()
    assert relay.config.user_sim == "llm"
    assert relay.config.user_sim_settings == {"opening": "Hello there", "seat": "user"}


def test_always_ons_user_is_the_runs_user_sim_too() -> None:
    env = load_env("always-on-week", {"user_sim": "llm",
                                      "user_sim_settings": {"nothing_marker": "(none)"}})
    env.check()
    user_step = next(s for s in env.run_steps() if s.name == "user_sim")
    assert user_step.config.user_sim == "llm"
    assert user_step.config.user_sim_settings["nothing_marker"] == "(none)"


@pytest.mark.parametrize(("settings", "says"), [
    ({"user_sim": "test_lines"},
     "env.user_sim: env 'echo' has no user for a user sim to play (its steps: one_shot)"),
    ({"own_verifiers": False},
     "env.own_verifiers = false, and env.verifiers names none: nothing would score"),
    ({"verifiers": [{"kind": "nope"}]}, "env.verifiers[0]: unknown verifier 'nope'; known: "),
    ({"verifiers": [{"kind": "exact", "scope": "nowhere"}]}, "env.verifiers[0].scope"),
    ({"user_sim": 3}, "env.user_sim: expected str, got 3"),
])
def test_what_an_env_cannot_take_is_one_line(settings: dict, says: str) -> None:
    with pytest.raises(InterplayError) as caught:
        load_env("echo", settings).check()
    assert says in caught.value.message and "\n" not in caught.value.message


def test_an_unknown_user_sim_names_the_registered_ones() -> None:
    with pytest.raises(InterplayError, match=r"unknown user sim 'nobody'; known: .*llm"):
        load_env("user-sim", {"user_sim": "nobody"}).check()


def test_verifiers_score_beside_the_envs_own_or_instead(tmp_path: Path) -> None:
    row = {"kind": "regex", "expected": "o", "weight": 0.0}
    beside = load_env("echo", {"verifiers": [row]})
    assert [v.name for v in beside.run_verifiers()] == ["contains", "regex"]
    instead = load_env("echo", {"verifiers": [row], "own_verifiers": False})
    assert [v.name for v in instead.run_verifiers()] == ["regex"]
    with ScriptedModel(lambda request: "hello") as model:
        out = tmp_path / "run"
        assert cli.main(["eval", "echo", "-n", "2", "--base-url", model.base_url, "-o",
                         str(out), "-q", "--no-report", "--set",
                         'env.verifiers=[{kind = "regex", expected = "hel+o", weight = 0.0}]']
                        ) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["regex"] == 1.0
    assert summary["metric_counts"] == {"contains": 2, "regex": 2}


def test_describe_run_names_the_flag_of_each_key_the_command_really_has() -> None:
    parser = build_parser()
    for key, flag in FLAGS.items():
        assert key.split(".")[0] in {f.name for f in attrs.fields(RunConfig)}, key
        if key == "env":
            continue
        option = flag.split()[0].rstrip(",")
        _, rest = parser.parse_known_args(["eval", "echo", option, "local"
                                           if option == "--executor" else "1"])
        assert option not in rest, (key, flag)
