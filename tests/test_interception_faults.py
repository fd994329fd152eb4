"""Faults of the upstream, seen from the model client and through the interception server, over
real HTTP on 127.0.0.1: an upstream that accepts connections and never answers is given up on
within two first-byte waits, named, with advice that helps."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import textwrap
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import ClassVar

import attrs
import httpx
import pytest

from interplay.config.endpoint import Endpoint
from interplay.contracts.env import Env, SeatSpec
from interplay.contracts.step import Step
from interplay.contracts.verifier import Verifier
from interplay.interception import InterceptionServer, Limits, TraceRoute
from interplay.model.client import ModelClient
from interplay.model.share import FairShare
from interplay.run.episode import LiveEpisodeContext
from interplay.run.summary import remedy
from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    captured_log,
    run_scripted,
)
from interplay.values.records import Episode, ModelCall, Reward, Task

HI = [{"role": "user", "content": "hi"}]


class HungUpstream:
    """A server that accepts every connection, reads what it is sent and never answers."""

    def __init__(self) -> None:
        self.accepted = 0
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._held: set[asyncio.StreamWriter] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._held.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._held.discard(writer)
            writer.close()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def __aenter__(self) -> HungUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._held):
            writer.close()
        with contextlib.suppress(Exception):
            await self._server.wait_closed()


@pytest.fixture
async def hung() -> AsyncIterator[HungUpstream]:
    async with HungUpstream() as upstream:
        yield upstream


def _endpoint(hung: HungUpstream, transport: str, **changes: object) -> Endpoint:
    settings: dict[str, object] = {"timeout_s": 2.0, "first_byte_timeout_s": 0.4,
                                   "max_retries": 4, "retry_max_s": 30.0,
                                   "transport": transport, **changes}
    return attrs.evolve(Endpoint(base_url=hung.base_url, model="m"), **settings)


@pytest.mark.parametrize("transport", ["aiohttp", "openai"])
async def test_a_hung_upstream_is_asked_twice_and_named(hung: HungUpstream,
                                                        transport: str) -> None:
    client = ModelClient(_endpoint(hung, transport))
    try:
        call = await client.chat(HI, stream=True)
    finally:
        await client.aclose()
    assert call.error_type == "timeout"
    # Four retries were allowed: the second attempt that began no answer ended the call.
    assert call.attempts == 2 and hung.requests == 2
    assert call.error is not None
    assert call.error.startswith(f"{hung.base_url} began no answer within 0.4 s of the "
                                 f"request (first_byte_timeout_s)")
    assert "2 attempts in a row, none answered" in call.error
    advice = remedy("timeout", call.error)
    assert advice is not None and "first_byte_timeout_s" in advice
    assert "is serving" in advice and "lower -c" not in advice


@pytest.mark.parametrize("transport", ["aiohttp", "openai"])
async def test_a_whole_answer_has_the_read_limit_to_begin(hung: HungUpstream,
                                                          transport: str) -> None:
    """A non-streamed answer begins only when whole: its wait is timeout_s, named as such."""
    client = ModelClient(_endpoint(hung, transport, timeout_s=0.6, retry_max_s=5.0))
    try:
        call = await client.chat(HI)
    finally:
        await client.aclose()
    assert call.error_type == "timeout" and call.attempts == 2
    assert call.error is not None
    assert call.error.startswith(f"{hung.base_url} began no answer within 0.6 s of the "
                                 f"request (timeout_s)")


async def test_an_answer_that_began_resets_the_count(hung: HungUpstream) -> None:
    """Only attempts in a row count: an endpoint that answered between two hangs (here, a 503)
    is retried as any transient failure is."""
    replies = [ScriptedReply.hang(), ScriptedReply.fault(503), ScriptedReply.hang(),
               ScriptedReply.text("ok")]
    async with ScriptedModel(replies) as m:
        client = ModelClient(attrs.evolve(m.endpoint, timeout_s=2.0, first_byte_timeout_s=0.3,
                                          retry_max_s=30.0))
        try:
            call = await client.chat(HI, stream=True)
        finally:
            await client.aclose()
    assert call.error_type is None, call.error
    assert call.attempts == 4


async def test_through_the_interception_server_the_program_gets_a_504_naming_it(
        hung: HungUpstream) -> None:
    calls: list[ModelCall] = []
    client = ModelClient(_endpoint(hung, "aiohttp"))
    async with InterceptionServer() as server:
        route = server.open_trace(client=client, on_call=calls.append)
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(f"{route.base_url}/chat/completions", json={
                "model": "m", "messages": HI, "stream": True},
                headers={"authorization": f"Bearer {route.secret}"})
        server.close_trace(route.secret)
    await client.aclose()
    assert answer.status_code == 504
    assert hung.base_url in answer.json()["error"]["message"]
    assert [c.error_type for c in calls] == ["timeout"]
    assert calls[0].attempts == 2


def test_the_defaults_give_up_on_a_hung_upstream_inside_the_seats_turn() -> None:
    """One call's worst case (retries begin within the budget, the last one waits a whole
    timeout_s) ends before a seat's turn would: the endpoint's error, not the seat's limit,
    ends the turn."""
    ep, seat = Endpoint(), SeatSpec()
    assert ep.retry_budget_s + ep.timeout_s < seat.timeout_s
    # A hung upstream is asked twice: two first-byte waits for a stream, two timeouts whole.
    assert 2 * ep.first_byte_s(True) <= 120.0
    assert 2 * ep.first_byte_s(False) <= 240.0


# -- a segment whose endpoint could not be reached ----------------------------------------------

PROGRAM = textwrap.dedent("""
    import json, os, sys, urllib.error, urllib.request
    body = {"model": os.environ["OPENAI_MODEL"], "stream": False,
            "messages": [{"role": "user", "content": sys.stdin.read()}]}
    for attempt in range(int(sys.argv[1])):
        request = urllib.request.Request(
            os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=json.dumps(body).encode(),
            headers={"authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                     "content-type": "application/json"})
        try:
            answer = json.load(urllib.request.urlopen(request, timeout=60))
        except urllib.error.HTTPError as exc:
            print(f"API Error: {exc.code}")  # as a CLI agent says it, and exits 0
            continue
        print(answer["choices"][0]["message"]["content"])
        break
""")


class Scored(Verifier):
    name = "scored"

    async def score(self, episode: Episode, ctx: LiveEpisodeContext) -> Reward:
        return Reward("scored", 0.0)


class ProgramEnv(Env):
    name = "unreached-test"
    seats: ClassVar[dict[str, SeatSpec]] = {"assistant": SeatSpec(harness="command")}

    def tasks(self) -> Iterable[Task]:
        return []

    def steps(self) -> list[Step]:
        class Ask(Step):
            name = "ask"

            async def run(self, ctx: LiveEpisodeContext) -> None:
                await ctx.agent("assistant").run(ctx.task)

        return [Ask()]

    def verifiers(self) -> list[Verifier]:
        return [Scored()]


async def _run_program(tmp_path: Path, replies: list[ScriptedReply], tries: int) -> Episode:
    script = tmp_path / "agent.py"
    script.write_text(PROGRAM)
    run = await run_scripted(ProgramEnv(), Task(0, prompt="hello"), replies, seed=None, seats={
        "assistant": {"harness": "command",
                      "harness_config": {"argv": [sys.executable, str(script), str(tries)]},
                      "model": {"timeout_s": 0.5, "max_retries": 1}}})
    return run.episode


@pytest.mark.slow
async def test_a_program_that_got_the_504_and_exited_is_an_upstream_error_unscored(
        tmp_path: Path) -> None:
    ep = await _run_program(tmp_path, [ScriptedReply.hang()] * 4, tries=1)
    trace = ep.trace("assistant")
    assert trace.info["command_runs"][0]["exit_code"] == 0
    assert [c.error_type for c in trace.model_calls] == ["timeout"]
    assert trace.stop_condition == "error" and trace.error_type == "timeout"
    assert trace.error is not None
    assert "the endpoint could not be reached and no later model call" in trace.error
    assert "began no answer within 0.5 s" in trace.error
    # Not agent_completed scored 0: no verifier saw it, and --retry-errors runs it again.
    assert ep.error_type == "timeout" and ep.reward is None and ep.rewards == []


@pytest.mark.slow
async def test_a_program_that_tried_again_and_got_an_answer_is_scored(tmp_path: Path) -> None:
    ep = await _run_program(tmp_path, [ScriptedReply.hang(), ScriptedReply.hang(),
                                       ScriptedReply.text("answered")], tries=2)
    trace = ep.trace("assistant")
    assert [c.error_type for c in trace.model_calls] == ["timeout", None]
    assert ep.error is None, ep.error
    assert trace.stop_condition == "agent_completed"
    assert trace.messages[-1].text.endswith("answered")
    assert ep.reward == 0.0


# -- one trace cannot starve the others --------------------------------------------------------

async def test_the_fair_queue_hands_a_freed_slot_to_the_trace_holding_fewest() -> None:
    share = FairShare(3)
    granted: list[str] = []
    release: dict[str, asyncio.Event] = {}

    async def call(party: str, name: str) -> None:
        async with share.slot(party):
            granted.append(name)
            release[name] = asyncio.Event()
            await release[name].wait()

    tasks = [asyncio.create_task(call("A", f"A{i}")) for i in range(12)]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(call("C", f"C{i}")) for i in range(5)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(call("B", "B0")))
    await asyncio.sleep(0)
    # A holds all slots but one; the one left went to C, the first other trace to ask.
    assert granted == ["A0", "A1", "C0"] and share.waiting == 15
    release["A0"].set()
    await asyncio.sleep(0.01)
    assert granted[-1] == "B0"  # it held none: before A's ten and C's four
    release["A1"].set()
    await asyncio.sleep(0.01)
    assert granted[-1] == "A2"  # A holds one now, C and B one each: A waited longest
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert share.used == 0 and share.waiting == 0


async def test_a_cancelled_wait_gives_its_place_up() -> None:
    share = FairShare(1)
    async with share.slot("A"):
        waiting = asyncio.create_task(share.slot("B").__aenter__())
        await asyncio.sleep(0)
        assert share.waiting == 1
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert share.waiting == 0
    assert share.used == 0
    async with share.slot("C"):
        assert share.used == 1


def _a_hangs(request: ScriptedRequest) -> ScriptedReply:
    text = request.last_user_text()
    return ScriptedReply.hang() if text.startswith("A") else ScriptedReply.text(text)


@pytest.mark.parametrize("stream", [False, True])
async def test_one_trace_holding_twenty_requests_does_not_hold_up_anothers_call(
        stream: bool) -> None:
    """Trace A sends 24 requests at once, none of which the endpoint ever answers; then trace
    B sends one. The endpoint's pool has two connections: B is answered while every one of
    A's is still pending (first come, first served, A's would hold both and B would wait for
    them all)."""
    done: list[str] = []
    async with ScriptedModel(_a_hangs) as m:
        client = ModelClient(attrs.evolve(m.endpoint, timeout_s=300.0,
                                          first_byte_timeout_s=300.0), max_connections=2)
        async with InterceptionServer() as server:
            a = server.open_trace(client=client, on_call=lambda c: None)
            b = server.open_trace(client=client, on_call=lambda c: None)
            async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(
                    max_connections=64)) as http:

                async def ask(route: TraceRoute, text: str) -> None:
                    answer = await http.post(f"{route.base_url}/chat/completions", json={
                        "model": "m", "messages": [{"role": "user", "content": text}],
                        "stream": stream}, headers={"authorization": f"Bearer {route.secret}"})
                    done.append(f"{text} {answer.status_code}")

                held = [asyncio.create_task(ask(a, f"A{i}")) for i in range(24)]
                for _ in range(2000):  # until A's first call has reached the endpoint
                    if m.received:
                        break
                    await asyncio.sleep(0.005)
                # A bound for a broken queue, not a measure: B is answered at once.
                await asyncio.wait_for(ask(b, "B"), 120)
                assert done == ["B 200"]
                assert m.received == 2  # A's first (held), B's; A's others wait their turn
                server.close_trace(a.secret)  # A's calls end (410), recorded nowhere
                await asyncio.gather(*held)
        await client.aclose()
    assert sorted(done[1:]) == sorted(f"A{i} 410" for i in range(24))


@pytest.mark.slow
async def test_unread_streams_are_closed_by_the_server() -> None:
    """Programs that send a streamed request and never read the answer have their
    connections closed once nothing of it has been taken for unread_timeout_s; those that
    also shut their side down (half-open) are closed at once, their calls cancelled; another
    trace is answered meanwhile."""
    big = " ".join(["x" * 65536] * 160)  # 10 MiB: more than the sockets' buffers hold
    async with ScriptedModel(lambda req: ScriptedReply.text(
            big if req.last_user_text() == "big" else "small")) as m:
        client = ModelClient(m.endpoint, max_connections=4)
        with captured_log("info") as log_out:
            async with InterceptionServer(limits=Limits(unread_timeout_s=1.0)) as server:
                a = server.open_trace(client=client, on_call=lambda c: None)
                b = server.open_trace(client=client, on_call=lambda c: None)
                port = int(a.base_url.split(":")[2].split("/")[0])
                body = json.dumps({"model": "m", "stream": True, "messages": [
                    {"role": "user", "content": "big"}]}).encode()
                head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                        f"authorization: Bearer {a.secret}\r\ncontent-type: application/json"
                        f"\r\ncontent-length: {len(body)}\r\n\r\n").encode()
                held: list[socket.socket] = []
                for i in range(6):
                    s = socket.socket()
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.connect(("127.0.0.1", port))
                    s.sendall(head + body)
                    if i % 2:
                        s.shutdown(socket.SHUT_WR)
                    held.append(s)
                async with httpx.AsyncClient(timeout=60) as http:
                    answer = await http.post(f"{b.base_url}/chat/completions", json={
                        "model": "m", "messages": [{"role": "user", "content": "hi"}]},
                        headers={"authorization": f"Bearer {b.secret}"})
                assert answer.status_code == 200
                unread = len(held) // 2  # those that kept their side open
                for _ in range(600):
                    closed = log_out.getvalue().count('"listener.unread_answer_closed"')
                    if closed >= unread:
                        break
                    await asyncio.sleep(0.05)
                assert closed == unread
        await client.aclose()
    # Every one was closed by the server: reset (unread), or ended at once (half-open: the
    # server saw its end and cancelled the call). One still open would raise BlockingIOError.
    for s in held:
        s.setblocking(False)
        try:
            while s.recv(1 << 20):
                pass
        except ConnectionResetError:
            pass
        s.close()
