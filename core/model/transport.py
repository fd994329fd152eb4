"""What sends a model request: one pooled HTTP session per endpoint, and the answer it gives.

:func:`open_transport` makes the endpoint's transport: aiohttp's client by default, or the
openai SDK's own (``AsyncOpenAI`` over httpx2) when ``Endpoint.transport`` is "openai". Either
posts JSON under the endpoint's base URL with its key, headers, proxy and TLS settings,
follows redirects (a 307 or 308 sends the body again), and gives back an :class:`UpstreamResponse`
(status, headers, the body whole or as it arrives) or raises a
:class:`~interplay.model.retries.Failure`: ``timeout``, ``connection_error``, or the answer's
own error status with its body. What to do with an answer, and whether to try again, is the
caller's.

A transport belongs to the event loop that first uses it; once that loop is closed, the next
use starts afresh on the new loop. It logs nothing: headers and bodies carry keys and user data.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import urllib.request
import warnings
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
import yarl

from interplay.config.endpoint import Endpoint, redact_url
from interplay.errors import ErrorType, InterplayError
from interplay.model.retries import Failure

if TYPE_CHECKING:
    import httpx2
    import openai


def _broken(exc: BaseException, while_: str, *, timed_out: bool) -> Failure:
    """A failed exchange as a ``timeout`` or ``connection_error`` Failure whose message
    names the cause (credentials in a URL masked). A certificate the endpoint's CAs do not
    trust will not be trusted on the next try either: that failure is final."""
    if timed_out:
        return Failure(ErrorType.TIMEOUT, f"timed out {while_}")
    chain = [exc]
    while len(chain) < 10 and (chain[-1].__cause__ or chain[-1].__context__) is not None:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)  # type: ignore[arg-type]
    named = next((e for e in chain if str(e)), exc)
    failure = Failure(ErrorType.CONNECTION_ERROR, f"connection error {while_}: "
                      f"{redact_url(str(named)) or type(named).__name__}")
    failure.final = any(isinstance(e, ssl.SSLCertVerificationError) for e in chain) or \
        isinstance(exc, aiohttp.ClientConnectorCertificateError)
    return failure


def unanswered(base_url: str, waited_s: float, setting: str) -> Failure:
    """The ``timeout`` of an attempt whose request was sent and whose answer never began: it
    names the endpoint and the setting that bounded the wait, and is marked ``unanswered``
    (:class:`~interplay.model.retries.RetryPolicy` asks such an endpoint once more, not again)."""
    failure = Failure(ErrorType.TIMEOUT, f"{redact_url(base_url)} began no answer within "
                                 f"{waited_s:g} s of the request ({setting})")
    failure.unanswered = True
    return failure


def env_proxy(url: str) -> str | None:
    """The proxy ``HTTP_PROXY``/``HTTPS_PROXY`` name for ``url``, unless ``NO_PROXY`` covers
    its host (the standard library's reading of those variables)."""
    parts = urlsplit(url)
    if parts.hostname is None or urllib.request.proxy_bypass(parts.hostname):
        return None
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy is not None and urlsplit(proxy).scheme not in ("http", "https"):
        raise InterplayError(f"{parts.scheme.upper()}_PROXY names {redact_url(proxy)!r}: only "
                             "http:// and https:// proxies are supported; change it, or set "
                             "model.proxy or NO_PROXY")
    return proxy


class UpstreamResponse:
    """An answer with a status below 400, its body not yet read. Read it once, whole
    (:meth:`read`) or as it arrives (:meth:`chunks`), then :meth:`close` it."""

    status: int
    headers: Mapping[str, str]

    async def read(self) -> bytes:
        raise NotImplementedError

    def chunks(self) -> AsyncGenerator[bytes, None]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class Transport:
    """Sends an endpoint's requests from one event loop (see the module docstring)."""

    def __init__(self, endpoint: Endpoint, max_connections: int) -> None:
        if endpoint.base_url is None:
            raise ValueError("a transport needs an endpoint with a base_url")
        self.endpoint = endpoint
        self.max_connections = max(1, int(max_connections))
        url = yarl.URL(endpoint.base_url)
        #: What the Authorization header says; None (no header) without a key or credentials.
        self.authorization: str | None = None
        if url.user is not None:
            # Credentials in the URL are sent as HTTP Basic auth, as curl sends them, and the
            # URL goes on without them (so no client sees them in a URL it might show).
            self.base_url = str(url.with_user(None)).rstrip("/")
            basic = f"{url.user}:{url.password or ''}".encode()
            self.authorization = f"Basic {base64.b64encode(basic).decode('ascii')}"
        else:
            self.base_url = endpoint.base_url.rstrip("/")
            key = endpoint.api_key()
            if key is not None:
                self.authorization = f"Bearer {key}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None

    def client(self) -> Any:
        """The HTTP client of the running loop, made on first use."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._loop is not None and not self._loop.is_closed():
                raise InterplayError("this model client is in use from another event loop; "
                                     "make one client per event loop")
            # The old loop is closed, and its connections with it: nothing left to close.
            self._loop, self._client = loop, self._make_client()
        return self._client

    def _make_client(self) -> Any:
        raise NotImplementedError

    async def post(self, path: str, body: Mapping[str, Any], payload: bytes, *,
                   stream: bool) -> UpstreamResponse:
        """POST ``payload`` (``body`` encoded) to ``path`` under the base URL (a whole URL,
        such as one of :meth:`root_url`'s, is taken as it is). The answer must begin within
        :meth:`Endpoint.first_byte_s`, else a :func:`unanswered` timeout."""
        raise NotImplementedError

    def unanswered(self, stream: bool) -> Failure:
        setting = "first_byte_timeout_s" if stream and \
            self.endpoint.first_byte_timeout_s < self.endpoint.timeout_s else "timeout_s"
        return unanswered(self.base_url, self.endpoint.first_byte_s(stream), setting)

    def root_url(self, path: str) -> str:
        """``path`` at the server's root: the base URL without its ``/v1`` (vLLM serves
        ``/tokenize`` there, beside ``/v1``)."""
        base = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        return base + path

    async def aclose(self) -> None:
        """Close the client, in the loop it belongs to (an interception server serving from
        a thread uses its clients in its own loop)."""
        client, loop, self._client, self._loop = self._client, self._loop, None, None
        if client is None or loop is None:
            return
        if loop is asyncio.get_running_loop():
            await self._close_client(client)
        elif loop.is_running():
            await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(self._close_client(client), loop))

    async def _close_client(self, client: Any) -> None:
        raise NotImplementedError


def open_transport(endpoint: Endpoint, max_connections: int = 64) -> Transport:
    """The transport ``endpoint.transport`` names."""
    if endpoint.transport == "openai":
        return OpenAITransport(endpoint, max_connections)
    return AiohttpTransport(endpoint, max_connections)


# -- aiohttp -------------------------------------------------------------------------------------

class _AiohttpResponse(UpstreamResponse):
    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    async def read(self) -> bytes:
        try:
            content = self._resp.content
            if content.is_eof():
                # Came whole with the headers (most answers do): taken as it is, with no
                # coroutine to wait on.
                return content.read_nowait()
            return await self._resp.read()
        except (aiohttp.ClientError, OSError) as exc:
            raise _broken(exc, "reading the answer",
                          timed_out=isinstance(exc, TimeoutError)) from None

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        try:
            async for piece in self._resp.content.iter_any():
                yield piece
        except (aiohttp.ClientError, OSError) as exc:
            raise _broken(exc, "reading the answer",
                          timed_out=isinstance(exc, TimeoutError)) from None

    async def close(self) -> None:
        if not self._resp.closed:  # else read to its end, its connection back in the pool
            self._resp.release()


class AiohttpTransport(Transport):
    """aiohttp's client: a session per endpoint and loop, keeping up to ``max_connections``
    connections.

    The proxy is the endpoint's, else the one the environment names for the base URL, read
    once when the session is made: aiohttp's ``trust_env`` reads it (and ~/.netrc) again on
    every request, in worker threads, which costs more than the rest of the request.
    """

    def __init__(self, endpoint: Endpoint, max_connections: int) -> None:
        super().__init__(endpoint, max_connections)
        base = {"Content-Type": "application/json"}
        if self.authorization is not None:
            base["Authorization"] = self.authorization
        self._headers = {False: {**base, "Accept": "application/json", **endpoint.headers},
                         True: {**base, "Accept": "text/event-stream", **endpoint.headers}}
        self._timeout = aiohttp.ClientTimeout(total=None,
                                              sock_connect=min(10.0, endpoint.timeout_s),
                                              sock_read=endpoint.timeout_s)

    def _make_client(self) -> aiohttp.ClientSession:
        ep = self.endpoint
        proxy = ep.proxy or env_proxy(self.base_url)
        proxy_auth = None
        if proxy is not None:
            url = yarl.URL(proxy)
            proxy_auth = aiohttp.BasicAuth.from_url(url)
            proxy = str(url.with_user(None))
        connector = aiohttp.TCPConnector(limit=self.max_connections,
                                         ssl=ep.ssl_context() or True)
        with warnings.catch_warnings():
            # Deprecated for proxy_headers, which aiohttp 3 sends only with a CONNECT: a
            # plain request through the proxy would go without its credentials.
            warnings.simplefilter("ignore", DeprecationWarning)
            return aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                         proxy=proxy, proxy_auth=proxy_auth,
                                         cookie_jar=aiohttp.DummyCookieJar())

    async def post(self, path: str, body: Mapping[str, Any], payload: bytes, *,
                   stream: bool) -> UpstreamResponse:
        session: aiohttp.ClientSession = self.client()
        try:
            url = path if path.startswith(("http://", "https://")) else self.base_url + path
            # sock_read (timeout_s) bounds the wait for the head too; a stream's first byte
            # has its own, shorter limit.
            async with asyncio.timeout(self.endpoint.first_byte_s(stream)):
                resp = await session.post(url, data=payload, headers=self._headers[stream])
        except aiohttp.ConnectionTimeoutError as exc:
            raise _broken(exc, "connecting", timed_out=True) from None
        except TimeoutError:
            raise self.unanswered(stream) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise _broken(exc, "sending the request", timed_out=False) from None
        if resp.status < 400:
            return _AiohttpResponse(resp)
        try:
            content = await resp.read()
        except (aiohttp.ClientError, OSError):
            content = b""
        finally:
            resp.release()
        raise Failure.from_status(resp.status, content, resp.headers)

    async def _close_client(self, client: aiohttp.ClientSession) -> None:
        await client.close()


# -- the openai SDK ------------------------------------------------------------------------------

class _HttpxResponse(UpstreamResponse):
    def __init__(self, resp: httpx2.Response) -> None:
        self._resp = resp
        self.status = resp.status_code
        self.headers = resp.headers

    async def read(self) -> bytes:
        import httpx2

        try:
            return await self._resp.aread()
        except (httpx2.TransportError, httpx2.StreamError, OSError) as exc:
            raise _broken(exc, "reading the answer", timed_out=isinstance(
                exc, httpx2.TimeoutException | TimeoutError)) from None

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        import httpx2

        try:
            async for piece in self._resp.aiter_bytes():
                yield piece
        except (httpx2.TransportError, httpx2.StreamError, OSError) as exc:
            raise _broken(exc, "reading the answer", timed_out=isinstance(
                exc, httpx2.TimeoutException | TimeoutError)) from None

    async def close(self) -> None:
        await self._resp.aclose()


class OpenAITransport(Transport):
    """The openai SDK's client (``AsyncOpenAI``, its own retries off: the policy is ours).
    Its typed errors are told apart here; the answer's bytes are read raw, as aiohttp's are."""

    def _make_client(self) -> openai.AsyncOpenAI:
        import httpx2
        import openai

        ep = self.endpoint
        timeout = httpx2.Timeout(ep.timeout_s, connect=min(10.0, ep.timeout_s))
        limits = httpx2.Limits(max_connections=self.max_connections,
                               max_keepalive_connections=self.max_connections)
        http = openai.DefaultAsyncHttpx2Client(timeout=timeout, limits=limits, proxy=ep.proxy,
                                               verify=ep.ssl_context() or True)
        # The SDK's own Authorization (a Bearer of its api_key) is replaced by ours, or left
        # out when there is none.
        auth = openai.Omit() if self.authorization is None else self.authorization
        return openai.AsyncOpenAI(base_url=self.base_url, api_key="unused",
                                  default_headers={"Authorization": auth, **ep.headers},
                                  max_retries=0, timeout=timeout, http_client=http)

    async def post(self, path: str, body: Mapping[str, Any], payload: bytes, *,
                   stream: bool) -> UpstreamResponse:
        import httpx2
        import openai

        client: openai.AsyncOpenAI = self.client()
        accept = "text/event-stream" if stream else "application/json"
        try:
            # The read timeout (timeout_s) bounds the wait for the head too; a stream's first
            # byte has its own, shorter limit.
            async with asyncio.timeout(self.endpoint.first_byte_s(stream)):
                resp = await client.post(path, cast_to=httpx2.Response, body=body,
                                         stream=True, options={"headers": {
                                             "Accept": accept, **self._no_authorization()}})
        except TimeoutError:
            raise self.unanswered(stream) from None
        except openai.APIStatusError as exc:
            raise Failure.from_status(exc.status_code, exc.response.content,
                                      exc.response.headers) from None
        except openai.APIConnectionError as exc:  # APITimeoutError is one too
            cause = exc.__cause__ or exc
            if isinstance(cause, httpx2.ReadTimeout):
                raise self.unanswered(stream) from None
            raise _broken(cause, "connecting" if isinstance(cause, httpx2.ConnectTimeout)
                          else "sending the request",
                          timed_out=isinstance(exc, openai.APITimeoutError)) from None
        return _HttpxResponse(resp)

    def _no_authorization(self) -> dict[str, Any]:
        """Without a key (and no Authorization among the endpoint's headers), the request's
        header left out, as the SDK asks to be told: it refuses a request with none."""
        import openai

        if self.authorization is not None or any(
                k.lower() == "authorization" for k in self.endpoint.headers):
            return {}
        return {"Authorization": openai.Omit()}

    async def _close_client(self, client: openai.AsyncOpenAI) -> None:
        await client.close()
