"""The scripted model kit: scripts, handlers, faults, both APIs, sync and async use, and the
pytest fixture."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest


def test_script_in_order_and_requests_recorded() -> None:
    with ScriptedModel(["one", ScriptedReply.text("two")]) as m:
        sdk = openai.OpenAI(base_url=m.base_url, api_key="x", max_retries=0)
        got = [sdk.chat.completions.create(model="m", messages=[
            {"role": "user", "content": f"q{i}"}]).choices[0].message.content for i in range(2)]
        r = httpx.post(m.base_url + "/chat/completions", json={"messages": []})
        assert [x.id for x in sdk.models.list().data] == ["scripted"]
    assert got == ["one", "two"]
    assert r.status_code == 500 and "exhausted" in r.json()["error"]["message"]
    assert [q.api for q in m.requests] == ["chat.completions"] * 3
    assert m.requests[1].last_user_text() == "q1"
    assert m.endpoint.base_url == m.base_url and m.endpoint.model == "scripted"


def test_handler_tool_calls_and_usage() -> None:
    def handler(req: ScriptedRequest) -> ScriptedReply:
        return ScriptedReply.calls([("a", {"x": 1}), ("b", {"y": "two words"})], text="both")

    with ScriptedModel(handler) as m:
        sdk = openai.OpenAI(base_url=m.base_url, api_key="x", max_retries=0)
        r = sdk.chat.completions.create(model="m", messages=[
            {"role": "user", "content": "three words here"}])
    msg = r.choices[0].message
    assert msg.content == "both" and [c.function.name for c in msg.tool_calls] == ["a", "b"]
    assert json.loads(msg.tool_calls[1].function.arguments) == {"y": "two words"}
    assert r.usage.prompt_tokens == 3 and r.choices[0].finish_reason == "tool_calls"


def test_responses_streamed_and_output_items() -> None:
    item = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "go",
            "arguments": "{}", "status": "completed"}
    with ScriptedModel([ScriptedReply.text("hi there"),
                        ScriptedReply.output_items([item])]) as m:
        sdk = openai.OpenAI(base_url=m.base_url, api_key="x", max_retries=0)
        with sdk.responses.stream(model="m", input="x") as s:
            final = s.get_final_response()
        r = sdk.responses.create(model="m", input="y")
    assert final.output_text == "hi there"
    assert r.output[0].type == "function_call" and r.output[0].call_id == "c1"
    assert m.requests[0].api == "responses" and m.requests[0].input == "x"


def test_faults() -> None:
    script = [ScriptedReply.fault(429, retry_after=7), ScriptedReply.malformed(),
              ScriptedReply.drop(), ScriptedReply.hang()]
    with ScriptedModel(script) as m:
        url = m.base_url + "/chat/completions"
        r = httpx.post(url, json={"messages": []})
        assert r.status_code == 429 and r.headers["retry-after"] == "7"
        assert httpx.post(url, json={"messages": []}).content == b"{this is not json"
        try:
            with httpx.stream("POST", url, json={"messages": [], "stream": True}) as s:
                body = b"".join(s.iter_bytes())
            raise AssertionError(f"stream was not dropped: {body!r}")
        except httpx.HTTPError:
            pass
        try:
            httpx.post(url, json={"messages": []}, timeout=0.3)
            raise AssertionError("did not hang")
        except httpx.TimeoutException:
            pass


@pytest.mark.parametrize("path", ["/chat/completions", "/responses"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_dropped_reply_cuts_the_connection_quietly(caplog: pytest.LogCaptureFixture,
                                                     path: str, stream: bool) -> None:
    caplog.set_level(logging.INFO)
    with ScriptedModel([ScriptedReply.drop("a reply cut halfway through"),
                        ScriptedReply.text("next")]) as m:
        url = m.base_url + path
        body = {"messages": [], "input": "x", "stream": stream}
        got = b""
        try:
            with httpx.stream("POST", url, json=body) as s:
                for piece in s.iter_bytes():
                    got += piece
            raise AssertionError(f"reply was not cut: {got!r}")
        except httpx.HTTPError:
            pass
        # what came before the cut arrived; the server goes on serving
        assert got.startswith(b"data: " if stream and path == "/chat/completions" else
                              b"event: " if stream else b'{"id": "x", '), got
        assert httpx.post(url, json={**body, "stream": False}).status_code == 200
    # no "Exception in ASGI application" from uvicorn
    assert [r.getMessage() for r in caplog.records if r.name.startswith("uvicorn")] == []


async def test_async_use_and_latency() -> None:
    async with ScriptedModel([ScriptedReply.text("late", latency_s=0.05)]) as m:
        sdk = openai.AsyncOpenAI(base_url=m.base_url, api_key="x", max_retries=0)
        r = await sdk.chat.completions.create(model="m", messages=[
            {"role": "user", "content": "x"}], stream=False)
        await sdk.close()
    assert r.choices[0].message.content == "late"


def test_fixture(scripted_model: Callable[..., ScriptedModel]) -> None:
    m = scripted_model(["fixture reply"])
    r = httpx.post(m.base_url + "/chat/completions",
                   json={"messages": [{"role": "user", "content": "x"}]})
    assert r.json()["choices"][0]["message"]["content"] == "fixture reply"


def test_runs_as_a_module_without_warnings() -> None:
    # -W error: the runpy warning (module imported by its package before running) would fail it
    proc = subprocess.Popen([sys.executable, "-W", "error", "-m", "interplay.testing.scripted"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = (proc.stdout.readline() if proc.stdout else "").strip()
        assert url.startswith("http://127.0.0.1:"), url
        r = httpx.post(url + "/chat/completions",
                       json={"messages": [{"role": "user", "content": "as a process"}]})
        assert r.json()["choices"][0]["message"]["content"] == "echo: as a process"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Warning" not in err, err


def _serve(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-W", "error", "-m", "interplay.testing.scripted",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = (proc.stdout.readline() if proc.stdout else "").strip()
    assert url.startswith("http://127.0.0.1:"), (url, proc.communicate(timeout=30))
    return proc, url


def _ask(url: str, text: str = "hi") -> httpx.Response:
    return httpx.post(url + "/chat/completions",
                      json={"messages": [{"role": "user", "content": text}]}, timeout=30)


@pytest.mark.slow
def test_a_process_serves_a_jsonl_script_in_order(tmp_path: Path) -> None:
    script = tmp_path / "replies.jsonl"
    script.write_text('"first"\n\n'
                      '{"content": "let me look", "tool_calls": [{"name": "find_order", '
                      '"arguments": {"order_id": "1042"}}]}\n'
                      '{"status": 429, "retry_after": 0}\n')
    proc, url = _serve("--script", str(script), "--model", "my-model")
    try:
        first = _ask(url).json()
        assert first["choices"][0]["message"]["content"] == "first"
        second = _ask(url).json()["choices"][0]["message"]
        assert second["content"] == "let me look"
        assert second["tool_calls"][0]["function"]["name"] == "find_order"
        assert json.loads(second["tool_calls"][0]["function"]["arguments"]) == {
            "order_id": "1042"}
        fault = _ask(url)
        assert fault.status_code == 429 and float(fault.headers["retry-after"]) == 0
        assert _ask(url).status_code == 500  # the script ran out
        models = httpx.get(url + "/models", timeout=30).json()
        assert models["data"][0]["id"] == "my-model"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.slow
def test_a_json_array_script_can_repeat(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text('["one", {"content": "two", "latency_s": 0.01}]')
    proc, url = _serve("--script", str(script), "--repeat")
    try:
        got = [_ask(url).json()["choices"][0]["message"]["content"] for _ in range(5)]
        assert got == ["one", "two", "one", "two", "one"]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize(("text", "message"), [
    ('"ok"\n{"contents": "x"}\n', "replies.jsonl line 2: reply: unknown key contents"),
    ('"ok"\n{not json\n', "replies.jsonl line 2: not valid JSON"),
    ('{"tool_calls": [{"arguments": {}}]}\n',
     "replies.jsonl line 1: reply.tool_calls[0].name: missing value"),
    ('{"hangs": "yes"}\n', "replies.jsonl line 1: reply.hangs: expected bool, got 'yes'"),
    ("3\n", "replies.jsonl line 1: reply: expected a table, got 3"),
    ("\n\n", "replies.jsonl: the script has no replies"),
])
def test_a_bad_script_is_one_line_exit_2(tmp_path: Path, text: str, message: str) -> None:
    script = tmp_path / "replies.jsonl"
    script.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "interplay.testing.scripted", "--script",
                           str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert message in last and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_an_eval_runs_on_a_scripted_model_process(tmp_path: Path) -> None:
    """The command line a plugin author uses to try an env without a model."""
    script = tmp_path / "replies.jsonl"
    script.write_text("\n".join(json.dumps(w) for w in ("apple", "river")) + "\n")
    proc, url = _serve("--script", str(script))
    try:
        out = tmp_path / "run"
        run = subprocess.run(
            [sys.executable, "-m", "interplay.cli", "eval", "echo-toml", "-n", "2", "-c", "1",
             "--base-url", url, "-o", str(out), "--no-report", "--quiet"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})
        assert run.returncode == 0, run.stderr
        assert json.loads((out / "summary.json").read_text())["reward_mean"] == 1.0
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.slow
def test_a_plugins_plain_tests_need_no_async_runner(tmp_path: Path) -> None:
    """A plugin's test file as docs/plugins.md shows it, run by pytest without pytest-asyncio:
    the scripted_episode fixture runs the episode from a plain test."""
    (tmp_path / "test_plugin.py").write_text('''
from interplay import Task, lookup


def test_echo_env(scripted_episode) -> None:
    env = lookup("envs", "echo")()
    run = scripted_episode(env, Task(0, prompt="Say apple", answer="apple"), ["apple"])
    assert run.episode.reward == 1.0
    assert len(run.requests) == 1
''')
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:asyncio", "-p",
                           "no:cacheprovider", str(tmp_path / "test_plugin.py")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def _docs_pytest_settings() -> str:
    """The ``[tool.pytest.ini_options]`` table docs/plugins.md tells a plugin author to write."""
    docs = (Path(__file__).parents[1] / "docs" / "plugins.md").read_text()
    block = next(b for b in docs.split("```toml\n")[1:] if "asyncio_mode" in b)
    return block.split("```")[0]


@pytest.mark.slow
def test_a_plugins_async_tests_run_without_a_warning(tmp_path: Path) -> None:
    """A plugin's pyproject.toml as docs/plugins.md shows it and a test marked as interplay's
    helpers mark them (needs_local_model, slow), with every warning an error: the markers are
    known (interplay's pytest plugin registers them) and pytest-asyncio has nothing to warn of."""
    (tmp_path / "pyproject.toml").write_text(_docs_pytest_settings())
    (tmp_path / "test_plugin.py").write_text('''
import pytest

from interplay.testing import needs_local_model

pytestmark = [needs_local_model[0], pytest.mark.slow]


async def test_marked_and_async() -> None:
    assert True
''')
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-W", "error", "-p",
                           "no:cacheprovider", "test_plugin.py"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "INTERPLAY_LOAD_PLUGINS": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout and "warning" not in proc.stdout.lower(), proc.stdout
