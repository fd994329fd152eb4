"""An export format that writes a folder (a benchmark's job folder: ExportFormat.writes_folder):
the command hands it a fresh folder and puts it in place only once whole, replacing what was
there; one that fails leaves the folder that was there as it was; a file where the folder goes
is refused in one line."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from interplay import ExportFormat, InterplayError, Written, cli, hookimpl
from interplay.testing import ScriptedModel, ScriptedReply


class Job(ExportFormat):
    """One file per episode and an index, in a folder (a plugin's format)."""

    name = "test_job"
    default_output = "job"
    writes_folder = True
    fail = False

    def write(self, episodes: Any, output: Path, *, run_config: Any) -> Written:
        assert output.is_dir() and not any(output.iterdir())
        ids = []
        for e in episodes:
            ids.append(e["info"]["episode_id"])
            (output / f"{ids[-1]}.json").write_text(json.dumps({"reward": e["reward"]}))
            if Job.fail:
                raise InterplayError("this run cannot be a job")
        (output / "index.json").write_text(json.dumps(ids))
        return Written(episodes=len(ids))


@pytest.fixture
def run(tmp_path: Path, register_plugin: Any) -> Path:
    def register_export_formats(register: Any) -> None:
        register(Job)

    register_plugin(types.SimpleNamespace(register_export_formats=hookimpl(
        register_export_formats)), "folder-formats")
    out = tmp_path / "echo"
    with ScriptedModel(lambda request: ScriptedReply.text("hello")) as model:
        assert cli.main(["eval", "echo", "-n", "2", "-o", str(out), "--set",
                         f"model.base_url={model.base_url}", "--set", "model.model=m"]) == 0
    return out


def test_a_folder_format_is_put_in_place_whole(run: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    Job.fail = False
    assert cli.main(["export", str(run), "--format", "test_job"]) == 0
    job = run / "job"
    ids = json.loads((job / "index.json").read_text())
    assert len(ids) == 2 and {p.name for p in job.iterdir()} == {"index.json",
                                                                 *(f"{i}.json" for i in ids)}
    assert "exported 2 episodes to" in capsys.readouterr().out
    # Again, over the folder it wrote: replaced, nothing of the old one left beside it.
    (job / "stale.txt").write_text("from before")
    assert cli.main(["export", str(run), "--format", "test_job"]) == 0
    assert not (job / "stale.txt").exists() and (job / "index.json").is_file()
    assert not [p for p in run.iterdir() if p.name.startswith(".export-")]


def test_a_failed_folder_format_leaves_what_was_there(run: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    job = run / "job"
    job.mkdir()
    (job / "kept.txt").write_text("mine")
    Job.fail = True
    try:
        assert cli.main(["export", str(run), "--format", "test_job"]) == 2
    finally:
        Job.fail = False
    assert "this run cannot be a job" in capsys.readouterr().err
    assert [p.name for p in job.iterdir()] == ["kept.txt"]
    assert not [p for p in run.iterdir() if p.name.startswith(".export-")]


def test_a_file_where_the_folder_goes_is_refused(run: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (run / "job.txt").write_text("a file")
    assert cli.main(["export", str(run), "--format", "test_job", "-o",
                     str(run / "job.txt")]) == 2
    err = capsys.readouterr().err
    assert "is a file; --format test_job writes a folder, name one" in err
    assert (run / "job.txt").read_text() == "a file"
