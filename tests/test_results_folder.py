"""The results folder under faults: an -o that cannot be made, episode lines that are not
episodes, a torn tail, a file that cannot grow, a resume with nothing left to run, and a run
killed at any moment. Real files, real processes, the scripted model over real HTTP."""

from __future__ import annotations

import base64
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interplay import cli
from interplay.run import results
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

ScriptedFactory = Callable[..., ScriptedModel]


def _env() -> dict[str, str]:
    return {**os.environ, "INTERPLAY_LOAD_PLUGINS": ""}


def run_cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interplay.cli", *args], capture_output=True,
                          text=True, timeout=120, env=_env(), **kw)


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line of a command refused with exit 2 (run in-process: an exception that
    escaped would fail the test with its traceback). Only the run's announcement, once the
    run has started, may come before it."""
    capsys.readouterr()
    assert cli.main(list(args)) == 2
    *before, line = capsys.readouterr().err.strip().splitlines()
    assert [b for b in before if not b.startswith("interplay eval ")] == []
    assert line.startswith("interplay: error: ")
    return line


def pairs_of(folder: Path) -> list[tuple[int, int]]:
    return sorted((r["info"]["task_idx"], r["info"]["rollout"])
                  for r in map(json.loads, (folder / "episodes.jsonl").read_text().splitlines()))


# -- where the results go ------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["/proc/x", "{file}/run", "/dev/null", "{file}"])
def test_an_output_folder_that_cannot_be_made_is_one_line_and_exit_2(
        tmp_path: Path, scripted_model: ScriptedFactory, capsys: pytest.CaptureFixture[str],
        where: str) -> None:
    model = scripted_model()
    a_file = tmp_path / "a-file"
    a_file.write_text("mine\n")
    where = where.format(file=a_file)
    line = refused(capsys, "eval", "echo", "-n", "1", "--base-url", model.base_url, "-o", where)
    assert line.startswith(f"interplay: error: -o {where}: ")
    assert "choose another -o" in line
    assert model.requests == [] and a_file.read_text() == "mine\n"


# -- resuming a file that something else wrote to ----------------------------------------------


def _finished_run(tmp_path: Path, model: ScriptedModel, n: int = 3) -> Path:
    out = tmp_path / "run"
    assert cli.main(["eval", "echo", "-n", str(n), "--base-url", model.base_url, "-o", str(out),
                     "-q", "--no-report"]) == 0
    return out


HOSTILE = [
    # (the last line, what the refusal names)
    ('{"note": "not an episode"}', "info: missing"),
    ("[1, 2, 3]", "expected a JSON object, got list"),
    ("garbage, but a whole line", "is not JSON"),
    ('{"info": {"task_idx": "0"}}', "info.task_idx: expected an integer or null, got str"),
    ('{"info": {"task_idx": true}}', "info.task_idx: expected an integer or null, got bool"),
    ('{"info": {"task_idx": 0, "rollout": -1}}', "info.rollout: expected 0 or more"),
    ('{"info": {"task_idx": 0}, "reward": "high"}', "reward: expected a finite number"),
    ('{"info": {"task_idx": 0}, "reward": NaN}', "reward: expected a finite number or null, "
                                                 "got nan"),
    ('{"info": {"task_idx": 0}, "error_type": 5}', "error_type: expected text"),
    ('{"info": {"task_idx": 0}, "metrics": [1]}', "metrics: expected an object"),
    ('{"info": {"task_idx": 0}, "traces": {}}', "traces: expected a list"),
    ('{"info": {"task_idx": 0}, "traces": [3]}', "traces[0]: expected an object, got int"),
    ('{"info": {"task_idx": 0}, "traces": [{"reward": Infinity}]}', "traces[0].reward"),
    ('{"info": {"task_idx": 0}, "traces": [{"model_calls": [{"usage": {"total_tokens": "9"}}]}]}',
     "traces[0].model_calls[0].usage.total_tokens: expected an integer"),
    ('{"info": {"task_idx": 0}, "judge_calls": [null]}', "judge_calls[0]: expected an object"),
    ('{"info": {"task_idx": 0}, "wall_s": "slow"}', "wall_s: expected a finite number"),
]


@pytest.mark.parametrize(("line", "named"), HOSTILE)
def test_a_whole_line_that_is_not_an_episode_is_refused_never_cut(
        tmp_path: Path, scripted_model: ScriptedFactory, capsys: pytest.CaptureFixture[str],
        line: str, named: str) -> None:
    model = scripted_model()
    out = _finished_run(tmp_path, model)
    path = out / "episodes.jsonl"
    with path.open("a") as fh:
        fh.write(line + "\n")
    before = path.read_bytes()
    calls = len(model.requests)
    error = refused(capsys, "eval", "--resume", str(out), "-q", "--no-report")
    assert "episodes.jsonl: line 4 is not" in error and named in error, error
    assert error.endswith("something else wrote to this episodes file: remove or mend the "
                          "line, then run the command again")
    # Nothing was cut, nothing ran, and the report says the same.
    assert path.read_bytes() == before and len(model.requests) == calls
    assert "line 4" in refused(capsys, "report", str(out))


@pytest.mark.slow
def test_a_refused_line_is_one_line_and_exit_2_from_the_command(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    out = _finished_run(tmp_path, scripted_model())
    with (out / "episodes.jsonl").open("a") as fh:
        fh.write('{"info": {"task_idx": 0}, "reward": "high"}\n')
    proc = run_cli("eval", "--resume", str(out), "-q")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"interplay: error: {out / 'episodes.jsonl'}: line 4 is not an episode record (reward: "
        "expected a finite number or null, got str); something else wrote to this episodes "
        "file: remove or mend the line, then run the command again"]


def test_a_bad_line_in_the_middle_is_refused_by_its_number(
        tmp_path: Path, scripted_model: ScriptedFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = _finished_run(tmp_path, scripted_model())
    path = out / "episodes.jsonl"
    first, *rest = path.read_text().splitlines(keepends=True)
    record = json.loads(first)
    record["traces"][0]["stop_condition"] = ["not", "text"]
    path.write_text(json.dumps(record) + "\n" + "".join(rest))
    error = refused(capsys, "eval", "--resume", str(out), "-q")
    assert "line 1 is not an episode record (traces[0].stop_condition: expected text" in error


@pytest.mark.parametrize("tail", [
    b'{"info": {"task_idx": 1, "rol',  # a write cut short
    b"\x00" * 300,  # a tail the file system zero-filled after a crash
    '{"task": {"prompt": "caf\u00e9'.encode()[:-1],  # cut inside a character
])
def test_only_a_truly_torn_tail_is_cut_and_its_episode_runs_again(
        tmp_path: Path, scripted_model: ScriptedFactory, tail: bytes) -> None:
    model = scripted_model()
    out = _finished_run(tmp_path, model)
    path = out / "episodes.jsonl"
    kept = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(kept[:2]) + tail)
    assert cli.main(["eval", "--resume", str(out), "-q", "--no-report"]) == 0
    assert pairs_of(out) == [(0, 0), (1, 0), (2, 0)]
    assert path.read_bytes().startswith(b"".join(kept[:2]) + b"{")
    # A complete last record without its newline is kept, and ended before the next append.
    with path.open("rb+") as fh:
        fh.truncate(len(path.read_bytes()) - 1)
    assert cli.main(["eval", "--resume", str(out), "-q", "--no-report"]) == 0
    assert path.read_bytes().endswith(b"}\n")
    assert pairs_of(out) == [(0, 0), (1, 0), (2, 0)]


def test_read_episodes_reads_what_a_run_wrote_as_it_is(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    out = _finished_run(tmp_path, scripted_model())
    full = results.read_episodes(out / "episodes.jsonl")
    slim = results.read_episodes(out / "episodes.jsonl", slim=True)
    assert [r["info"]["episode_id"] for r in full] == [r["info"]["episode_id"] for r in slim]
    assert [results.slim_record(r) for r in full] == slim


# -- the summary of a resume -------------------------------------------------------------------


def test_a_resume_with_nothing_left_reports_the_runs_time(
        tmp_path: Path, scripted_model: ScriptedFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    model = scripted_model(lambda req: ScriptedReply.text("apple", latency_s=0.05))
    out = _finished_run(tmp_path, model, n=4)
    first = json.loads((out / "summary.json").read_text())
    assert first["wall_s"] >= 0.05 and first["episodes_this_session"] == 4
    capsys.readouterr()
    assert cli.main(["eval", "--resume", str(out), "--no-report"]) == 0
    stdout = capsys.readouterr().out
    again = json.loads((out / "summary.json").read_text())
    # The run's time comes from its episodes, so a session that ran none does not erase it.
    assert again["wall_s"] == pytest.approx(first["wall_s"])
    assert again["episodes_this_session"] == 0 and again["session_wall_s"] < first["wall_s"] + 5
    shown = {k: v for k, v in (re.split(r"\s{2,}", line.strip(), maxsplit=1)
                               for line in stdout.splitlines()[1:] if "  " in line.strip())}
    assert shown["wall time"] == f"{first['wall_s']:.3g} s"
    assert shown["this session"] == "nothing left to run"


def test_credentials_in_the_base_url_stay_out_of_the_results_folder_and_the_log(
        tmp_path: Path, scripted_model: ScriptedFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    model = scripted_model(lambda req: ScriptedReply.text("apple"))
    with_secret = model.base_url.replace("://", "://lab:s3cret@")
    out = tmp_path / "run"
    capsys.readouterr()
    assert cli.main(["--log-level", "debug", "eval", "echo", "-n", "2", "--base-url",
                     with_secret, "-o", str(out), "-q"]) == 0
    basic = "Basic " + base64.b64encode(b"lab:s3cret").decode()
    assert [r.headers["authorization"] for r in model.requests] == [basic, basic]
    seen = capsys.readouterr()
    assert "s3cret" not in seen.out + seen.err
    assert model.base_url.replace("://", "://***@") in seen.err  # named, credentials masked
    written = sorted(p.name for p in out.iterdir())
    assert {"config.json", "episodes.jsonl", "summary.json", "report.html"} <= set(written)
    assert all("s3cret" not in (out / name).read_text() for name in written)
    stored = json.loads((out / "config.json").read_text())["config"]["model"]["base_url"]
    assert stored == model.base_url.replace("://", "://***@")
    # A resume cannot take them from config.json: it asks for them, and takes them again.
    line = refused(capsys, "eval", "--resume", str(out))
    assert line == (f"interplay: error: --resume {out}: model.base_url had credentials, "
                    "which config.json does not keep; give them again (--base-url or --set "
                    "model.base_url=...)")
    assert cli.main(["eval", "--resume", str(out), "--base-url", with_secret, "-q",
                     "--retry-errors"]) == 0
    assert "s3cret" not in (out / "config.json").read_text()


def test_header_values_stay_out_of_the_results_folder_and_a_resume_asks_for_them(
        tmp_path: Path, scripted_model: ScriptedFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    failing = {"on": True}
    model = scripted_model(lambda req: ScriptedReply.fault(400) if failing["on"] and
                           "river" in json.dumps(req.messages) else ScriptedReply.text("apple"))
    out = tmp_path / "run"
    header = "model.headers.X-Gateway-Key=gk-s3cret"
    assert cli.main(["eval", "echo", "-n", "2", "--base-url", model.base_url, "--set", header,
                     "-o", str(out), "-q"]) == 0
    assert [r.headers["x-gateway-key"] for r in model.requests] == ["gk-s3cret"] * 2
    assert all("gk-s3cret" not in p.read_text() for p in out.rglob("*") if p.is_file())
    stored = json.loads((out / "config.json").read_text())
    # The header's name is kept, its value masked, in the run's model and each seat's.
    assert stored["config"]["model"]["headers"] == {"X-Gateway-Key": "***"}
    assert all(seat["model"]["headers"] == {"X-Gateway-Key": "***"}
               for seat in stored["seats"].values())
    line = refused(capsys, "eval", "--resume", str(out))
    assert line == (f"interplay: error: --resume {out}: model.headers.X-Gateway-Key: config.json "
                    "does not keep a header's value; give it again (--set "
                    "model.headers.X-Gateway-Key=...)")
    failing["on"] = False
    assert cli.main(["eval", "--resume", str(out), "--set", header, "-q",
                     "--retry-errors"]) == 0
    assert [r.headers["x-gateway-key"] for r in model.requests] == ["gk-s3cret"] * 3
    assert "gk-s3cret" not in (out / "config.json").read_text()


def test_busy_seconds_is_the_union_of_the_episodes_intervals() -> None:
    from interplay.run.summary import busy_seconds

    spans = [(100.0, 2.0), (101.0, 0.5), (101.5, 1.0), (500.0, 3.0), (0.0, 9.0)]
    records = [{"started_at": s, "wall_s": w} for s, w in spans]
    # 100-102.5 and 500-503; a record without a start time (0) has no place on the clock.
    assert busy_seconds(records) == pytest.approx(2.5 + 3.0)
    assert busy_seconds([]) is None


# -- a file that cannot grow, a run killed at any moment ---------------------------------------


@pytest.mark.slow
def test_an_episodes_file_that_cannot_grow_stops_the_run_in_one_line_and_loses_nothing(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model()
    size = (_finished_run(tmp_path, model, n=1) / "episodes.jsonl").stat().st_size
    out2 = tmp_path / "run2"
    proc = subprocess.run(
        [sys.executable, "-m", "interplay.cli", "eval", "echo", "-n", "8", "-c", "1",
         "--base-url", model.base_url, "-o", str(out2), "-q", "--no-report"],
        capture_output=True, text=True, timeout=120, env=_env(),
        # Room for three or four episodes: the next write fails as on a full disk.
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size * 4 - 10,) * 2))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert "episodes.jsonl: cannot write the next episode (File too large)" in error
    assert f"--resume {out2}" in error
    kept = results.read_episodes(out2 / "episodes.jsonl")
    assert 1 <= len(kept) < 8
    proc = run_cli("eval", "--resume", str(out2), "-q", "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert pairs_of(out2) == [(t, 0) for t in range(8)]


def _relay(req: ScriptedRequest) -> ScriptedReply:
    msgs = req.messages
    system = msgs[0].get("content") if msgs and msgs[0].get("role") == "system" else ""
    if "role-playing a user" in str(system):
        n_user = sum(1 for m in msgs if m.get("role") == "user")
        return ScriptedReply.text("###DONE###" if n_user > 1 else "a question", latency_s=0.02)
    return ScriptedReply.text("an answer", latency_s=0.02)


@pytest.mark.slow
def test_a_run_killed_at_any_moment_resumes_to_every_episode_once(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    """SIGKILL at moments spread from start-up (config, plugins, the results folder) through
    the episodes to the summary and the report; each time a resume finishes the run."""
    model = scripted_model(_relay)
    n = 6
    for i, delay in enumerate([0.05, 0.3, 0.6, 0.9, 1.2, 1.5, 2.0, 3.0]):
        out = tmp_path / f"run{i}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "interplay.cli", "eval", "user-sim", "-n", str(n), "-c", "2",
             "--base-url", model.base_url, "-o", str(out), "-q"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env())
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        if not (out / "config.json").exists():
            continue  # killed before the run had a folder: there is nothing to resume
        again = run_cli("eval", "--resume", str(out), "-q")
        assert again.returncode == 0, (delay, again.stderr)
        assert pairs_of(out) == [(t, 0) for t in range(n)], delay
        s = json.loads((out / "summary.json").read_text())
        assert (s["episodes"], s["completed"], s["complete"]) == (n, n, True)
        assert (out / "report.html").is_file()


@pytest.mark.parametrize("name", ["episodes.jsonl", "summary.json", "report.html"])
def test_a_results_file_that_cannot_be_read_or_written_is_one_line(
        tmp_path: Path, scripted_model: ScriptedFactory, capsys: pytest.CaptureFixture[str],
        name: str) -> None:
    out = _finished_run(tmp_path, scripted_model())
    target = out / name
    if target.exists():
        kept = target.read_bytes()
        target.unlink()
    else:
        kept = b""
    target.mkdir()  # a folder where the file goes: neither readable nor replaceable as one
    error = refused(capsys, "eval", "--resume", str(out), "-q")
    assert f"{target}: cannot " in error
    target.rmdir()
    target.write_bytes(kept)
    if name == "report.html":
        (out / "report.html").unlink()
        (out / "report.html").mkdir()
        assert f"{target}: cannot " in refused(capsys, "report", str(out))


# -- a run that never started --------------------------------------------------------------------


def _tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"q": "Say hi", "a": "hi"}\n')
    return path


def test_a_start_refused_for_its_taskset_leaves_no_folder_and_the_next_run_takes_the_o(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks, out = _tasks_file(tmp_path), tmp_path / "run"
    args = ["eval", "echo", "-o", str(out), "-q", "--no-report",
            "--set", f"env.taskset.dataset={tasks}", "--set", "env.taskset.answer=a"]
    line = refused(capsys, *args, "--base-url", "http://127.0.0.1:9/v1",
                   "--set", "env.taskset.prompt=question")
    assert "no column 'question'" in line
    assert not out.exists()
    with ScriptedModel(lambda r: "hi") as model:
        assert cli.main([*args, "--base-url", model.base_url,
                         "--set", "env.taskset.prompt=q"]) == 0
    assert pairs_of(out) == [(0, 0)]


def test_a_folder_that_holds_no_episode_is_taken_by_the_next_run(tmp_path: Path) -> None:
    """What a start killed before its first episode leaves: config.json (and an empty
    episodes file); a new run with the same -o uses the folder."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"config": {"env": {"name": "nothing"}}}))
    (out / "episodes.jsonl").write_text("")
    with ScriptedModel(lambda r: "hi") as model:
        assert cli.main(["eval", "echo", "-n", "1", "-o", str(out), "-q", "--no-report",
                         "--base-url", model.base_url]) == 0
    assert pairs_of(out) == [(0, 0)]
    assert json.loads((out / "config.json").read_text())["config"]["env"]["name"] == "echo"


def test_a_resume_whose_config_no_longer_loads_says_so_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks, out = _tasks_file(tmp_path), tmp_path / "run"
    with ScriptedModel(lambda r: "hi") as model:
        assert cli.main(["eval", "echo", "-o", str(out), "-q", "--no-report", "--base-url",
                         model.base_url, "--set", f"env.taskset.dataset={tasks}",
                         "--set", "env.taskset.prompt=q"]) == 0
    tasks.write_text('{"question": "Say hi", "a": "hi"}\n')  # the file changed since
    line = refused(capsys, "eval", "--resume", str(out), "-q")
    assert line.startswith(f"interplay: error: --resume {out}: the config it holds no longer "
                           f"loads (taskset ")
    assert "no column 'q'" in line and line.endswith("another -o")
    assert pairs_of(out) == [(0, 0)]  # what was done is kept


def test_a_resume_refused_for_a_setting_given_over_it_is_not_blamed_on_the_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    with ScriptedModel(lambda r: "hi") as model:
        assert cli.main(["eval", "echo", "-n", "1", "-o", str(out), "-q", "--no-report",
                         "--base-url", model.base_url]) == 0
    line = refused(capsys, "eval", "--resume", str(out), "--set", "n=0")
    assert "n: must be at least 1" in line and "no longer loads" not in line


@pytest.mark.slow
def test_a_run_that_fails_after_its_folder_is_made_takes_the_folder_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "run"
    line = refused(capsys, "eval", "echo", "-o", str(out), "-q", "--no-report",
                   "--base-url", "http://127.0.0.1:9/v1", "--executor", "ray",
                   "--ray-address", "127.0.0.1:9", "--set", "ray_connect_timeout_s=1")
    assert "ray_connect_timeout_s" in line
    assert not out.exists()
