"""What `interplay eval` tells a user on the terminal, beyond the summary: when every episode
(or most) ended the same way, its last line names the cause and the setting to change (a TLS
endpoint whose CA is not trusted: `model.ca_bundle`, or SSL_CERT_FILE, which works through
both transports); and `-n` past the taskset's size says how many it runs. The real command,
the scripted model over real HTTP (behind a real TLS front)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from netkit import TestCA, TlsFront

from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

ScriptedFactory = Callable[..., ScriptedModel]


async def interplay(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The command in a process of its own (this test's event loop keeps serving meanwhile):
    its exit code, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "interplay.cli", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "INTERPLAY_LOAD_PLUGINS": "", **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path)


@pytest.fixture
async def tls(ca: TestCA) -> AsyncIterator[TlsFront]:
    async with ScriptedModel() as model, TlsFront(model.base_url, ca.server_context()) as front:
        yield front


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["aiohttp", "openai"])
async def test_an_untrusted_certificate_is_named_with_the_setting_that_trusts_it(
        tmp_path: Path, tls: TlsFront, ca: TestCA, transport: str) -> None:
    out = tmp_path / "run"
    code, _, err = await interplay(
        "eval", "echo", "-n", "3", "--base-url", tls.base_url, "-o", str(out), "-q",
        "--no-report", "--set", "model.max_retries=0", "--set", f"model.transport={transport}",
        env={"SSL_CERT_FILE": "", "SSL_CERT_DIR": ""})
    assert code == 1, err
    last = last_line(err)
    assert last.startswith("interplay: error: no episode completed: all 3 ended in "
                           "connection_error: "), last
    assert "certificate verify failed" in last.lower()
    assert "model.ca_bundle" in last and "SSL_CERT_FILE" in last
    assert f"interplay eval --resume {out} --retry-errors" in last

    # either setting mends it, through either transport
    for how, extra, env in (
            ("ca_bundle", ["--set", f"model.ca_bundle={ca.bundle}"], {}),
            ("SSL_CERT_FILE", [], {"SSL_CERT_FILE": str(ca.bundle)})):
        code, _, err = await interplay(
            "eval", "echo", "-n", "3", "--base-url", tls.base_url, "-o", str(tmp_path / how),
            "-q", "--no-report", "--set", "model.max_retries=0",
            "--set", f"model.transport={transport}", *extra, env=env)
        assert code == 0, (how, err)
        summary = json.loads((tmp_path / how / "summary.json").read_text())
        assert (summary["completed"], summary["errors"]) == (3, {}), how


@pytest.mark.slow
async def test_most_episodes_ending_alike_are_named_on_the_last_line(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    def handler(request: ScriptedRequest) -> ScriptedReply:
        if "Paris" in json.dumps(request.messages):
            return ScriptedReply.text("Paris")
        return ScriptedReply.fault(401)

    model = scripted_model(handler)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"prompt": p, "answer": "x"}) + "\n"
                             for p in ["Paris", "a", "b", "c"]))
    out = tmp_path / "run"
    code, _, err = await interplay(
        "eval", "echo", "--base-url", model.base_url, "-o", str(out), "-q", "--no-report",
        "--set", f"env.taskset={json.dumps(str(tasks))}")
    assert code == 0, err
    last = last_line(err)
    assert last.startswith("interplay: warning: 3 of 4 episodes ended in auth_error: "
                           "seat 'assistant': HTTP 401"), \
        last
    assert "model.api_key_var" in last
    assert f"interplay eval --resume {out} --retry-errors" in last


@pytest.mark.slow
async def test_n_past_the_tasksets_size_says_how_many_it_runs(
        tmp_path: Path, scripted_model: ScriptedFactory) -> None:
    model = scripted_model(lambda request: ScriptedReply.text("ok"))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"prompt": p, "answer": "ok"}) + "\n"
                             for p in ["a", "b", "c"]))
    code, _, err = await interplay(
        "eval", "echo", "-n", "4", "--base-url", model.base_url, "-o", str(tmp_path / "run"),
        "-q", "--no-report", "--set", f"env.taskset={json.dumps(str(tasks))}")
    assert code == 0, err
    first = err.strip().splitlines()[0]
    assert "-n 4" in first and "has 3 tasks" in first and "runs 3" in first, first


def _summary(causes: list[tuple[str, str]], completed: int) -> dict[str, object]:
    from interplay.run.summary import summarize

    records = [{"info": {"task_idx": i, "rollout": 0}, "error_type": kind, "error": error,
                "traces": [], "usage": {}, "metrics": {}, "criteria": {}}
               for i, (kind, error) in enumerate(causes)]
    records += [{"info": {"task_idx": 100 + i, "rollout": 0}, "error_type": None,
                 "error": None, "reward": 1.0, "traces": [], "usage": {}, "metrics": {},
                 "criteria": {}} for i in range(completed)]
    return summarize(records)


def test_the_last_line_says_what_ended_most_episodes_and_nothing_when_few() -> None:
    from interplay.run.summary import error_line

    rerun = "run them again"
    mixed = _summary([("timeout", "segment exceeded 60 s")] * 2 + [("bad_request", "HTTP 400")],
                     completed=0)
    assert mixed["common_error"] == {"error_type": "timeout", "error": "segment exceeded 60 s",
                                     "episodes": 2}
    assert error_line(mixed, rerun=rerun) == (
        "interplay: error: no episode completed: all 3 ended in an error (timeout 2, "
        "bad_request 1), 2 in timeout: segment exceeded 60 s; raise the seat's timeout_s "
        "(--set seats.SEAT.timeout_s=...); mend the causes, then run them again")
    spawn = "the system could not start program 'x' (Too many open files)"
    most = _summary([("spawn_error", spawn)] * 54, completed=26)
    assert error_line(most, rerun=rerun) == (
        f"interplay: warning: 54 of 80 episodes ended in spawn_error: {spawn}; the system ran "
        "short of descriptors, processes or memory: raise `ulimit -n` (and `ulimit -u`) or "
        "lower -c; then run them again")
    assert error_line(_summary([("spawn_error", spawn)] * 40, completed=40), rerun=rerun) is None
    assert error_line(_summary([], completed=3), rerun=rerun) is None
    config = _summary([("config_error", "InterplayError: harness 'x': fix harness_config.argv")],
                      completed=0)
    assert error_line(config, rerun=rerun) == (
        "interplay: error: no episode completed: all 1 ended in config_error: InterplayError: "
        "harness 'x': fix harness_config.argv; then start a new run with another -o (--resume "
        "keeps the run's config)")
    # A seat with its own endpoint is named with its own keys, not the run's flag.
    own = _summary([("connection_error", "seat 'user' (its own endpoint seats.user.model, "
                     "http://127.0.0.1:9/v1): connection error sending the request")],
                   completed=0)
    line = error_line(own, rerun=rerun)
    assert "nothing answered at seats.user.model.base_url: start the endpoint there" in line
    assert "--base-url" not in line and line.endswith("then run them again")
    # Only scoring failed: the stored episodes are scored again, the agent not called.
    failed = _summary([("verifier_error", "verifier mine: KeyError: 'x' (mine/v.py:3)")],
                      completed=0)
    assert error_line(failed, rerun=rerun, regrade="regrade it") == (
        "interplay: error: no episode completed: all 1 ended in verifier_error: verifier mine: "
        "KeyError: 'x' (mine/v.py:3); a verifier failed (the error names where in its code): "
        "mend it; then regrade it")


def test_a_refused_request_is_not_sent_again_unchanged() -> None:
    """A 400 is the request as the run's config made it: the last line asks for a new run
    with the setting changed, never --retry-errors, which would send it again as it was."""
    from interplay.run.summary import error_line

    rerun = "interplay eval --resume DIR --retry-errors"
    vllm = ("seat 'assistant': HTTP 400: This model's maximum context length is 2048 tokens. "
            "However, you requested 2100 tokens (1588 in the messages, 512 in the completion).")
    line = error_line(_summary([("bad_request", vllm)] * 3, completed=1), rerun=rerun)
    assert line is not None and line.startswith("interplay: warning: 3 of 4 episodes")
    assert "outgrew the model's context window: lower model.sampling.max_tokens" in line
    assert "--retry-errors" not in line and line.endswith(
        "then start a new run with another -o (--resume keeps the run's config)")
    embedded = "seat 'user' (its own endpoint seats.user.model, http://127.0.0.1:9/v1): HTTP " \
               "400: Requested tokens (2049) exceed context window of 2048"
    line = error_line(_summary([("bad_request", embedded)], completed=0), rerun=rerun)
    assert line is not None and "lower seats.user.model.sampling.max_tokens" in line
    field = "seat 'assistant': HTTP 400: 'temperature' must be at most 2"
    line = error_line(_summary([("bad_request", field)], completed=0), rerun=rerun)
    assert line == (
        f"interplay: error: no episode completed: all 1 ended in bad_request: {field}; the "
        "endpoint refused the request the run's config made (its answer says why): change "
        "that setting, or serve another model; sent again unchanged, it is refused again; "
        "then "
        "start a new run with another -o (--resume keeps the run's config)")
