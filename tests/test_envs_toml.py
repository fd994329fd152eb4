"""Envs written as TOML files of steps: the shipped ``echo-toml`` end to end, load errors as
one line, and verifiers that do not fit the steps refused at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from interplay.builtin_envs.envs import data_file
from interplay.errors import InterplayError
from interplay.plugins import host as plugins
from interplay.run.loader import env_class, env_from_toml
from interplay.testing import run_scripted
from interplay.values.records import Episode


async def run_echo_toml(reply: str) -> Episode:
    env = env_class("echo-toml")()
    env.check()
    task = next(iter(env.tasks()))
    return (await run_scripted(env, task, [reply])).episode


def test_echo_toml_is_registered_from_its_path() -> None:
    cls = env_class("echo-toml")
    assert cls.source == str(data_file("echo_toml.toml"))
    assert set(cls.seats) == {"assistant"} and cls.seats["assistant"].harness == "null"
    entry = plugins.registry().entry("envs", "echo-toml")
    assert entry.package == "interplay"


async def test_echo_toml_winning_and_losing() -> None:
    won = await run_echo_toml("  Apple ")
    assert won.error is None
    assert won.reward == 1.0
    assert won.rewards[0].name == "exact"
    assert won.trace("assistant").stop_condition == "agent_completed"
    lost = await run_echo_toml("an apple")
    assert lost.reward == 0.0


def write(tmp_path: Path, body: str, tasks: str = '{"prompt": "hi", "answer": "hi"}\n') -> Path:
    (tmp_path / "tasks.jsonl").write_text(tasks)
    path = tmp_path / "env.toml"
    path.write_text(body)
    return path


def one_line_error(path: Path, *, at_check: bool = False, names_file: bool = True) -> str:
    with pytest.raises(InterplayError) as err:
        cls = env_from_toml(path)
        if at_check:
            cls().check()
    message = str(err.value)
    assert "\n" not in message
    if names_file:  # a setting in the file; whether the env fits together is the env's
        assert message.startswith(f"{path}: "), message
    return message


def test_unknown_top_level_key_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'taskset = "tasks.jsonl"\nstpes = []\n')
    message = one_line_error(path)
    assert "unknown key stpes" in message and "allowed:" in message


def test_missing_taskset_and_missing_kind(tmp_path: Path) -> None:
    assert "missing value taskset" in one_line_error(write(tmp_path, 'name = "x"\n'))
    path = write(tmp_path, 'taskset = "tasks.jsonl"\n[[steps]]\nseat = "assistant"\n')
    assert "needs a kind" in one_line_error(path)


def test_unknown_step_kind_and_bad_step_setting_are_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'taskset = "tasks.jsonl"\n[[steps]]\nkind = "one_shoot"\n')
    message = one_line_error(path, at_check=True)
    assert "one_shoot" in message and "one_shot" in message  # names the known ones

    path = write(tmp_path, 'taskset = "tasks.jsonl"\n[[steps]]\nkind = "one_shot"\n'
                           'seet = "assistant"\n')
    assert "seet" in one_line_error(path, at_check=True)

    path = write(tmp_path, 'taskset = "tasks.jsonl"\n[[steps]]\nkind = "wordle"\n'
                           'max_guesses = "six"\n')
    assert "max_guesses" in one_line_error(path, at_check=True)

    path = write(tmp_path, 'taskset = "tasks.jsonl"\n[[steps]]\nkind = "one_shot"\n'
                           '[[verifiers]]\nkind = "exact"\nweight = "x"\n')
    assert one_line_error(path, at_check=True) == (
        f"{path}: verifiers[0].weight: expected float, got 'x'")

    path = write(tmp_path, 'taskset = "tasks.jsonl"\n[seats.assistant]\nmax_retries = 3\n'
                           '[[steps]]\nkind = "one_shot"\n')
    assert one_line_error(path).startswith(f"{path}: seats.assistant: unknown key max_retries")


@pytest.mark.parametrize(("body", "why"), [
    ('taskset = "tasks.jsonl"\n[steps]\nkind = "one_shot"\n', "written [[steps]] (not [steps])"),
    ('taskset = "tasks.jsonl"\n[verifiers]\nkind = "exact"\n', "written [[verifiers]]"),
    ('taskset = "tasks.jsonl"\nsteps = [1]\n', "steps must be an array of tables"),
    ('taskset = "tasks.jsonl"\n[[steps]]\nkind = 3\n', "steps[0].kind must be a string"),
    ("taskset = 5\n", "taskset must be a path or a [taskset] table, got int 5"),
    ('taskset = "tasks.jsonl"\nname = 5\n', "name must be a string, got int 5"),
    ('taskset = "tasks.jsonl"\ndescription = []\n', "description must be a string"),
    ('taskset = "tasks.jsonl"\nseats = 3\n', "seats must be a table of seats"),
    ('taskset = "tasks.jsonl"\n[seats]\nassistant = 3\n', "seats.assistant"),
])
def test_top_level_keys_of_the_wrong_type_are_one_line(tmp_path: Path, body: str,
                                                       why: str) -> None:
    assert why in one_line_error(write(tmp_path, body))


def test_bad_toml_syntax_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'taskset = "tasks.jsonl"\n[[steps]\nkind = "one_shot"\n')
    message = one_line_error(path)
    assert "not valid TOML" in message and "line 2" in message


@pytest.mark.parametrize(("verifier", "why"), [
    ('kind = "payoff"', "reads ctx.results['payoffs'] but no step writes it"),
    ('kind = "step_score"\nkey = "wordle"', "no step writes it"),
    ('kind = "exact"\nseat = "user"', "no step opens seat 'user'"),
    ('kind = "rubric"\nseat = "assistant"', "no criteria"),
])
def test_a_verifier_that_does_not_fit_the_steps_is_refused_at_load(tmp_path: Path,
                                                                   verifier: str,
                                                                   why: str) -> None:
    path = write(tmp_path, 'taskset = "tasks.jsonl"\n[[steps]]\nkind = "one_shot"\n'
                           f'[[verifiers]]\n{verifier}\n')
    message = one_line_error(path, at_check=True, names_file=False)
    assert why in message


def test_a_toml_env_can_use_the_builtin_puzzle_steps(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "short-wordle"\ntaskset = "tasks.jsonl"\n'
                           '[seats.assistant]\nharness = "null"\n'
                           '[[steps]]\nkind = "wordle"\nmax_guesses = 3\n'
                           '[[verifiers]]\nkind = "step_score"\nkey = "wordle"\n',
                 tasks='{"answer": "crane"}\n')
    cls = env_from_toml(path)
    cls().check()
    assert cls.name == "short-wordle"
