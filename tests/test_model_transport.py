"""How model calls reach the endpoint, through each transport (aiohttp and the openai SDK's
client) and through the Responses passthrough, which shares them: the environment's proxy
(plain requests and CONNECT tunnels) unless NO_PROXY covers the host, an explicit proxy with
credentials, a 307 followed with its body, a CA bundle and a client certificate against a TLS
server of a test CA, extra headers; and the endpoint settings refused when they are made.

Every server is real, on 127.0.0.1: the scripted model, a forward proxy, a redirector and a
TLS front (tests/netkit.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import openai
import pytest
from netkit import ForwardProxy, Redirector, TestCA, TlsFront

from interplay._plumbing import asgi
from interplay._plumbing.listener import AsgiServer
from interplay.config import loading as config
from interplay.config.endpoint import Endpoint
from interplay.errors import InterplayError
from interplay.interception import InterceptionServer
from interplay.model.client import ModelClient
from interplay.model.wire import assistant_message
from interplay.run.config import RunConfig
from interplay.testing import ScriptedModel, ScriptedReply
from interplay.values.records import Message, ModelCall

HI = [Message("user", "hi there")]
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


@pytest.fixture(params=["aiohttp", "openai"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no proxy in the environment, whatever the machine has."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel() as m:
        yield m


@pytest.fixture
async def proxy() -> AsyncIterator[ForwardProxy]:
    async with ForwardProxy() as p:
        yield p


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path)


@pytest.fixture
async def tls(model: ScriptedModel, ca: TestCA) -> AsyncIterator[TlsFront]:
    async with TlsFront(model.base_url, ca.server_context()) as front:
        yield front


def endpoint(base_url: str, transport: str, **changes: object) -> Endpoint:
    settings = {"model": "scripted", "transport": transport, "timeout_s": 5.0,
                "max_retries": 2, "retry_max_s": 10.0, **changes}
    return Endpoint(base_url=base_url, **settings)  # type: ignore[arg-type]


async def call_once(ep: Endpoint, *, stream: bool = False) -> ModelCall:
    client = ModelClient(ep)
    try:
        return await client.chat(HI, stream=stream)
    finally:
        await client.aclose()


def answered(call: ModelCall) -> None:
    assert call.error_type is None, call.error
    reply = assistant_message(call)
    assert reply is not None and reply.text == "echo: hi there"


# -- proxies -------------------------------------------------------------------------------------

async def test_the_environment_proxy_carries_plain_requests(
        transport: str, model: ScriptedModel, proxy: ForwardProxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    call = await call_once(endpoint(model.base_url, transport))
    answered(call)
    assert proxy.seen == [f"POST {model.base_url}/chat/completions HTTP/1.1"]
    assert len(model.requests) == 1


async def test_the_environment_proxy_tunnels_https(
        transport: str, tls: TlsFront, ca: TestCA, proxy: ForwardProxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # not for https: never used
    call = await call_once(endpoint(tls.base_url, transport, ca_bundle=str(ca.bundle)),
                           stream=True)
    answered(call)
    assert proxy.seen == [f"CONNECT 127.0.0.1:{tls.port} HTTP/1.1"]


async def test_no_proxy_covering_the_host_goes_direct(
        transport: str, model: ScriptedModel, proxy: ForwardProxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "example.org,127.0.0.1")
    answered(await call_once(endpoint(model.base_url, transport)))
    assert proxy.seen == [] and len(model.requests) == 1


async def test_an_explicit_proxy_wins_and_sends_its_credentials(
        transport: str, model: ScriptedModel, proxy: ForwardProxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # refuses connections
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # the explicit setting is not the environment's
    ep = endpoint(model.base_url, transport,
                  proxy=f"http://lab:s3cret@127.0.0.1:{proxy.port}")
    answered(await call_once(ep))
    assert proxy.seen == [f"POST {model.base_url}/chat/completions HTTP/1.1"]
    assert proxy.auth == ["Basic " + base64.b64encode(b"lab:s3cret").decode()]


async def test_an_unreachable_proxy_is_a_connection_error_without_its_credentials(
        transport: str, model: ScriptedModel) -> None:
    call = await call_once(endpoint(model.base_url, transport, max_retries=0,
                                    proxy="http://lab:s3cret@127.0.0.1:9"))
    assert call.error_type == "connection_error" and "s3cret" not in (call.error or "")
    assert model.requests == []


async def test_a_proxy_aiohttp_cannot_speak_is_refused_with_one_line(
        model: ScriptedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "socks5://lab:s3cret@127.0.0.1:1080")
    with pytest.raises(InterplayError, match=r"^HTTP_PROXY names 'socks5://\*\*\*@127.0.0.1"
                                             r":1080': only http:// and https:// proxies"):
        await call_once(endpoint(model.base_url, "aiohttp"))


# -- redirects, TLS, headers ---------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
async def test_a_307_is_followed_with_the_body(transport: str, model: ScriptedModel,
                                               stream: bool) -> None:
    async with Redirector(model.base_url) as redirector:
        call = await call_once(endpoint(redirector.url, transport), stream=stream)
    answered(call)
    assert redirector.hits == 1
    assert [r.body for r in model.requests] == [call.request]


async def test_a_ca_bundle_is_trusted_and_only_it(transport: str, tls: TlsFront,
                                                  ca: TestCA, model: ScriptedModel) -> None:
    answered(await call_once(endpoint(tls.base_url, transport, ca_bundle=str(ca.bundle))))
    # The system's CAs do not know the test CA: refused, and not tried again.
    refused = await call_once(endpoint(tls.base_url, transport))
    assert refused.error_type == "connection_error" and refused.attempts == 1
    assert "certificate" in (refused.error or "").lower()
    assert len(model.requests) == 1


async def test_a_client_certificate_is_presented(transport: str, model: ScriptedModel,
                                                 ca: TestCA) -> None:
    context = ca.server_context(require_client_cert=True)
    async with TlsFront(model.base_url, context) as front:
        with_cert = endpoint(front.base_url, transport, ca_bundle=str(ca.bundle),
                             client_cert=str(ca.client_cert), client_key=str(ca.client_key))
        answered(await call_once(with_cert))
        without = await call_once(attrs.evolve(with_cert, client_cert=None, client_key=None,
                                               max_retries=0))
    assert without.error_type == "connection_error"
    assert len(model.requests) == 1


async def test_extra_headers_arrive_with_every_request(transport: str,
                                                       model: ScriptedModel) -> None:
    ep = endpoint(model.base_url, transport, api_key_var="TRANSPORT_TEST_KEY",
                  headers={"X-Lab": "lab-7", "OpenAI-Organization": "org-1"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRANSPORT_TEST_KEY", "sk-test")
        client = ModelClient(ep)
    try:
        answered(await client.chat(HI))
        answered(await client.chat(HI, stream=True))
    finally:
        await client.aclose()
    for request in model.requests:
        assert request.headers["x-lab"] == "lab-7"
        assert request.headers["openai-organization"] == "org-1"
        assert request.headers["authorization"] == "Bearer sk-test"


async def test_without_an_api_key_var_no_authorization_is_sent(transport: str,
                                                                model: ScriptedModel) -> None:
    """No key configured: no Authorization header at all (not a made-up ``Bearer none``, which
    a server that checks keys reads as a wrong one); the endpoint's own header still goes."""
    answered(await call_once(endpoint(model.base_url, transport)))
    answered(await call_once(endpoint(model.base_url, transport), stream=True))
    answered(await call_once(endpoint(model.base_url, transport,
                                      headers={"Authorization": "Bearer sk-header"})))
    assert [r.headers.get("authorization") for r in model.requests] == [
        None, None, "Bearer sk-header"]


def with_credentials(base_url: str, userinfo: str = "lab:s3cr%40t") -> str:
    scheme, rest = base_url.split("://", 1)
    return f"{scheme}://{userinfo}@{rest}"


#: What ``lab:s3cr%40t@`` in a URL amounts to (percent-decoded, as curl reads it).
BASIC = "Basic " + base64.b64encode(b"lab:s3cr@t").decode()


@pytest.mark.parametrize("stream", [False, True])
async def test_credentials_in_the_base_url_are_sent_as_basic_auth_and_never_recorded(
        transport: str, model: ScriptedModel, stream: bool) -> None:
    call = await call_once(endpoint(with_credentials(model.base_url), transport),
                           stream=stream)
    answered(call)
    [request] = model.requests
    assert request.headers["authorization"] == BASIC
    assert request.path == "/v1/chat/completions"
    assert "s3cr" not in json.dumps([call.request, call.error, call.model])
    assert "s3cr" not in repr(endpoint(with_credentials(model.base_url), transport,
                                       proxy="http://lab:s3cret@127.0.0.1:3128"))
    # through the interception server too, the Responses passthrough included
    calls = await forward_responses(endpoint(with_credentials(model.base_url), transport),
                                    stream=stream)
    assert [c.error_type for c in calls] == [None]
    assert model.requests[-1].headers["authorization"] == BASIC
    # the endpoint's own headers still come last
    ep = endpoint(with_credentials(model.base_url), transport,
                  headers={"Authorization": "Bearer sk-header"})
    answered(await call_once(ep, stream=stream))
    assert model.requests[-1].headers["authorization"] == "Bearer sk-header"


async def test_a_refused_credential_is_an_auth_error_without_it(transport: str) -> None:
    async with ScriptedModel(lambda req: ScriptedReply.fault(401)) as m:
        call = await call_once(endpoint(with_credentials(m.base_url), transport))
    assert call.error_type == "auth_error" and "s3cr" not in (call.error or "")


def test_credentials_in_the_base_url_and_an_api_key_are_one_too_many() -> None:
    with pytest.raises(InterplayError) as refused:
        config.structure({"model": {"base_url": "http://lab:pw@127.0.0.1:8000/v1",
                                    "api_key_var": "MY_KEY"}}, RunConfig)
    assert str(refused.value) == (
        "model: base_url carries credentials (user:password@) and api_key_var is set: both "
        "would be the Authorization header; remove one")
    assert "pw" not in str(refused.value)


# -- the Responses passthrough -------------------------------------------------------------------

async def forward_responses(ep: Endpoint, *, stream: bool = False) -> list[ModelCall]:
    """One Responses request from a program, through the interception server to ``ep``."""
    calls: list[ModelCall] = []
    client = ModelClient(attrs.evolve(ep, api="responses"))
    async with InterceptionServer() as srv:
        route = srv.open_trace(client=client, on_call=calls.append)
        # The program talks to the interception server directly, whatever the environment says.
        sdk = openai.AsyncOpenAI(base_url=route.base_url, api_key=route.secret, max_retries=0,
                                 http_client=openai.DefaultAsyncHttpx2Client(trust_env=False))
        if stream:
            async with await sdk.responses.create(model="m", input="hi there",
                                                  stream=True) as events:
                kinds = [e.type async for e in events]
            assert kinds[-1] == "response.completed"
        else:
            r = await sdk.responses.create(model="m", input="hi there")
            assert r.output_text == "echo: hi there"
        await sdk.close()
    await client.aclose()
    return calls


@pytest.mark.parametrize("stream", [False, True])
async def test_the_passthrough_tunnels_through_the_proxy_with_the_ca_bundle(
        transport: str, tls: TlsFront, ca: TestCA, proxy: ForwardProxy, model: ScriptedModel,
        monkeypatch: pytest.MonkeyPatch, stream: bool) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    ep = endpoint(tls.base_url, transport, ca_bundle=str(ca.bundle), headers={"X-Lab": "7"})
    calls = await forward_responses(ep, stream=stream)
    assert [c.error_type for c in calls] == [None]
    assert proxy.seen == [f"CONNECT 127.0.0.1:{tls.port} HTTP/1.1"]
    assert [(r.api, r.headers["x-lab"]) for r in model.requests] == [("responses", "7")]


async def test_the_passthrough_follows_a_307(transport: str, model: ScriptedModel) -> None:
    async with Redirector(model.base_url) as redirector:
        calls = await forward_responses(endpoint(redirector.url, transport))
    assert [c.error_type for c in calls] == [None] and redirector.hits == 1
    assert model.requests[0].body["input"] == "hi there"


# -- settings refused when they are made ---------------------------------------------------------

@pytest.fixture
def files(tmp_path: Path, ca: TestCA) -> Iterator[dict[str, str]]:
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    yield {"ca": str(ca.bundle), "cert": str(ca.client_cert), "key": str(ca.client_key),
           "not_pem": str(not_pem), "missing": str(tmp_path / "missing.pem")}


@pytest.mark.parametrize(("settings", "message"), [
    ({"proxy": "socks5://127.0.0.1:1080"},
     "model: proxy must be an http:// or https:// URL with a host, got 'socks5://127.0.0.1:1080'"),
    ({"base_url": "localhost:8000/v1"}, "model: base_url must be an http:// or https:// URL"),
    ({"headers": {"Content-Length": "3"}},
     "model: headers: Content-Length is set by the HTTP client itself; remove it"),
    ({"headers": {"X-Bad": "a\r\nInjected: 1"}}, "model: headers.X-Bad must be text on one line"),
    ({"headers": {"bad name": "x"}}, "model: headers: 'bad name' is not a valid header name"),
    ({"ca_bundle": "{missing}"}, "model: ca_bundle: '{missing}' is not a file"),
    ({"ca_bundle": "{not_pem}"}, "model: ca_bundle: '{not_pem}' holds no PEM CA certificate"),
    ({"client_key": "{key}"}, "model: client_key is set without client_cert; set client_cert"),
    ({"client_cert": "{not_pem}"}, "model: client_cert: '{not_pem}' with client_key None is not"),
    ({"transport": "requests"}, "model.transport: expected one of 'aiohttp', 'openai'"),
    ({"timeout_s": 0}, "model: timeout_s must be above 0, got 0"),
    ({"timeout_s": 120, "retry_max_s": 60},
     "model: retry_max_s (60) must exceed timeout_s (120), or a request that hangs is never "
     "retried; raise retry_max_s, lower timeout_s, or set max_retries = 0"),
])
def test_bad_endpoint_settings_are_refused_at_load(settings: dict[str, object], message: str,
                                                   files: dict[str, str]) -> None:
    model = {k: v.format(**files) if isinstance(v, str) else v for k, v in settings.items()}
    with pytest.raises(InterplayError) as refused:
        config.structure({"model": {"base_url": "http://127.0.0.1:8000/v1", **model}},
                         RunConfig)
    assert str(refused.value).startswith(message.format(**files))
    assert "\n" not in str(refused.value)


def test_good_tls_settings_and_no_retries_are_accepted(files: dict[str, str]) -> None:
    cfg = config.structure({"model": {
        "base_url": "https://127.0.0.1:8443/v1", "ca_bundle": files["ca"],
        "client_cert": files["cert"], "client_key": files["key"], "proxy": "http://p:3128",
        "headers": {"X-Lab": "7"}, "timeout_s": 900, "max_retries": 0}}, RunConfig)
    assert cfg.model.ssl_context() is not None and cfg.model.retry_budget_s == 900


def test_an_unset_budget_leaves_room_to_retry_one_hang() -> None:
    assert Endpoint().retry_budget_s == 2 * 120.0
    assert Endpoint(timeout_s=900.0, max_retries=2).retry_budget_s == 1800.0
    assert Endpoint(timeout_s=900.0, max_retries=0).retry_budget_s == 900.0
    assert Endpoint(timeout_s=900.0, retry_max_s=3600.0).retry_budget_s == 3600.0


def test_the_default_budget_leaves_room_to_retry_a_hang() -> None:
    ep = Endpoint()
    # A hang takes timeout_s; the longest first wait is a second: the retry must still fit.
    assert ep.timeout_s + 1.0 < ep.retry_budget_s
    with pytest.raises(InterplayError, match="must exceed timeout_s"):
        Endpoint(timeout_s=120.0, retry_max_s=60.0)


# -- the upstream's bytes, untouched -------------------------------------------------------------

#: Bodies as some server might write them: spaced, keys in its own order, non-ASCII escaped.
CHAT_BODY = (b'{"object": "chat.completion", "id": "chatcmpl-1", "created": 1, "model": "m",'
             b' "choices": [{"index": 0, "message": {"role": "assistant", "content": "caf\\u00e9'
             b' \\ud83d\\ude00"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1,'
             b' "completion_tokens": 2, "total_tokens": 3}}')
RESPONSE_BODY = (b'{"object": "response", "id": "resp_1", "status": "completed", "model": "m",'
                 b' "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status":'
                 b' "completed", "content": [{"type": "output_text", "text": "caf\\u00e9",'
                 b' "annotations": []}]}], "usage": {"input_tokens": 1, "output_tokens": 1,'
                 b' "total_tokens": 2}}')


async def fixed_bytes(scope: Any, receive: Any, send: Any) -> None:
    """An upstream answering every POST with the bytes above, as they are."""
    while (await receive()).get("more_body"):
        pass
    body = RESPONSE_BODY if scope["path"].endswith("/responses") else CHAT_BODY
    await asgi.send_bytes(send, 200, body)


@pytest.fixture
async def verbatim() -> AsyncIterator[str]:
    server = AsgiServer(fixed_bytes)
    await server.start()
    yield f"{server.url}/v1"
    await server.stop()


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_the_upstream_bytes_reach_the_program_and_the_record_untouched(
        transport: str, verbatim: str, api: str) -> None:
    ep = endpoint(verbatim, transport, api=api)
    direct = await call_once(ep)
    assert direct.response == CHAT_BODY
    assert assistant_message(direct).text == "café 😀"  # type: ignore[union-attr]
    calls: list[ModelCall] = []
    client = ModelClient(ep)
    path, sent = (("/responses", {"model": "m", "input": "hi"}) if api == "responses" else
                  ("/chat/completions", {"model": "m", "messages": [{"role": "user",
                                                                      "content": "hi"}]}))
    async with InterceptionServer() as srv, httpx.AsyncClient(trust_env=False) as http:
        route = srv.open_trace(client=client, on_call=calls.append)
        got = await http.post(route.base_url + path, json=sent,
                              headers={"Authorization": f"Bearer {route.secret}"})
    await client.aclose()
    expected = RESPONSE_BODY if api == "responses" else CHAT_BODY
    assert got.status_code == 200 and got.content == expected
    assert [c.response for c in calls] == [expected]
