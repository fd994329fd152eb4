"""The executors behind one interface (interplay.run.executor): a fourth added as one module
runs a real run, out of process, with the runner unchanged; the registry refuses what cannot
work in one line; Ray is imported only by a run that chooses it; no executor imports the runner.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interplay import cli
from interplay.errors import InterplayError
from interplay.run import config, executor, results, runner
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

ScriptedFactory = Callable[..., ScriptedModel]

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "executors"
#: A reply long enough that its episode's line is split (its transcript to a side file).
LONG = "y" * (2 * results.LINE_BOUND)


def answering(slow_s: float = 0.0) -> Callable[[ScriptedRequest], ScriptedReply]:
    """Says the word the task asks for; at length for "long" words, slowly for "slow" ones."""

    def handler(request: ScriptedRequest) -> ScriptedReply:
        word = request.last_user_text().rsplit(" ", 1)[-1]
        text = f"{word} {LONG}" if word.startswith("long") else word
        return ScriptedReply.text(text, latency_s=slow_s if word.startswith("slow") else 0.0)

    return handler


def _tasks(path: Path, words: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": f"Say {w}", "answer": w}) + "\n"
                            for w in words))
    return path


def _run(tmp_path: Path, name: str, model: ScriptedModel, words: list[str],
         **settings: Any) -> Path:
    out = tmp_path / name
    out.mkdir()
    data = {"env": {"name": "echo", "taskset": str(_tasks(tmp_path / f"{name}.jsonl", words))},
            "rollouts": 2, "concurrency": 3, "seed": 5, "output": str(out),
            "model": {"base_url": model.base_url}, **settings}
    cfg, env, resolved = config.resolve(data)
    asyncio.run(runner.run(cfg, env, resolved, out))
    return out


def _records(out: Path) -> dict[tuple[int, int], dict[str, Any]]:
    found = {results.pair_of(r): r for r in results.read_episodes(out / "episodes.jsonl")}
    assert len(found) == len((out / "episodes.jsonl").read_bytes().splitlines())
    return found


@pytest.fixture
def array_executor(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fixture module's executor, registered as ``executor = "array"`` for one test."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setitem(executor.EXECUTORS, "array", "array_executor:ArrayExecutor")
    import array_executor

    array_executor.STARTED.clear()
    return array_executor


def test_an_executor_added_as_one_module_runs_the_same_episodes(
        tmp_path: Path, scripted_model: ScriptedFactory, array_executor: Any) -> None:
    """Each pair in a process of its own, its line (and a long one's side file) sent back to
    the runner: the results folder is the one a run in this process writes."""
    model = scripted_model(answering())
    words = ["alpha", "long1", "beta"]
    here = _run(tmp_path, "here", model, words)
    there = _run(tmp_path, "there", model, words, executor="array")
    assert len(array_executor.STARTED) == 6  # a process per pair
    mine, theirs = _records(here), _records(there)
    assert sorted(mine) == sorted(theirs) == [(t, r) for t in range(3) for r in range(2)]
    for pair, record in theirs.items():
        assert record["error_type"] is None and record["reward"] == 1.0
        assert record["info"]["seed"] == mine[pair]["info"]["seed"]
        whole = results.whole_record(record, there)
        assert whole["traces"][0]["messages"][-1]["content"].startswith(words[pair[0]])
    long_line = theirs[(1, 0)]
    assert "side" in long_line  # split, its side file written beside the line
    assert (there / long_line["side"]["file"]).is_file()
    summary = json.loads((there / "summary.json").read_text())
    assert summary["completed"] == 6 and summary["error_episodes"] == 0


def test_a_process_of_an_added_executor_killed_is_a_worker_error(
        tmp_path: Path, scripted_model: ScriptedFactory, array_executor: Any) -> None:
    model = scripted_model(answering(slow_s=30.0))
    words = ["alpha", "slow1", "beta"]
    out = tmp_path / "run"
    out.mkdir()
    data = {"env": {"name": "echo", "taskset": str(_tasks(tmp_path / "t.jsonl", words))},
            "concurrency": 3, "output": str(out), "executor": "array",
            "model": {"base_url": model.base_url}}
    cfg, env, resolved = config.resolve(data)

    async def run_and_kill() -> runner.RunOutcome:
        running = asyncio.ensure_future(runner.run(cfg, env, resolved, out))
        deadline = time.monotonic() + 60  # a failure bound, not a speed check
        while not (out / "episodes.jsonl").exists() or \
                len((out / "episodes.jsonl").read_bytes().splitlines()) < 2:
            assert time.monotonic() < deadline and not running.done()
            await asyncio.sleep(0.05)
        # Tasks 0 and 2 are written; task 1's process waits for its slow answer.
        os.kill(array_executor.STARTED[(1, 0)], signal.SIGKILL)
        return await running

    outcome = asyncio.run(run_and_kill())
    found = _records(out)
    assert sorted(found) == [(0, 0), (1, 0), (2, 0)]
    assert found[(1, 0)]["error_type"] == "worker_error"
    assert "the array job running it exited (code -9)" in found[(1, 0)]["error"]
    assert found[(1, 0)]["info"]["seed"] == config.episode_seed(0, 1, 0)
    assert [found[(t, 0)]["reward"] for t in (0, 2)] == [1.0, 1.0]
    assert outcome.summary["errors"] == {"worker_error": 1}


# -- the registry ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "error"), [
    (["--set", "executor=slurm"],
     "executor: no executor named 'slurm'; executors: local, ray"),
    (["--set", "ray_connect_timeout_s=60"],
     'ray_connect_timeout_s: goes with executor = "ray" (--executor ray)'),
    (["-w", "2"],
     "workers: the embedded model answers one request at a time in this process; give "
     "--base-url for --workers above 1"),
])
def test_executor_settings_that_cannot_work_are_one_line_before_the_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], settings: list[str],
        error: str) -> None:
    out = tmp_path / "run"
    assert cli.main(["eval", "echo", *settings, "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"interplay: error: {error}"
    assert not out.exists()


def test_a_library_run_checks_its_executor_before_it_writes(tmp_path: Path) -> None:
    cfg, env, resolved = config.resolve({"env": {"name": "echo"}, "workers": 2})
    with pytest.raises(InterplayError, match=r"^workers: the embedded model"):
        asyncio.run(runner.run(cfg, env, resolved, tmp_path))
    assert list(tmp_path.iterdir()) == []


NO_RAY = """
import sys
class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == 'ray' or name.startswith('ray.'):
            raise ModuleNotFoundError(f'No module named {name!r}', name=name)
sys.meta_path.insert(0, NoRay())
"""


def test_ray_is_imported_only_by_a_run_that_chooses_it(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    """A local run, and loading a Ray run's config (a worker's, a regrade's), import neither
    Ray nor the Ray executor; choosing it without Ray installed says how to install it."""
    model = scripted_model(answering())
    code = NO_RAY + f"""
from interplay import cli
from interplay.errors import InterplayError
from interplay.run import config, executor
assert cli.main(["eval", "echo", "-n", "1", "--base-url", {model.base_url!r}, "-o",
                 {str(tmp_path / "run")!r}, "--quiet", "--no-report"]) == 0
cfg, _, _ = config.resolve({{"env": {{"name": "echo"}}, "executor": "ray",
                             "model": {{"base_url": {model.base_url!r}}}}})
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "ray" or "ray_" in m)
assert loaded == [], loaded
try:
    executor.executor_for(cfg)
except InterplayError as exc:
    print(exc)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == (
        "--executor ray needs Ray; install it with: pip install 'interplay[ray]'")


# -- the layers --------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    """The interplay modules ``path`` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {name for name in found if name.startswith("interplay")}


def test_no_executor_imports_the_runner_and_the_interface_imports_no_executor() -> None:
    run = ROOT / "core" / "run"
    executors = {"interplay.run.local", "interplay.run.workers", "interplay.run.ray_executor",
                 "interplay.run.ray_actor"}
    for module in [*executors, "interplay.run.executor"]:
        imported = _imports(run / f"{module.rsplit('.', 1)[1]}.py")
        assert "interplay.run.runner" not in imported, module
    assert not _imports(run / "executor.py") & executors
    assert not _imports(run / "config.py") & (executors | {"interplay.run.executor"})
    # The runner knows executors by the registry alone.
    assert not _imports(run / "runner.py") & executors
