"""`interplay eval --executor ray` on a real Ray cluster: one started for this module with `ray
start --head` (2 CPUs, token authentication), or the local cluster a run starts for itself. The
command runs as a real subprocess, against the scripted model over real HTTP."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from interplay import cli
from interplay.run import config, results
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, descendants, survivors

ScriptedFactory = Callable[..., ScriptedModel]
FIXTURES = Path(__file__).parent / "fixtures" / "plugins"


@attrs.define
class Cluster:
    address: str
    #: What a driver needs to join it: the cluster's token.
    env: dict[str, str]


def _free_port() -> int:
    # An ephemeral port: outside the range Ray gives its workers (10002-19999).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Cluster]:
    """A Ray head node of 2 CPUs for the module's tests, stopped (with everything it started)
    at the end."""
    pytest.importorskip("ray")
    token = secrets.token_hex(16)
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths live in it
    log_path = Path(temp) / "head.log"
    with log_path.open("w") as log:
        head = subprocess.Popen(
            [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block",
             f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
             "--disable-usage-stats", f"--temp-dir={temp}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            # Stopped at once: no wait for its node to drain (Ray waits up to 30 s after a
            # job whose driver was killed).
            env={**os.environ, **env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"})
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log_path.read_text():
            assert head.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the Ray head did not start"
            time.sleep(0.2)
        yield Cluster(address=f"127.0.0.1:{port}", env=env)
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)


def relay_handler(latency_s: float = 0.0) -> Callable[[ScriptedRequest], ScriptedReply]:
    """Both sides of the user-sim relay: two questions, then done; the answer is always yes."""

    def handler(req: ScriptedRequest) -> ScriptedReply:
        msgs = req.messages
        system = msgs[0].get("content") if msgs and msgs[0].get("role") == "system" else ""
        n_user = sum(1 for m in msgs if m.get("role") == "user")
        if "role-playing a user" in str(system):
            text = "###DONE###" if n_user > 2 else f"question {n_user}"
        else:
            text = "the answer is yes"
        return ScriptedReply.text(text, latency_s=latency_s)

    return handler


def _env(cluster: Cluster | None = None, **extra: str) -> dict[str, str]:
    # Only the builtins: the tests never depend on what else is installed.
    return {**os.environ, "INTERPLAY_LOAD_PLUGINS": "", **(cluster.env if cluster else {}),
            **extra}


def run_cli(*args: str, env: dict[str, str], timeout: float = 180
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interplay.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def episodes(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()
            if line.strip()]


def pairs(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted((r["info"]["task_idx"], r["info"]["rollout"]) for r in records)


_RANDOM = {"episode_id", "started_at", "ended_at", "wall_s", "latency_s", "first_token_s", "id",
           "created", "call_id", "duration_s"}


def _normalized(value: Any) -> Any:
    """A record without what differs between two runs of the same episode by design: ids and
    times."""
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in value.items() if k not in _RANDOM}
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    return value


def _by_pair(records: list[dict[str, Any]]) -> list[Any]:
    return [_normalized(r) for r in sorted(records, key=lambda r: (r["info"]["task_idx"],
                                                                  r["info"]["rollout"]))]


def _summary(folder: Path) -> dict[str, Any]:
    data = json.loads((folder / "summary.json").read_text())
    return {k: v for k, v in data.items() if "wall" not in k and not k.endswith("_per_s")}


# -- the same episodes wherever they run ----------------------------------------------------------


def test_local_workers_and_ray_give_the_same_episodes(
        tmp_path: Path, scripted_model: ScriptedFactory, ray_cluster: Cluster) -> None:
    """alphabet-sort draws its puzzles from the episode's rng: one seed, one set of episodes,
    in one process, in two worker processes and on the cluster's actors."""
    model = scripted_model()  # echoes the last user message
    common = ["-n", "3", "-r", "3", "-s", "1", "-c", "4", "--base-url", model.base_url,
              "--no-report", "--quiet"]
    settings = tmp_path / "ray.toml"
    settings.write_text(f'executor = "ray"\nray_address = "{ray_cluster.address}"\n')
    runs = {"local": [], "workers": ["-w", "2"], "ray": ["--config", str(settings)]}
    said = {}
    for name, extra in runs.items():
        proc = run_cli("eval", "alphabet-sort", *common, *extra, "-o", str(tmp_path / name),
                       env=_env(ray_cluster))
        assert proc.returncode == 0, proc.stderr
        said[name] = proc.stderr
    assert f"Ray cluster at {ray_cluster.address}" in said["ray"]
    local, workers, ray = (episodes(tmp_path / n) for n in runs)
    assert len(local) == 9
    assert _by_pair(local) == _by_pair(workers) == _by_pair(ray)
    assert _summary(tmp_path / "local") == _summary(tmp_path / "workers") == _summary(
        tmp_path / "ray")
    stored = json.loads((tmp_path / "ray" / "config.json").read_text())["config"]
    assert stored["executor"] == "ray" and stored["ray_address"] == ray_cluster.address


def test_a_long_episode_on_ray_writes_its_side_file_beside_its_line(
        tmp_path: Path, scripted_model: ScriptedFactory, ray_cluster: Cluster) -> None:
    """An always_on episode whose line would be megabytes: the actor sends its side file's
    content with its line, and the driver writes both (the side file first)."""
    scenario = tmp_path / "long.json"
    scenario.write_text(json.dumps({
        "start": "2025-06-02T08:00", "end": "P3D", "timezone": "Europe/Berlin",
        "tasks": [{"prompt": "watch my account"}],
        "triggers": [{"name": f"a{i}", "at": f"2025-06-02T{8 + i // 6:02d}:{(i % 6) * 10:02d}",
                      "actions": [{"kind": "notify", "text": f"payment {i}"}]}
                     for i in range(60)]}))
    model = scripted_model()  # echoes the last user message: a private note each wake
    settings = tmp_path / "ray.toml"
    settings.write_text(f'executor = "ray"\nray_address = "{ray_cluster.address}"\n')
    out = tmp_path / "run"
    proc = run_cli("eval", str(scenario), "--base-url", model.base_url, "--config",
                   str(settings), "-o", str(out), "--no-report", "--quiet",
                   env=_env(ray_cluster))
    assert proc.returncode == 0, proc.stderr
    [line] = episodes(out)
    assert len(json.dumps(line)) < 64 * 1024
    side = out / line["side"]["file"]
    assert side.is_file() and side.stat().st_size > 64 * 1024
    whole = results.whole_record(line, out)
    assert len(whole["results"]["always_on"]["timeline"]) > 60


PROGRAM = """
import json, os, sys, urllib.request
base = os.environ["OPENAI_BASE_URL"]
assert base.startswith("http://127.0.0.1:"), base  # the interception server of this node
body = {"model": os.environ["OPENAI_MODEL"],
        "messages": [{"role": "user", "content": sys.stdin.read()}]}
request = urllib.request.Request(
    base.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
    headers={"Content-Type": "application/json",
             "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
with urllib.request.urlopen(request) as reply:
    print(json.load(reply)["choices"][0]["message"]["content"])
"""


@pytest.mark.slow
def test_harness_programs_talk_to_their_nodes_interception_server(
        tmp_path: Path, scripted_model: ScriptedFactory, ray_cluster: Cluster) -> None:
    model = scripted_model()  # echoes the last user message
    program = tmp_path / "agent.py"
    program.write_text(PROGRAM)
    argv = json.dumps([sys.executable, str(program)])
    proc = run_cli("eval", "echo", "-n", "3", "--executor", "ray", "--ray-address",
                   ray_cluster.address, "--base-url", model.base_url, "-o", str(tmp_path / "run"),
                   "--no-report", "--quiet", "--set", "seats.assistant.harness=command",
                   "--set", f"seats.assistant.harness_config.argv={argv}",
                   env=_env(ray_cluster))
    assert proc.returncode == 0, proc.stderr
    records = episodes(tmp_path / "run")
    assert len(records) == 3
    for record in records:
        (trace,) = record["traces"]
        assert trace["error"] is None, trace["error"]
        assert len(trace["model_calls"]) == 1  # the program's request, recorded on the node
        # The scripted model's echo, through the program.
        assert trace["messages"][-1]["content"].strip() == f"echo: {record['task']['prompt']}"


# -- faults -----------------------------------------------------------------------------------


class SlowRun:
    """A user-sim run at -c 4 on the cluster's two actors, its log read as it comes."""

    def __init__(self, tmp_path: Path, model: ScriptedModel, n: int,
                 address: str | None, env: dict[str, str]) -> None:
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text("".join(json.dumps({"prompt": f"You want to know thing {i}.",
                                             "answer": "yes"}) + "\n" for i in range(n)))
        self.out = tmp_path / "run"
        where = ["--ray-address", address] if address else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "interplay.cli", "--log-format", "json", "--log-level",
             "info", "eval", "user-sim", "-c", "4", "--executor", "ray", *where,
             "--base-url", model.base_url, "-o", str(self.out), "--no-report", "--quiet",
             "--set", f"env.taskset={json.dumps(str(tasks))}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in list(self.lines):
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("event") == name:
                    found.append(event)
        return found

    def wait_for_episodes(self, count: int) -> None:
        path = self.out / "episodes.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().count("\n") >= count:
                return
            assert self.proc.poll() is None, "".join(self.lines)
            time.sleep(0.05)
        raise AssertionError("the run wrote no episodes")

    def actor_pids(self) -> list[int]:
        return [int(e["pid"]) for e in self.events("ray.actor_ready")]

    def finish(self) -> int:
        code = self.proc.wait(timeout=120)
        self._reader.join(timeout=10)
        return code

    def stderr(self) -> str:
        return "".join(self.lines)


@pytest.mark.slow
def test_a_dead_actor_costs_only_its_episodes_and_retry_errors_runs_them(
        tmp_path: Path, scripted_model: ScriptedFactory, ray_cluster: Cluster) -> None:
    n = 24
    model = scripted_model(relay_handler(latency_s=0.1))
    run = SlowRun(tmp_path, model, n, ray_cluster.address, _env(ray_cluster))
    run.wait_for_episodes(2)
    victims = run.actor_pids()
    assert len(victims) == 2  # one per CPU of the cluster, sharing -c 4
    os.kill(victims[0], signal.SIGKILL)
    assert run.finish() == 0, run.stderr()
    records = episodes(run.out)
    assert pairs(records) == [(t, 0) for t in range(n)]  # each pair once, none dropped
    lost = [r for r in records if r["error_type"] is not None]
    assert 1 <= len(lost) <= 2  # what the dead actor was running (its share of -c 4)
    assert {r["error_type"] for r in lost} == {"worker_error"}
    assert all("the Ray actor running it on node " in r["error"] for r in lost)
    assert all(r["reward"] == 1.0 for r in records if r["error_type"] is None)
    assert run.events("ray.actor_lost")

    again = run_cli("eval", "--resume", str(run.out), "--retry-errors", "--no-report",
                    "--quiet", env=_env(ray_cluster))
    assert again.returncode == 0, again.stderr
    summary = json.loads((run.out / "summary.json").read_text())
    assert summary["error_episodes"] == 0 and summary["episodes"] == n


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_stopped_driver_leaves_no_actor_and_the_run_resumes(
        tmp_path: Path, scripted_model: ScriptedFactory, ray_cluster: Cluster,
        sig: signal.Signals) -> None:
    """Ctrl-C stops the actors' episodes and kills the actors; a driver killed outright
    takes them along too (Ray ends a job's actors with its driver)."""
    n = 24
    model = scripted_model(relay_handler(latency_s=0.1))
    run = SlowRun(tmp_path, model, n, ray_cluster.address, _env(ray_cluster))
    run.wait_for_episodes(2)
    actors = run.actor_pids()
    assert len(actors) == 2
    run.proc.send_signal(sig)
    code = run.finish()
    assert survivors(actors) == set()
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
    else:
        assert code == 130, run.stderr()
        assert "--resume" in run.stderr()
        summary = json.loads((run.out / "summary.json").read_text())
        assert summary["interrupted"] is True and summary["complete"] is False
    finished = results.read_episodes(run.out / "episodes.jsonl")
    assert 2 <= len(finished) < n
    assert all(r["reward"] == 1.0 and r["error"] is None for r in finished)

    again = run_cli("eval", "--resume", str(run.out), "--no-report", "--quiet",
                    env=_env(ray_cluster))
    assert again.returncode == 0, again.stderr
    records = episodes(run.out)
    assert pairs(records) == [(t, 0) for t in range(n)]
    assert [r["info"]["episode_id"] for r in records[: len(finished)]] == [
        r["info"]["episode_id"] for r in finished]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_local_cluster_ends_with_its_run(tmp_path: Path, scripted_model: ScriptedFactory,
                                           sig: signal.Signals) -> None:
    """With no address the run starts a Ray cluster on this machine; once the run is over,
    by Ctrl-C or by `kill -9`, nothing of it is left running."""
    pytest.importorskip("ray")
    model = scripted_model(relay_handler(latency_s=0.1))
    run = SlowRun(tmp_path, model, 24, None, _env())
    run.wait_for_episodes(2)
    started = descendants(run.proc.pid)
    assert len(run.actor_pids()) >= 1 and set(run.actor_pids()) <= started
    run.proc.send_signal(sig)
    assert run.finish() == (130 if sig == signal.SIGINT else -signal.SIGKILL), run.stderr()
    assert survivors(started) == set()


# -- what stops a run before its first episode -----------------------------------------------------


def _install_fixture_plugin(root: Path, broken: bool = False) -> Path:
    """The fixture plugin ``fixture_good`` pip-installed into a folder of its own (with its
    module made to fail at import when ``broken``)."""
    source = root / "src"
    shutil.copytree(FIXTURES / "good_plugin", source)
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--disable-pip-version-check",
                    "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True)
    if broken:
        (target / "fixture_good_plugin" / "__init__.py").write_text(
            'raise ImportError("No module named \'fixture_dependency\'")\n')
    return target


@pytest.mark.slow
def test_plugins_load_on_the_actors_as_on_the_driver(
        tmp_path: Path, scripted_model: ScriptedFactory, ray_cluster: Cluster) -> None:
    """The driver has the plugin (on its PYTHONPATH), the cluster's node does not: the run
    stops naming the plugin and the node, until ray_runtime_env ships it there."""
    model = scripted_model()
    site = _install_fixture_plugin(tmp_path / "good")
    broken = _install_fixture_plugin(tmp_path / "broken", broken=True)
    env = _env(ray_cluster, PYTHONPATH=str(site), INTERPLAY_LOAD_PLUGINS="fixture_good")

    def run(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return run_cli("eval", "echo", "-n", "2", "--executor", "ray", "--ray-address",
                       ray_cluster.address, "--base-url", model.base_url, "-o",
                       str(tmp_path / name), "--no-report", "--quiet",
                       "--set", "seats.assistant.harness=fixture_echo", *extra, env=env)

    missing = run("missing")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1].startswith(
        "interplay: error: plugin fixture_good (interplay-fixture-good 1.2.3) is not installed "
        "on node ")
    assert results.read_episodes(tmp_path / "missing" / "episodes.jsonl") == []

    ship = "ray_runtime_env.env_vars.PYTHONPATH="
    failing = run("failing", "--set", ship + json.dumps(str(broken)))
    assert failing.returncode == 2
    last = failing.stderr.strip().splitlines()[-1]
    assert last.startswith("interplay: error: plugin fixture_good (interplay-fixture-good) "
                           "failed to load on node "), last
    assert "fixture_dependency" in last

    shipped = run("shipped", "--set", ship + json.dumps(str(site)))
    assert shipped.returncode == 0, shipped.stderr
    records = episodes(tmp_path / "shipped")
    assert len(records) == 2
    for record in records:
        (trace,) = record["traces"]
        assert trace["harness"] == "fixture_echo"
        assert trace["messages"][-1]["content"] == record["task"]["prompt"]


def test_a_model_endpoint_the_nodes_cannot_reach_is_one_error(
        tmp_path: Path, ray_cluster: Cluster) -> None:
    closed = f"http://127.0.0.1:{_free_port()}/v1"
    proc = run_cli("eval", "echo", "-r", "50", "--executor", "ray", "--ray-address",
                   ray_cluster.address, "--base-url", closed, "-o", str(tmp_path / "run"),
                   "--no-report", "--quiet", env=_env(ray_cluster))
    assert proc.returncode == 2
    (error,) = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert error.startswith(f"interplay: error: the model endpoint {closed} cannot be reached "
                            "from node ")
    assert "ConnectionRefusedError" in error and error.endswith("every node must reach it")
    assert results.read_episodes(tmp_path / "run" / "episodes.jsonl") == []


def test_a_harness_program_the_nodes_lack_is_one_error(
        tmp_path: Path, scripted_model: ScriptedFactory, ray_cluster: Cluster) -> None:
    """Each node is asked whether the seats' harnesses can run there (the driver is not:
    the episodes run on the nodes)."""
    model = scripted_model()
    missing = tmp_path / "no-codex"
    proc = run_cli("eval", "echo", "-n", "2", "--executor", "ray", "--ray-address",
                   ray_cluster.address, "--base-url", model.base_url,
                   "-o", str(tmp_path / "run"), "--no-report", "--quiet",
                   "--set", 'seats.assistant.harness="codex"',
                   "--set", f"seats.assistant.harness_config.binary={json.dumps(str(missing))}",
                   env=_env(ray_cluster, INTERPLAY_LOAD_PLUGINS="codex"))
    assert proc.returncode == 2, proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert error.startswith("interplay: error: on node ")
    assert f": seats.assistant: harness 'codex': binary {str(missing)!r} not found" in error
    assert model.requests == []
    assert results.read_episodes(tmp_path / "run" / "episodes.jsonl") == []


# -- settings -----------------------------------------------------------------------------------


def test_without_ray_the_executor_says_how_to_install_it(tmp_path: Path) -> None:
    blocked = (
        "import sys\n"
        "class NoRay:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ray' or name.startswith('ray.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoRay())\n"
        "from interplay.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", blocked, "eval", "echo", "--executor", "ray", "--base-url",
         "http://127.0.0.1:9/v1", "-o", str(out)],
        capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "interplay: error: --executor ray needs Ray; install it with: "
        "pip install 'interplay[ray]'"]
    assert not out.exists()


@pytest.mark.parametrize(("args", "key"), [
    (["--executor", "ray", "-w", "2", "--base-url", "http://127.0.0.1:9/v1"], "workers"),
    (["--executor", "ray"], "executor"),
    (["--ray-address", "auto", "--base-url", "http://127.0.0.1:9/v1"], "ray_address"),
])
def test_executor_settings_that_cannot_work_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], key: str) -> None:
    out = tmp_path / "run"
    assert cli.main(["eval", "echo", *args, "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"interplay: error: {key}: ")
    assert not out.exists()


def test_resume_may_move_a_run_between_executors() -> None:
    stored = {"env": {"name": "echo"}, "executor": "local", "ray_address": None,
              "ray_runtime_env": {}, "workers": 2}
    moved = {**stored, "executor": "ray", "ray_address": "auto", "workers": 1,
             "ray_runtime_env": {"pip": ["my-plugin"]}}
    assert config.config_differences(stored, moved) == []


# -- connecting ---------------------------------------------------------------------------------


def _connect_args(tmp_path: Path, address: str, *extra: str) -> list[str]:
    return ["eval", "echo", "-n", "2", "--executor", "ray", "--ray-address", address,
            "--base-url", "http://127.0.0.1:9/v1", "-o", str(tmp_path / "run"), "--no-report",
            "--quiet", *extra]


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port where connections are taken (by the kernel) and never answered: something is
    there, but not a Ray cluster. On every address, as Ray dials this machine's own."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen(64)
        yield int(sock.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize("behind", ["nothing", "silence"])
def test_a_ray_address_that_does_not_answer_fails_in_one_line(
        tmp_path: Path, silent_listener: int, behind: str) -> None:
    pytest.importorskip("ray")
    port = _free_port() if behind == "nothing" else silent_listener
    proc = run_cli(*_connect_args(tmp_path, f"127.0.0.1:{port}",
                                  "--set", "ray_connect_timeout_s=4"), env=_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("interplay: error")]
    assert errors == [proc.stderr.strip().splitlines()[-1]]
    assert f"Ray address 127.0.0.1:{port}" in errors[0]
    assert "within 4 s" in errors[0] and "ray_connect_timeout_s" in errors[0]
    assert results.read_episodes(tmp_path / "run" / "episodes.jsonl") == []


@pytest.mark.slow
def test_sigterm_while_connecting_to_ray_stops_the_run_and_writes_its_summary(
        tmp_path: Path, silent_listener: int) -> None:
    pytest.importorskip("ray")
    proc = subprocess.Popen(
        [sys.executable, "-m", "interplay.cli",
         *_connect_args(tmp_path, f"127.0.0.1:{silent_listener}")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert proc.stderr is not None
        announced = proc.stderr.readline()
        assert "episodes to run" in announced, announced + proc.communicate()[1]
        time.sleep(3)  # connecting by now
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["episodes"] == 0


def test_connecting_to_ray_has_a_deadline_well_under_a_minute() -> None:
    assert 0 < config.RunConfig().ray_connect_timeout_s < 60
