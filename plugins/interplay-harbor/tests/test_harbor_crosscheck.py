"""Harbor's own runner as the judge (a sweep: minutes; `pytest -m sweep`): ``harbor run -a
oracle`` and ``-a nop`` on the ten example tasks give the same reward dict, task by task, as
interplay's ``oracle`` and ``nop``; and the job folder ``interplay export --format harbor``
writes is read by Harbor's own JobResult and TrialResult models, to the same rewards.

Needs Harbor 0.26 (Python 3.12): its executable in ``HARBOR_BIN`` (or ``harbor`` on PATH),
and Docker Compose v2 (``DOCKER_CONFIG`` naming a folder whose cli-plugins/ holds it; the
plugin's README says how to get both offline)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from interplay_harbor.crosscheck import differences, run_harbor, run_interplay
from interplay_harbor.env import examples

pytestmark = [pytest.mark.sweep, pytest.mark.slow, pytest.mark.usefixtures("docker_sandbox")]

HARBOR = os.environ.get("HARBOR_BIN") or shutil.which("harbor")

#: Read back with Harbor's own models, in Harbor's Python.
READ_JOB = """
import json, sys
from pathlib import Path
from harbor.models.job.result import JobResult
from harbor.models.trial.result import TrialResult
job = Path(sys.argv[1])
result = JobResult.model_validate_json((job / "result.json").read_text())
trials = {}
for folder in sorted(p for p in job.iterdir() if p.is_dir()):
    trial = TrialResult.model_validate_json((folder / "result.json").read_text())
    trials[trial.task_name] = trial.verifier_result.rewards if trial.verifier_result else None
print(json.dumps({"metrics": {k: v.metrics for k, v in result.stats.evals.items()},
                  "trials": trials}))
"""


@pytest.fixture
def harbor() -> str:
    if HARBOR is None:
        pytest.skip("Harbor's runner is not installed: set HARBOR_BIN to the harbor of a "
                    "Python 3.12 venv with `pip install harbor==0.26.0`")
    return HARBOR


@pytest.mark.parametrize("agent", ["oracle", "nop"])
def test_harbors_runner_and_interplay_give_the_same_reward_dicts(harbor: str, agent: str,
                                                                 tmp_path: Path) -> None:
    theirs = run_harbor(harbor, examples(), agent, tmp_path / "harbor", concurrency=4)
    ours = run_interplay(examples(), agent, tmp_path / "interplay", concurrency=4)
    assert len(theirs.rewards) == 10
    assert differences(theirs, ours) == []
    # Our run as a job folder, read by Harbor's own models: the same rewards and metrics.
    exported = subprocess.run(
        [str(Path(sys.executable).parent / "interplay"), "export",
         str(tmp_path / "interplay"), "--format", "harbor"], capture_output=True, text=True,
        check=False)
    assert exported.returncode == 0, exported.stderr
    python = str(Path(harbor).parent / "python")
    read = subprocess.run([python, "-c", READ_JOB, str(tmp_path / "interplay" / "harbor-job")],
                          capture_output=True, text=True, check=False)
    assert read.returncode == 0, read.stderr
    job = json.loads(read.stdout)
    assert job["trials"] == theirs.rewards
    theirs_job = subprocess.run([python, "-c", READ_JOB, str(theirs.folder)],
                                capture_output=True, text=True, check=True)
    assert job["metrics"] == json.loads(theirs_job.stdout)["metrics"]
