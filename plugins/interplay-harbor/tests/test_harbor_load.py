"""What the harbor env refuses when it loads, each in one line naming the file and what to
change, before any container or model call; and what it reads from a task as Harbor does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from interplay import InterplayError, load_env
from interplay_harbor.env import examples
from interplay_harbor.tasks import read_task, read_tasks, resolve_env

EXAMPLES = ["count-errors", "csv-total", "fix-add", "git-commit", "hello-file", "json-config",
            "rename-photos", "service-port", "slugify", "word-count-cli"]


def refused(path: Path) -> str:
    with pytest.raises(InterplayError) as caught:
        load_env("harbor", {"path": str(path)})
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def test_the_ten_examples_load_as_tasks_with_their_images_and_limits() -> None:
    env = load_env("harbor", {})
    tasks = list(env.tasks())
    assert [t.info["harbor"]["name"] for t in tasks] == EXAMPLES
    fix = tasks[EXAMPLES.index("fix-add")]
    assert fix.prompt.startswith("`calc.py` in /app has a bug")
    assert fix.workspace.dockerfile == str(examples() / "fix-add" / "environment" / "Dockerfile")
    assert (fix.workspace.cpus, fix.workspace.memory_mb) == (1.0, 1024)
    assert fix.info["harbor"]["agent_timeout_s"] == 120.0
    assert fix.info["harbor"]["verifier_timeout_s"] == 60.0
    # The user-sim variant's table, which Harbor ignores.
    port = tasks[EXAMPLES.index("service-port")]
    assert "8123" in port.info["scenario"] and "8123" not in port.prompt


def test_one_task_folder_is_a_dataset_of_one_and_tasks_picks_some() -> None:
    [task] = read_tasks(examples() / "slugify")
    assert task.name == "slugify"
    picked = read_tasks(examples(), ["hello-file", "fix-add"])
    assert [t.name for t in picked] == ["fix-add", "hello-file"]
    with pytest.raises(InterplayError, match="no task 'nope'"):
        read_tasks(examples(), ["nope"])


def test_a_folder_with_no_task(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    assert "holds no Harbor task" in refused(tmp_path)
    assert "does not exist" in refused(tmp_path / "missing")


def test_a_task_toml_that_does_not_parse(task_copy: Callable[[str], Path]) -> None:
    task = task_copy("hello-file")
    (task / "task.toml").write_text("[agent\ntimeout_sec = 1\n")
    message = refused(task.parent)
    assert message.startswith(f"{task}/task.toml: not valid TOML")


@pytest.mark.parametrize("key", ["schema_version", "version"])
def test_an_unknown_schema_version(task_copy: Callable[[str], Path], key: str) -> None:
    task = task_copy("hello-file")
    text = (task / "task.toml").read_text().replace('schema_version = "1.4"', f'{key} = "9.0"')
    (task / "task.toml").write_text(text)
    message = refused(task.parent)
    assert "schema_version '9.0' is not one Harbor 0.26 reads (1.0, 1.1, 1.2, 1.3, 1.4)" in message


def test_an_old_schema_version_is_read(task_copy: Callable[[str], Path]) -> None:
    task = task_copy("hello-file")
    text = (task / "task.toml").read_text().replace('schema_version = "1.4"', 'version = "1.0"')
    (task / "task.toml").write_text(text)
    assert read_task(task).schema_version == "1.0"


def test_a_missing_test_script(task_copy: Callable[[str], Path]) -> None:
    task = task_copy("fix-add")
    (task / "tests" / "test.sh").unlink()
    assert refused(task.parent) == (f"{task}: no tests/test.sh; write the test that scores the "
                                    f"task (it writes /logs/verifier/reward.txt or reward.json)")


def test_a_docker_compose_environment_is_refused(task_copy: Callable[[str], Path]) -> None:
    task = task_copy("hello-file")
    (task / "environment" / "docker-compose.yaml").write_text("services: {main: {build: .}}\n")
    assert "environments written as docker-compose are not supported" in refused(task.parent)


@pytest.mark.parametrize(("change", "said"), [
    ("\n[[steps]]\nname = \"one\"\n", "multi-step tasks"),
    ("\n[verifier.environment]\ncpus = 1\n", "a verifier in a separate environment"),
    ("", "no instruction.md"),
    ("", "no environment/Dockerfile"),
])
def test_what_else_cannot_run_as_harbor_would(task_copy: Callable[[str], Path], change: str,
                                              said: str) -> None:
    task = task_copy("hello-file")
    if said == "no instruction.md":
        (task / "instruction.md").unlink()
    elif said == "no environment/Dockerfile":
        (task / "environment" / "Dockerfile").unlink()
    elif change.startswith("\n[verifier.environment]"):
        text = (task / "task.toml").read_text().replace("[verifier]\ntimeout_sec = 60.0\n", "")
        (task / "task.toml").write_text(text + "\n[verifier]\ntimeout_sec = 60.0" + change)
    else:
        (task / "task.toml").write_text((task / "task.toml").read_text() + change)
    assert said in refused(task.parent)


def test_a_bad_timeout_and_a_bad_user_table(task_copy: Callable[[str], Path]) -> None:
    task = task_copy("hello-file")
    toml = task / "task.toml"
    original = toml.read_text()
    toml.write_text(original.replace("timeout_sec = 120.0", "timeout_sec = -1"))
    assert "[agent] timeout_sec must be a positive number, got -1" in refused(task.parent)
    toml.write_text(original + '\n[interplay.user]\nknows = "x"\nsecret = "y"\n')
    assert "[interplay.user] has unknown key(s) secret" in refused(task.parent)


def test_task_env_is_resolved_from_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARBOR_TEST_TOKEN", "t0k")
    assert resolve_env({"A": "${HARBOR_TEST_TOKEN}", "B": "${HARBOR_UNSET_X:-dflt}",
                        "C": "plain"}) == {"A": "t0k", "B": "dflt", "C": "plain"}
    with pytest.raises(InterplayError, match=r"needs \$\{HARBOR_UNSET_X\}"):
        resolve_env({"A": "${HARBOR_UNSET_X}"})
