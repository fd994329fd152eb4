"""interplay used as a library, in a script of its own: nothing on stdout, no debug or info
lines unless the host asks for them, warnings on stderr, and the host's own logging or
structlog configuration obeyed and left as it was. The command logs as it always did. Real
subprocesses against the scripted model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from interplay.testing import ScriptedModel, ScriptedReply

ScriptedFactory = Callable[..., ScriptedModel]
ENV = {**os.environ, "INTERPLAY_LOAD_PLUGINS": ""}

#: A run through the library API, then a call that fails (a warning), after ``{setup}``.
SCRIPT = """
import asyncio, logging, sys
from pathlib import Path
import structlog
{setup}
from interplay.model.client import ModelClient
from interplay.config.endpoint import Endpoint
from interplay.values.records import Message
from interplay.run import config, runner

base_url, out = sys.argv[1], Path(sys.argv[2])
cfg, env, resolved = config.resolve({{"env": {{"name": "echo"}}, "n": 2, "output": str(out),
                                      "model": {{"base_url": base_url}}}})
out.mkdir()
outcome = asyncio.run(runner.run(cfg, env, resolved, out))
assert outcome.ran == 2


async def refused():
    client = ModelClient(Endpoint(base_url="http://127.0.0.1:9/v1", max_retries=0))
    try:
        return await client.chat([Message("user", "SENTINEL-5e2d")])
    finally:
        await client.aclose()

assert asyncio.run(refused()).error_type == "connection_error"
{check}
"""

HOSTS = {
    "none": ("", ""),
    "logging": ("logging.basicConfig(level=logging.INFO, stream=sys.stderr, "
                "format='%(levelname)s %(name)s %(message)s')", ""),
    "structlog": ("structlog.configure(processors=[structlog.processors.JSONRenderer()], "
                  "logger_factory=structlog.PrintLoggerFactory(file=sys.stderr), "
                  "wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))\n"
                  "mine = structlog.get_config()",
                  "assert structlog.get_config() == mine"),
}


def run_script(host: str, base_url: str, out: Path) -> subprocess.CompletedProcess[str]:
    setup, check = HOSTS[host]
    return subprocess.run([sys.executable, "-c", SCRIPT.format(setup=setup, check=check),
                           base_url, str(out)], capture_output=True, text=True, timeout=120,
                          env=ENV)


@pytest.mark.parametrize("host", list(HOSTS))
def test_library_use_writes_nothing_to_stdout_and_warnings_to_stderr(
        host: str, tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(lambda req: ScriptedReply.text("apple"))
    proc = run_script(host, model.base_url, tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    err = proc.stderr
    assert "SENTINEL-5e2d" not in err
    assert "episode.start" not in err  # a debug line
    if host == "none":
        # The standard library's last resort: warnings and above, on stderr, nothing else.
        lines = err.splitlines()
        assert [x.split(" ", 1)[0] for x in lines] == ["model.call_failed"], err
        assert "error_type=connection_error" in lines[0]
    elif host == "logging":
        assert "INFO interplay.run runner.start " in err
        assert "WARNING interplay.model.client model.call_failed " in err
    else:
        events = [json.loads(x) for x in err.splitlines()]
        assert {"runner.start", "model.call_failed"} <= {e["event"] for e in events}


def test_the_command_logs_as_it_did(tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(lambda req: ScriptedReply.text("apple"))
    proc = subprocess.run([sys.executable, "-m", "interplay.cli", "--log-level", "info",
                           "eval", "echo", "-n", "1", "--base-url", model.base_url, "-o",
                           str(tmp_path / "run"), "-q", "--no-report"],
                          capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "runner.start" not in proc.stdout and proc.stdout.startswith("echo: ")
    [start] = [x for x in proc.stderr.splitlines() if "runner.start" in x]
    assert "[info     ] runner.start" in start and "episodes=1" in start
    assert "episode.start" not in proc.stderr


#: An episode run through the public API alone, on the scripted model: a TOML env registered
#: by its path and a relay with a modeled user.
QUIET = """
import asyncio
import interplay
from interplay.testing import ScriptedReply, run_scripted

async def main():
    for name in ("echo-toml", "user-sim"):
        env = interplay.lookup("envs", name)()
        task = next(iter(env.tasks()))
        run = await run_scripted(env, task, lambda request: ScriptedReply.text("apple"))
        assert run.episode.error is None, run.episode.error
        assert run.requests, name

asyncio.run(main())
"""


def test_an_episode_run_from_python_prints_nothing_at_all() -> None:
    proc = subprocess.run([sys.executable, "-c", QUIET], capture_output=True, text=True,
                          timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert (proc.stdout, proc.stderr) == ("", "")
