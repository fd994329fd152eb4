"""A seat's settings start from the run's: its model table from the run's model key by key
(credentials only to the same server), its sampling in one order (the env's defaults, the
run's model, the seat's own), an env's harness settings only for the env's harness; and when a
seat's own endpoint fails, the run says which seat and which keys, with advice `--resume`
takes. On the wire: the run's model and a seat's own endpoint are two scripted servers."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import cattrs
import pytest

from interplay import cli, lookup
from interplay.config.endpoint import Endpoint
from interplay.contracts.contexts import SeatSpec
from interplay.run.episode import seat_settings
from interplay.testing import ScriptedModel


def test_a_seat_model_table_starts_from_the_runs_model_key_by_key() -> None:
    run = Endpoint(base_url="http://run.example/v1", model="big", timeout_s=30.0,
                   max_retries=1, sampling={"temperature": 0.3, "top_p": 0.9},
                   api_key_var="RUN_KEY", headers={"X-Team": "a"}, extra_body={"k": 1})
    spec = seat_settings(SeatSpec(), run, {"model": {"base_url": "http://other.example/v1",
                                                     "sampling": {"top_p": 0.5}}}, "user")
    assert spec.model is not None
    assert (spec.model.model, spec.model.timeout_s, spec.model.max_retries) == ("big", 30.0, 1)
    assert spec.model.sampling == {"temperature": 0.3, "top_p": 0.5}
    # Another server: the run's credentials and what its server speaks stay behind.
    assert (spec.model.api_key_var, spec.model.headers, spec.model.extra_body) == (None, {}, {})
    same = seat_settings(SeatSpec(), run, {"model": {"base_url": "http://run.example:80/v1/",
                                                     "model": "small"}}, "user")
    assert same.model is not None and same.model.api_key_var == "RUN_KEY"
    assert same.model.headers == {"X-Team": "a"} and same.model.model == "small"
    # No table: the run's endpoint itself.
    assert seat_settings(SeatSpec(), run, {}, "user").model is None


def test_sampling_is_laid_in_one_order_and_the_run_wins_over_the_env() -> None:
    env_default = SeatSpec(sampling={"max_tokens": 256, "temperature": 1.0})
    run = Endpoint(sampling={"max_tokens": 2048})
    assert seat_settings(env_default, run, {}, "assistant").sampling == {
        "max_tokens": 2048, "temperature": 1.0}
    given = {"sampling": {"temperature": 0.0}, "model": {"sampling": {"top_p": 0.8}}}
    assert seat_settings(env_default, run, given, "assistant").sampling == {
        "max_tokens": 2048, "temperature": 0.0, "top_p": 0.8}


def test_an_envs_harness_settings_go_only_with_its_harness() -> None:
    env_default = SeatSpec(harness="chat", harness_config={"max_turns": 100})
    run = Endpoint()
    assert seat_settings(env_default, run, {}, "a").harness_config == {"max_turns": 100}
    other = seat_settings(env_default, run, {"harness": "null"}, "a")
    assert (other.harness, other.harness_config) == ("null", {})
    mine = seat_settings(env_default, run, {"harness_config": {"stream": True}}, "a")
    assert mine.harness_config == {"max_turns": 100, "stream": True}


def test_a_seat_that_sets_only_its_base_url_sends_the_runs_model_and_sampling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUN_KEY", "sk-run-only")
    with ScriptedModel() as run_model, ScriptedModel() as user_model:
        code = cli.main(["eval", "user-sim", "-n", "1", "--base-url", run_model.base_url,
                         "-m", "the-run-model", "--api-key-var", "RUN_KEY",
                         "--set", "model.sampling.temperature=0.3",
                         "--set", f"seats.user.model.base_url={user_model.base_url}",
                         "--set", "env.relay.max_turns=1",
                         "-o", str(tmp_path / "run"), "-q", "--no-report"])
        assert code == 0
        assert run_model.requests and user_model.requests
        for request in user_model.requests:
            assert request.body["model"] == "the-run-model"
            assert request.body["temperature"] == 0.3
            assert request.body["max_tokens"] == 96  # the env's default for its user seat
            # The run's key goes to the run's server, never to another.
            assert "sk-run-only" not in request.headers.get("authorization", "")
        assert all(r.headers.get("authorization") == "Bearer sk-run-only"
                   for r in run_model.requests)
        assert {r.body["max_tokens"] for r in run_model.requests} == {256}
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    # config.json records each seat as the run filled it.
    user = stored["seats"]["user"]
    assert user["model"]["model"] == "the-run-model"
    assert user["sampling"] == {"max_tokens": 96, "temperature": 0.3}
    assert stored["seats"]["assistant"]["model_is_the_runs"] is True
    # Each seat's harness settings as its harness reads them: the chat harness's defaults
    # (its cap on one reply's model calls among them), which the env leaves as they are.
    chat = cattrs.Converter().unstructure(lookup("harnesses", "chat").Config())
    assert stored["seats"]["assistant"]["harness"] == "chat" and "max_turns" in chat
    assert stored["seats"]["assistant"]["harness_config"] == chat


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_seats_own_endpoint_down_is_named_and_the_advice_is_one_resume_takes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()  # closed: its connections are refused
    out = tmp_path / "run"
    user_url = f"http://127.0.0.1:{port}/v1"
    with ScriptedModel() as run_model:
        code = cli.main(["eval", "user-sim", "-n", "2", "--base-url", run_model.base_url,
                         "--set", f"seats.user.model.base_url={user_url}",
                         "--set", "model.max_retries=0", "-o", str(out), "-q", "--no-report"])
        assert code == 1
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last.startswith("interplay: error: no episode completed: all 2 ended in "
                               f"connection_error: seat 'user' (its own endpoint "
                               f"seats.user.model, {user_url}): connection error"), last
        assert "nothing answered at seats.user.model.base_url: start the endpoint there" in last
        assert "--base-url" not in last and "model.base_url (" not in last
        assert last.endswith(f"then run them again with `interplay eval --resume {out} "
                             f"--retry-errors`")
        # No episode completed: a regrade of it exits as eval did.
        assert cli.main(["regrade", str(out), "-o", str(tmp_path / "regraded"), "-q",
                         "--no-report"]) == 1
        # The advice, taken: the endpoint started there, and resumed with more room for it.
        with ScriptedModel(port=port):
            code = cli.main(["eval", "--resume", str(out), "--retry-errors", "-q",
                             "--no-report", "--set", "seats.user.model.timeout_s=30",
                             "--set", "model.max_retries=2"])
        assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["completed"], summary["errors"]) == (2, {})
    # config.json says what the resumed run used.
    stored = json.loads((out / "config.json").read_text())
    assert stored["config"]["seats"]["user"]["model"]["timeout_s"] == 30
    assert stored["seats"]["user"]["model"]["timeout_s"] == 30.0
    # What the run computes may not change on resume: the seat's model name is refused.
    code = cli.main(["eval", "--resume", str(out), "-q", "--no-report",
                     "--set", "seats.user.model.model=another"])
    assert code == 2
    assert "the config changed (seats.user.model.model)" in capsys.readouterr().err
