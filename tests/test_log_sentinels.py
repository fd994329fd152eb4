"""No message text, tool argument or user data reaches a log line, even at debug level.

A run is driven with known sentinel strings in every place user data lives (task prompt,
system prompt, persona, the model's replies, tool arguments and tool output; in an always_on
run also the scenario's alerts, phone items, scripted lines, app state, contacts' personas and
replies, the user's description and replies, and the agent's private notes) and the whole log
is searched for them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from interplay import log
from interplay.builtin_envs.steps import Relay, RelayConfig
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.run.episode import LiveEpisodeContext, RunResources, run_episode
from interplay.run.loader import env_from_toml
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    captured_log,
    run_scripted,
)
from interplay.values.records import Task
from interplay.values.tools import Tool, tool

SENTINELS = {
    "prompt": "SENTINEL-PROMPT-7f3a",
    "system": "SENTINEL-SYSTEM-91c2",
    "persona": "SENTINEL-PERSONA-0d4e",
    "reply": "SENTINEL-REPLY-5b8f",
    "args": "SENTINEL-ARGS-c61d",
    "tool_out": "SENTINEL-TOOLOUT-2e90",
}


class SentinelEnv(Env):
    name = "sentinel-env"
    seats = {"assistant": SeatSpec(harness="chat"),
             "user": SeatSpec(harness="null", trainable=False)}

    def tasks(self) -> list[Task]:
        return []

    def steps(self) -> list[Step]:
        return [Relay(RelayConfig(max_turns=3))]

    def tools(self, seat: str, ctx: LiveEpisodeContext) -> list[Tool]:
        @tool
        def lookup(query: str) -> str:
            """Look something up."""
            return f"{SENTINELS['tool_out']} for {query}"

        return [lookup]


@pytest.fixture
def log_buffer() -> Iterator[io.StringIO]:
    with captured_log("debug") as buffer:
        yield buffer


def handler(request: ScriptedRequest) -> ScriptedReply:
    msgs = request.messages
    system = msgs[0]["content"] if msgs and msgs[0]["role"] == "system" else ""
    if "role-playing a user" in system:
        n = sum(1 for m in msgs if m["role"] == "user")
        return ScriptedReply.text("###DONE###" if n > 2 else f"{SENTINELS['reply']} user {n}")
    if msgs[-1]["role"] == "user":
        return ScriptedReply.tool_call("lookup", {"query": SENTINELS["args"]})
    return ScriptedReply.text(f"{SENTINELS['reply']} assistant")


async def test_no_user_data_reaches_the_log(log_buffer: io.StringIO) -> None:
    task = Task(0, prompt=SENTINELS["prompt"], system_prompt=SENTINELS["system"],
                info={"persona": SENTINELS["persona"]})
    with ScriptedModel(handler) as model:
        resources = RunResources(endpoint=model.endpoint)
        try:
            episode = await run_episode(SentinelEnv(), task, resources=resources)
        finally:
            await resources.aclose()
    assert episode.error is None
    assert episode.trace("assistant").tool_runs, "the tool was called"
    text = log_buffer.getvalue()
    # The run logged: ids and counts are there.
    assert episode.info.episode_id in text
    assert '"agent.turn"' in text
    for where, sentinel in SENTINELS.items():
        assert sentinel not in text, f"{where} leaked into the log"


def test_urls_and_paths_lose_their_credentials(log_buffer: io.StringIO) -> None:
    """URLs and paths are logged without userinfo, query string or a trace's secret segment;
    keys that can carry user text (config, state, status as text) are redacted."""
    logger = structlog.get_logger("interplay.test")
    logger.warning("test.locations",
                   url="https://SENTINEL-USER:SENTINEL-PW@api.example.com/v1?key=SENTINEL-KEY#f",
                   base_url="http://127.0.0.1:8000/t/SENTINEL-TRACE/v1",
                   path="/t/SENTINEL-PATH/v1/chat/completions?token=SENTINEL-TOKEN",
                   tasks_path="/data/tasks.jsonl",
                   config="SENTINEL-CONFIG", state="SENTINEL-STATE", status="SENTINEL-STATUS",
                   code_status=404)
    text = log_buffer.getvalue()
    assert "SENTINEL" not in text
    assert "https://api.example.com/v1" in text
    assert "http://127.0.0.1:8000/t/<redacted>/v1" in text
    assert "/t/<redacted>/v1/chat/completions" in text
    assert "/data/tasks.jsonl" in text
    assert "404" in text


AO = {k: f"SENTINEL-AO-{k.upper()}-{i}" for i, k in enumerate(
    ("opening", "description", "persona", "alert", "phone", "line", "state", "args", "message",
     "note", "contact", "user", "system"))}


def always_on_handler(request: ScriptedRequest) -> ScriptedReply:
    msgs = request.messages
    system = str(msgs[0]["content"]) if msgs and msgs[0]["role"] == "system" else ""
    if "role-playing a user" in system:
        return ScriptedReply.text(f"#1 {AO['user']}")
    if "You receive messages from" in system:
        return ScriptedReply.text(AO["contact"])
    if msgs[-1]["role"] == "tool":
        return ScriptedReply.text(f"private {AO['note']}")
    if AO["opening"] not in str(msgs[-1]["content"]):
        return ScriptedReply.tool_call("stay_quiet", {"reason": AO["note"]})
    return ScriptedReply.calls([("message_user", {"text": AO["message"]}),
                                ("send_email", {"to": "friend@example.com",
                                                "subject": AO["args"], "body": AO["args"]}),
                                ("list_notes", {})])


async def test_no_user_data_of_an_always_on_run_reaches_the_log(log_buffer: io.StringIO,
                                                                 tmp_path: Path) -> None:
    scenario = {
        "start": "2025-06-02T08:00", "end": "P1D", "timezone": "Europe/Berlin",
        "user": {"name": "Dana", "timezone": "Europe/Berlin", "description": AO["description"],
                 "awake": ["07:00", "23:00"], "reply_delays": {"free": "PT5M"}},
        "apps": [{"kind": "notes", "state": {"notes": [{"id": "n1", "text": AO["state"]}]}},
                 {"kind": "inbox"}],
        "contacts": [{"name": "friend", "persona": AO["persona"], "delay": "PT1H"}],
        "triggers": [
            {"name": "mail", "on_tool": "send_email",
             "actions": [{"kind": "reply", "contact": "friend"}]},
            {"name": "alert", "at": "2025-06-02T12:00",
             "actions": [{"kind": "notify", "text": AO["alert"]},
                         {"kind": "notify", "to": "phone", "text": AO["phone"]}]}],
        "lines": [{"at": "2025-06-02T18:00", "text": AO["line"]}],
        "tasks": [{"prompt": AO["opening"], "system_prompt": AO["system"]}]}
    path = tmp_path / "sentinel.json"
    path.write_text(json.dumps(scenario))
    env = env_from_toml(path)()
    env.check()
    episode = (await run_scripted(env, next(iter(env.tasks())), always_on_handler)).episode
    assert episode.error is None, episode.error
    record = episode.results["always_on"]
    assert record["summary"]["counts"]["contact_replies"] == 1
    assert record["summary"]["counts"]["user_replies"] >= 1
    text = log_buffer.getvalue()
    assert '"always_on.wake"' in text and '"user_sim.read"' in text
    for where, sentinel in AO.items():
        assert sentinel not in text, f"the always_on run's {where} leaked into the log"


async def test_the_interception_server_logs_why_and_not_what(log_buffer: io.StringIO) -> None:
    """Refused and cancelled requests are logged with their reason (a fixed code, let
    through) and nothing of their bodies."""
    import asyncio

    import httpx

    from interplay.interception import InterceptionServer

    secret = "SENTINEL-BODY-44aa"
    with ScriptedModel(lambda req: ScriptedReply.hang()) as model:
        from interplay.model.client import ModelClient

        client = ModelClient(model.endpoint)
        async with InterceptionServer() as srv:
            route = srv.open_trace(client=client, on_call=lambda call: None)
            headers = {"authorization": f"Bearer {route.secret}"}
            async with httpx.AsyncClient(timeout=10) as http:
                for bad in (b'{"messages": "%s \\ud800"}' % secret.encode(),
                            b'{"input": "x", "tools": "%s"}' % secret.encode()):
                    r = await http.post(route.base_url + "/responses", content=bad,
                                        headers=headers)
                    assert r.status_code == 400
                body = {"messages": [{"role": "user", "content": secret}]}
                asking = asyncio.create_task(http.post(route.base_url + "/chat/completions",
                                                       json=body, headers=headers))
                for _ in range(500):
                    if srv.waiting:
                        break
                    await asyncio.sleep(0.01)
                asking.cancel()  # the program goes away: its upstream call is cancelled
                for _ in range(500):
                    if not srv.inflight:
                        break
                    await asyncio.sleep(0.01)
        await client.aclose()
    lines = [json.loads(line) for line in log_buffer.getvalue().splitlines()]
    assert secret not in log_buffer.getvalue()
    assert [line["reason_code"] for line in lines
            if line["event"] == "interception.cancelled"] == ["client_disconnected"]
    assert [line.get("param_name") for line in lines
            if line["event"] == "interception.refused"] == [None, "tools"]


async def test_a_fixed_reason_comes_through_and_user_text_does_not(
        log_buffer: io.StringIO) -> None:
    """Sampling the Responses API cannot take is logged with the parameters' names and a fixed
    reason, both let through; the request's text, beside it, is not."""
    import httpx

    from interplay.interception import InterceptionServer
    from interplay.model.client import ModelClient

    secret = "SENTINEL-INPUT-3c1b"
    async with ScriptedModel() as model:
        client = ModelClient(model.endpoint_with(api="responses",
                                                 sampling={"seed": 7, "stop": ["x"]}))
        async with InterceptionServer() as srv, httpx.AsyncClient(timeout=30) as http:
            route = srv.open_trace(client=client, on_call=lambda call: None)
            r = await http.post(route.base_url + "/responses", json={"input": secret},
                                headers={"authorization": f"Bearer {route.secret}"})
            assert r.status_code == 200
        await client.aclose()
    structlog.get_logger("interplay.test").warning("test.user_text", reason=secret)
    text = log_buffer.getvalue()
    assert secret not in text
    lines = [json.loads(line) for line in text.splitlines()]
    [unforwarded] = [x for x in lines if x["event"] == "interception.sampling_not_forwarded"]
    assert unforwarded["reason_code"] == "not_in_responses_api"
    assert unforwarded["param_names"] == ["seed", "stop"]
    [user_text] = [x for x in lines if x["event"] == "test.user_text"]
    assert user_text["reason"] == f"<redacted len={len(secret)}>"


def test_a_debug_traceback_shows_no_locals() -> None:
    buffer = io.StringIO()
    log.configure(fmt="console", level="debug", stream=buffer)
    try:
        body = {"content": "SENTINEL-LOCAL-9e1b"}
        try:
            raise KeyError(len(body))
        except KeyError:
            structlog.get_logger("interplay.test").exception("test.failed")
    finally:
        structlog.reset_defaults()
    text = buffer.getvalue()
    assert "Traceback" in text and "KeyError" in text  # debug keeps the traceback ...
    assert "SENTINEL" not in text  # ... but not what its frames held


async def test_the_servers_own_messages_come_through_and_request_bytes_do_not(
        log_buffer: io.StringIO) -> None:
    """uvicorn's own lines (a protocol error here) are logged with their text, which is
    uvicorn's; the bytes of the request that caused them are not."""
    import asyncio

    from interplay.interception import InterceptionServer

    secret = "SENTINEL-GARBAGE-81fe"
    async with ScriptedModel() as model, InterceptionServer() as srv:
        for port in (int(srv.root_url.rsplit(":", 1)[1]),
                     int(model.base_url.split(":")[2].split("/")[0])):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"POST /v1/chat {secret} HTTP/9.9\r\nx: {secret}\r\n\r\n".encode())
            answer = await reader.read()
            writer.close()
            assert answer.startswith(b"HTTP/1.1 400")
    text = log_buffer.getvalue()
    assert secret not in text
    lines = [json.loads(line) for line in text.splitlines()]
    protocol_errors = [x for x in lines if x["event"] == "Invalid HTTP request received."]
    assert len(protocol_errors) == 2, lines
    assert {x["logger"] for x in protocol_errors} == {"uvicorn.error"}


class _Returns:
    """Harness stand-ins that fail each in its own way: hand back nothing, or raise."""

    @staticmethod
    def harnesses() -> list[type]:
        from interplay import Harness

        class Nothing(Harness):
            name = "test_returns_nothing"

            async def launch(self, task: Task, ctx: Any) -> Any:
                return None

        class Raises(Harness):
            name = "test_raises"

            async def launch(self, task: Task, ctx: Any) -> Any:
                raise ValueError(SENTINELS["reply"])

        return [Nothing, Raises]


@pytest.mark.parametrize("harness", ["test_returns_nothing", "test_raises"])
async def test_a_failure_is_logged_with_the_error_type_its_record_has(
        log_buffer: io.StringIO, register_plugin: Any, harness: str) -> None:
    import types

    from interplay import hookimpl
    from interplay.builtin_envs.steps import OneShot

    def register_harnesses(register: Any) -> None:
        for cls in _Returns.harnesses():
            register(cls)

    register_plugin(types.SimpleNamespace(register_harnesses=hookimpl(register_harnesses)),
                    "returns")

    class OneSeat(Env):
        name = "test_one_seat"
        seats = {"assistant": SeatSpec(harness=harness)}

        def tasks(self) -> list[Task]:
            return []

        def steps(self) -> list[Step]:
            return [OneShot()]

    episode = (await run_scripted(OneSeat(), Task(0, prompt="x"), None)).episode
    assert episode.error_type == "harness_error", episode.error
    trace = episode.trace("assistant")
    assert trace.error_type == "harness_error"
    lines = [json.loads(line) for line in log_buffer.getvalue().splitlines()]
    [logged] = [x for x in lines if x["event"] == "agent.harness_error"]
    assert logged["error_type"] == trace.error_type
    assert logged.get("exception_type") == ("ValueError" if harness == "test_raises" else None)
    assert SENTINELS["reply"] not in log_buffer.getvalue()


@pytest.mark.parametrize("raised", ["ValueError", "InterplayError"])
async def test_a_failed_step_is_logged_with_the_episodes_error_type(
        log_buffer: io.StringIO, raised: str) -> None:
    from interplay.errors import InterplayError

    class Fails(Step):
        name = "test_fails"

        async def run(self, ctx: LiveEpisodeContext) -> None:
            raise (ValueError if raised == "ValueError" else InterplayError)(SENTINELS["reply"])

    class FailingEnv(Env):
        name = "test_failing"
        seats = {"assistant": SeatSpec(harness="null")}

        def tasks(self) -> list[Task]:
            return []

        def steps(self) -> list[Step]:
            return [Fails()]

    episode = (await run_scripted(FailingEnv(), Task(0, prompt="x"), None)).episode
    assert episode.error_type == ("env_error" if raised == "ValueError" else "config_error")
    lines = [json.loads(line) for line in log_buffer.getvalue().splitlines()]
    [logged] = [x for x in lines if x["event"] == "episode.step_failed"]
    assert (logged["error_type"], logged["exception_type"]) == (episode.error_type, raised)
    assert SENTINELS["reply"] not in log_buffer.getvalue()


async def test_a_contact_that_fails_is_logged_with_its_exception_type(
        log_buffer: io.StringIO) -> None:
    """A contact's answer that raises is not a record's error: the line names the exception's
    class as ``exception_type`` and has no ``error_type`` (which names a record's)."""
    import random

    from interplay.values.clock import Clock
    from interplay.world import build_world, scenario_from

    async def ask(contact: Any, message: str) -> str:
        raise RuntimeError(SENTINELS["reply"])

    world = build_world(scenario_from({
        "start": "2025-06-02T08:00",
        "contacts": [{"name": "venue", "persona": SENTINELS["persona"]}],
        "triggers": [{"name": "go", "after": "PT1M", "actions": [
            {"kind": "reply", "contact": "venue", "message": SENTINELS["prompt"]}]}]}),
        clock=Clock(), rng=random.Random(7), ask=ask)
    while (event := world.queue.peek()) is not None:
        world.queue.pop()
        world.jump_to(event.due_us, event.kind)
        world.run_event(event)
    await world.settle()
    assert [c.status for c in world.contacts.calls] == ["failed"]
    lines = [json.loads(line) for line in log_buffer.getvalue().splitlines()]
    [logged] = [x for x in lines if x["event"] == "contacts.answer_failed"]
    assert (logged["contact_name"], logged["exception_type"]) == ("venue", "RuntimeError")
    assert "error_type" not in logged
    assert not any(s in log_buffer.getvalue() for s in SENTINELS.values())


def _exception_class(node: Any) -> bool:
    """Whether ``node`` is ``type(x).__name__`` or ``x.__class__.__name__``."""
    import ast

    if not (isinstance(node, ast.Attribute) and node.attr in ("__name__", "__qualname__")):
        return False
    inner = node.value
    return (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name)
            and inner.func.id == "type") or (
        isinstance(inner, ast.Attribute) and inner.attr == "__class__")


def test_every_log_call_names_an_exception_class_as_exception_type() -> None:
    """docs/plugins.md (Logging): ``error_type`` is a record's error type, the exception's class
    goes as ``exception_type``. Every log call of interplay, its builtins and its plugins that
    logs an exception's class does so under that key (under another it is either a record's
    type it is not, or redacted)."""
    import ast

    root = Path(__file__).resolve().parents[1]
    folders = [root / f for f in ("core", "builtin_harnesses", "builtin_envs",
                                  "builtin_verifiers")]
    folders += [p for p in (root / "plugins").glob("*/*") if (p / "__init__.py").exists()]
    offenders, calls = [], 0
    for folder in folders:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("debug", "info", "warning", "error",
                                               "exception", "critical")
                        and isinstance(node.func.value, ast.Name)
                        and "log" in node.func.value.id):
                    continue
                calls += 1
                offenders += [f"{path.relative_to(root)}:{node.lineno} {kw.arg}="
                              for kw in node.keywords
                              if kw.arg != "exception_type" and _exception_class(kw.value)]
    assert calls > 50  # the walk found interplay's log calls
    assert offenders == []
