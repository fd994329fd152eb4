"""Tasks that bring a workspace, from every kind of taskset, and the sandbox a run gives them:
what is refused when the run starts, in one line, before any model call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from interplay import InterplayError, Workspace
from interplay.run.config import check_sandbox, resolve
from interplay.run.episode import RunResources, sandbox_kind
from interplay.run.loader import env_from_toml
from interplay.testing import run_interplay
from interplay.values import load_jsonl
from interplay.values.taskset import DatasetTaskset


def test_a_jsonl_rows_workspace_reads_its_paths_from_the_tasksets_folder(tmp_path: Path) -> None:
    (tmp_path / "repos" / "calc").mkdir(parents=True)
    rows = [{"prompt": "fix it", "workspace": {
        "folder": "repos/calc", "dockerfile": "env/Dockerfile", "files": {"a.txt": "1"},
        "repo": {"url": "repos/calc", "commit": "main"}, "setup": ["true"],
        "env": {"X": "1"}, "cpus": 2, "memory_mb": 512}},
        {"prompt": "no workspace"},
        {"prompt": "absolute", "workspace": {"folder": "/srv/x", "image": "python:3.12"}}]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, second, third = load_jsonl(path)
    ws = first.workspace
    assert ws is not None
    assert ws.folder == f"{tmp_path}/repos/calc"
    assert ws.dockerfile == f"{tmp_path}/env/Dockerfile"
    assert ws.repo is not None and ws.repo.url == f"{tmp_path}/repos/calc"
    assert (ws.repo.commit, ws.files, ws.setup, ws.env, ws.cpus, ws.memory_mb) == (
        "main", {"a.txt": "1"}, ["true"], {"X": "1"}, 2.0, 512)
    assert second.workspace is None and "workspace" not in second.info
    assert third.workspace == Workspace(folder="/srv/x", image="python:3.12")


def test_a_bad_workspace_is_one_line_naming_the_row(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"prompt": "x", "workspace": {"setup": "make"}}) + "\n")
    with pytest.raises(InterplayError) as caught:
        load_jsonl(path)
    assert caught.value.message == f"{path}:1: workspace.setup: expected an array, got 'make'"


def test_an_env_files_tasks_rows_bring_workspaces(tmp_path: Path) -> None:
    (tmp_path / "env.toml").write_text(
        'name = "fixes"\n'
        '[[tasks]]\nprompt = "Fix calc."\n'
        '[tasks.workspace]\nfolder = "calc"\nsetup = ["python3 -m compileall -q ."]\n'
        '[tasks.workspace.files]\n"NOTES.md" = "read me"\n'
        '[[tasks]]\nprompt = "Another."\n'
        '[[steps]]\nkind = "one_shot"\n')
    env = env_from_toml(tmp_path / "env.toml")()
    first, second = env.tasks()
    assert (first.idx, second.idx) == (0, 1)
    assert first.workspace == Workspace(folder=f"{tmp_path}/calc",
                                        setup=["python3 -m compileall -q ."],
                                        files={"NOTES.md": "read me"})
    assert second.workspace is None


def test_an_env_file_with_both_or_neither_taskset_nor_tasks_is_refused(tmp_path: Path) -> None:
    both = tmp_path / "both.toml"
    both.write_text('taskset = "t.jsonl"\n[[tasks]]\nprompt = "x"\n[[steps]]\nkind = "one_shot"\n')
    with pytest.raises(InterplayError, match="both taskset and tasks"):
        env_from_toml(both)


def test_a_datasets_workspace_column_of_json_text(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    rows = [{"prompt": "fix", "workspace": json.dumps({"folder": "calc", "setup": ["true"]})}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    [task] = DatasetTaskset(dataset=str(tmp_path / "data.jsonl")).load()
    assert task.workspace == Workspace(folder=f"{tmp_path}/calc", setup=["true"])


# -- the sandbox a run gives them --------------------------------------------------------------


def test_unset_a_task_with_a_workspace_gets_docker_and_one_without_none(tmp_path: Path) -> None:
    env = env_from_toml(write_env(tmp_path))()
    with_ws, without = env.tasks()
    assert sandbox_kind({}, env, with_ws) == "docker"
    assert sandbox_kind({}, env, without) is None
    assert sandbox_kind({"kind": "local"}, env, without) == "local"
    assert sandbox_kind({"kind": "none"}, env, with_ws) is None


def write_env(tmp_path: Path) -> Path:
    path = tmp_path / "env.toml"
    path.write_text('name = "ws"\n[[tasks]]\nprompt = "a"\n[tasks.workspace]\n'
                    'files = {"a.txt" = "1"}\n[[tasks]]\nprompt = "b"\n'
                    '[[steps]]\nkind = "one_shot"\n')
    return path


def test_no_sandbox_for_tasks_that_bring_a_workspace_is_refused(tmp_path: Path) -> None:
    cfg, env, _ = resolve({"env": {"name": str(write_env(tmp_path))},
                           "sandbox": {"kind": "none"}})
    with pytest.raises(InterplayError) as caught:
        check_sandbox(env, RunResources(endpoint=cfg.model, sandbox=cfg.sandbox),
                      list(env.tasks()))
    assert caught.value.message == (
        'sandbox.kind = "none": task 0 brings a workspace; run it with --sandbox docker '
        '(a Docker Engine) or --sandbox local (a folder of this machine, no isolation)')


@pytest.mark.parametrize(("line", "said"), [
    ('image = "python:3.12"', r"has no images, and a task names its image 'python:3.12': "),
    ('user = "someone-else"', r"runs commands as .* only, and a task names its workspace user "
                              r"'someone-else': "),
])
def test_the_local_backend_refuses_what_it_cannot_give_a_task(tmp_path: Path, line: str,
                                                              said: str) -> None:
    path = tmp_path / "env.toml"
    path.write_text(f'[[tasks]]\nprompt = "a"\n[tasks.workspace]\n{line}\n'
                    '[[steps]]\nkind = "one_shot"\n')
    cfg, env, _ = resolve({"env": {"name": str(path)}, "sandbox": {"kind": "local"}})
    with pytest.raises(InterplayError, match=rf"^task 0: sandbox 'local' {said}run it with "
                                             r'sandbox.kind = "docker"'):
        check_sandbox(env, RunResources(endpoint=cfg.model, sandbox=cfg.sandbox),
                      list(env.tasks()))


@pytest.mark.parametrize(("sandbox", "said"), [
    ({"kind": "nope"}, "sandbox.kind: unknown sandbox 'nope'; known: docker, local"),
    ({"cpus": 2}, "sandbox.cpus: set sandbox.kind too"),
    ({"kind": "docker", "network": "bridge"}, "sandbox.network"),
    ({"kind": "docker", "memory_mb": 2}, "'memory_mb' must be >= 6"),
])
def test_bad_sandbox_settings_are_one_line_when_the_run_resolves(tmp_path: Path,
                                                                 sandbox: dict[str, object],
                                                                 said: str) -> None:
    with pytest.raises(InterplayError) as caught:
        resolve({"env": {"name": str(write_env(tmp_path))}, "sandbox": sandbox})
    assert said in caught.value.message
    assert "\n" not in caught.value.message


@pytest.mark.slow
def test_a_daemon_that_does_not_answer_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    out = run_interplay("eval", str(write_env(tmp_path)), "-o", str(tmp_path / "run"),
                        "--sandbox", "docker", "--set",
                        f'sandbox.host="unix://{tmp_path}/no.sock"')
    assert out.returncode == 2
    [line] = out.stderr.splitlines()
    assert line.startswith("interplay: error: sandbox 'docker': cannot reach the Docker daemon "
                           f"at unix://{tmp_path}/no.sock")
    assert 'sandbox.kind = "local"' in line
    assert not (tmp_path / "run").exists()
