"""A third party's plugin on the tau2 envs, as a user installs one: a package
(tests/fixtures/tau2_extension) with a user sim of its own (``impatient-customer``) and a
verifier subclassing tau2's by ``interplay.lookup`` inside its hook (``tau2_brief``),
pip-installed, found through its entry point by the `interplay` command, and used on
tau2-retail through ``env.user_sim`` and ``env.verifiers`` against the scripted model (real
subprocesses, real HTTP)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from interplay.run import whole_record
from interplay.testing import ScriptedModel, run_interplay
from interplay_tau2 import scripted

pytestmark = pytest.mark.slow  # pip installs a package; each `interplay` process imports tau2

for _key, _value in scripted.OFFLINE_ENVIRON.items():
    os.environ.setdefault(_key, _value)

FIXTURE = Path(__file__).parent / "fixtures" / "tau2_extension"
TASK = "5"  # retail: four expected actions, tau2 gives the complete script 1.0


@pytest.fixture(scope="module")
def extension(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The fixture package pip-installed into a folder of its own; the environment that puts
    it on the `interplay` command's path."""
    root = tmp_path_factory.mktemp("tau2_extension")
    shutil.copytree(FIXTURE, root / "src")  # built from a copy: the checkout stays clean
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--disable-pip-version-check",
                    "--target", str(root / "site"), str(root / "src")],
                   check=True, capture_output=True, text=True, timeout=300)
    path = os.pathsep.join(p for p in (str(root / "site"), os.environ.get("PYTHONPATH")) if p)
    yield {"PYTHONPATH": path}


def episodes(folder: Path) -> list[dict]:
    return [whole_record(json.loads(line), folder)
            for line in (folder / "episodes.jsonl").read_text().splitlines()]


def test_a_third_partys_user_sim_and_verifier_run_on_tau2_retail(
        extension: dict[str, str], tmp_path: Path) -> None:
    listed = run_interplay("plugins", "--json", env=extension)
    assert listed.returncode == 0, listed.stderr
    (info,) = [i for i in json.loads(listed.stdout) if i["name"] == "fixture_tau2_extension"]
    # Its verifier subclasses tau2's through lookup inside its hook, whatever the load order.
    assert info["error"] is None
    assert info["registered"] == {"user-sims": ["impatient-customer"],
                                  "verifiers": ["tau2_brief"]}

    book, _ = scripted.script_book("retail", {TASK: "complete"})
    out = tmp_path / "run"
    with ScriptedModel(book) as model:
        done = run_interplay(
            "eval", "tau2-retail", "--set", f'env.task_ids=["{TASK}"]',
            "--set", "env.user_sim=impatient-customer",
            "--set", 'env.verifiers=[{kind = "tau2_brief", max_user_turns = 2}]',
            "--base-url", model.base_url, "-o", str(out), "-q", env=extension)
        requests = list(model.requests)
    assert done.returncode == 0, done.stderr
    assert book.misses == 0
    [episode] = episodes(out)
    assert episode["error"] is None, episode["error"]
    rewards = {r["name"]: r for r in episode["rewards"]}
    # tau2's own score stays the episode's; the added verifier scores beside it (weight 0).
    assert episode["reward"] == rewards["tau2"]["value"] == 1.0
    assert rewards["tau2_brief"]["value"] == 1.0 and rewards["tau2_brief"]["weight"] == 0.0
    assert rewards["tau2_brief"]["reason"].startswith("2 customer messages; tau2: user_stop")
    # Her seat spoke with her sim's prompt, holding the task's scenario; she ended as tau2 does.
    user_prompts = {r.messages[0]["content"] for r in requests
                    if "impatient customer" in str(r.messages[0].get("content"))}
    assert len(user_prompts) == 1
    assert "<scenario>\nInstructions:\n\tDomain: retail" in user_prompts.pop()
    record = episode["results"]["tau2"]
    assert record["termination_reason"] == "user_stop"
    assert record["messages"][-1] == {**record["messages"][-1], "role": "user",
                                      "content": "###STOP###"}
    stored = json.loads((out / "config.json").read_text())
    assert stored["config"]["env"]["user_sim"] == "impatient-customer"
    assert stored["config"]["env"]["verifiers"] == [{"kind": "tau2_brief", "max_user_turns": 2}]
    assert [v["name"] for v in stored["verifiers"]] == ["tau2", "tau2_brief"]
    assert stored["verifiers"][1]["is"] == ["tau2_brief", "tau2"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["tau2_brief"] == 1.0
    # tau2's results file names who played the user, and claims none of tau2's own
    # simulator's guidelines for her.
    exported = run_interplay("export", str(out), "--format", "tau2", env=extension)
    assert exported.returncode == 0, exported.stderr
    info = json.loads((out / "tau2-results.json").read_text())["info"]["user_info"]
    assert info["implementation"] == "interplay user sim impatient-customer"
    assert info["global_simulation_guidelines"] is None
