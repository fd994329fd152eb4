"""Where a model lives and how to reach it: the endpoint config shared by agents, judges and the
run, checked when it is made (a bad setting is one line saying what to change, before any call).

It holds settings and what follows from them (the API key, the TLS context); it sends nothing:
the model boundary (:mod:`interplay.model`) does. A value the contracts speak in (a seat's
``model``, a judge's endpoint), so it sits beside them, below everything that calls a model.
"""

from __future__ import annotations

import os
import re
import ssl
from typing import Any, Literal
from urllib.parse import urlsplit

import attrs

from interplay.errors import InterplayError

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def redact_url(text: str) -> str:
    """``text`` with the credentials of any URL in it masked (``https://***@host``)."""
    return _USERINFO.sub(r"\1***@", text)


# A header name is an RFC 9110 token; a value must not break the request head.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\r\n\0]")
#: Headers the HTTP client sets from the request itself: two framings are request smuggling.
_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection"})


@attrs.define
class Endpoint:
    """An OpenAI-compatible endpoint.

    ``base_url`` None means the embedded local model (started on demand). The API key is read
    from the environment variable named by ``api_key_var``, never stored in config. A
    ``base_url`` with credentials (``user:password@``) is sent with them as HTTP Basic auth
    instead of a key; they are masked wherever the URL is shown or stored.

    ``api`` is what the endpoint serves to programs that speak Responses (the codex CLI):
    "chat" (Chat Completions only, like vLLM and llama.cpp: their Responses requests are
    translated) or "responses" (the Responses API too, like OpenAI: their requests are
    forwarded as they are). interplay's own calls use Chat Completions either way.

    Each attempt waits up to ``timeout_s`` for the endpoint (to connect: at most 10 s; then
    for each read of its answer, so a stream may last longer). A transient failure (429, 5xx,
    a timeout, a broken connection) is retried up to ``max_retries`` times within
    ``retry_max_s`` from the call's start; unset, that budget is ``(max_retries + 1) *
    timeout_s``, room for every attempt to hang. Set, it must exceed ``timeout_s``: a request
    that hangs is retried like any other failure.

    ``transport`` is what sends: "aiohttp" (the default) or "openai", the openai SDK's own
    client (for what only it does, such as its typed errors). Both honour ``HTTP_PROXY``,
    ``HTTPS_PROXY`` and ``NO_PROXY`` unless ``proxy`` names one, follow redirects, and use
    ``ca_bundle`` (PEM file of the CAs to trust instead of the system's; unset, both honour
    ``SSL_CERT_FILE``), ``client_cert`` and
    ``client_key`` (PEM files; the key may be in the certificate's file) and ``headers`` (sent
    with every request, after the client's own, so they may replace ``Authorization``).

    ``capture_tokens`` asks, on every call of a trainable seat (direct or through the
    interception server, streamed or not), for the token ids and logprobs the endpoint
    computed (vLLM's ``return_token_ids`` and ``logprobs``: :mod:`interplay.model.tokens`) and
    records them on each call's ``tokens``. An endpoint that does not return them is recorded
    as such; one that refuses the fields fails the call with a line saying so.

    ``continue_tokens`` (with ``capture_tokens``) sends each call of a trace after its first
    the ids the previous call read and sampled, as ``required_prefix_token_ids``: an endpoint
    that takes the field (the embedded model's server; a vLLM server with NeMo RL's chat
    preprocessing) continues from them instead of re-tokenizing the conversation, so the
    trace stays one token sequence. Other endpoints ignore it; a call whose prompt then leaves
    the previous ids records where (``tokens.diverged_at``).
    """

    base_url: str | None = attrs.field(
        default=None, repr=lambda url: repr(url if url is None else redact_url(url)))
    model: str = "default"
    api_key_var: str | None = None
    sampling: dict[str, Any] = attrs.Factory(dict)
    timeout_s: float = 120.0
    max_retries: int = 4
    retry_max_s: float | None = None
    api: Literal["chat", "responses"] = "chat"
    transport: Literal["aiohttp", "openai"] = "aiohttp"
    headers: dict[str, str] = attrs.Factory(dict)
    proxy: str | None = attrs.field(
        default=None, repr=lambda url: repr(url if url is None else redact_url(url)))
    ca_bundle: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    capture_tokens: bool = False
    continue_tokens: bool = True

    def __attrs_post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            raise InterplayError(problem)

    def api_key(self) -> str:
        if not self.api_key_var:
            return "none"
        value = os.environ.get(self.api_key_var)
        if value is None:
            raise InterplayError(
                f"model.api_key_var names {self.api_key_var!r}, which is not set; "
                f"export {self.api_key_var}=... or change model.api_key_var"
            )
        return value

    @property
    def is_local(self) -> bool:
        return self.base_url is None

    @property
    def retry_budget_s(self) -> float:
        """Seconds from a call's start within which its retries must begin."""
        if self.retry_max_s is not None:
            return self.retry_max_s
        return (self.max_retries + 1) * self.timeout_s

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context ``ca_bundle`` and ``client_cert`` ask for; None when neither is
        set (the HTTP client's default, the system's CAs)."""
        if self.ca_bundle is None and self.client_cert is None:
            return None
        context = ssl.create_default_context(cafile=self.ca_bundle)
        if self.client_cert is not None:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def _url_problem(name: str, value: str) -> str | None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{name} must be an http:// or https:// URL with a host, got {value!r}"
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return f"{name} has a bad port: {value!r}"
    return None


def _problem(ep: Endpoint) -> str | None:
    """What is wrong with ``ep``'s settings, as one line naming the key, or None."""
    if ep.base_url is not None and (problem := _url_problem("base_url", ep.base_url)):
        return problem
    if ep.proxy is not None and (problem := _url_problem("proxy", ep.proxy)):
        return problem
    if ep.base_url is not None and ep.api_key_var and urlsplit(ep.base_url).username is not None:
        return ("base_url carries credentials (user:password@) and api_key_var is set: both "
                "would be the Authorization header; remove one")
    if not ep.timeout_s > 0:
        return f"timeout_s must be above 0, got {ep.timeout_s}"
    if ep.max_retries < 0:
        return f"max_retries must be 0 or more, got {ep.max_retries}"
    if ep.max_retries > 0 and ep.retry_max_s is not None and not ep.retry_max_s > ep.timeout_s:
        return (f"retry_max_s ({ep.retry_max_s:g}) must exceed timeout_s ({ep.timeout_s:g}), "
                f"or a request that hangs is never retried; raise retry_max_s, lower "
                f"timeout_s, or set max_retries = 0")
    for name, value in ep.headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            return f"headers: {name!r} is not a valid header name"
        if name.lower() in _FRAMING:
            return f"headers: {name} is set by the HTTP client itself; remove it"
        if not isinstance(value, str) or _BAD_VALUE.search(value):
            return f"headers.{name} must be text on one line"
    if ep.client_key is not None and ep.client_cert is None:
        return "client_key is set without client_cert; set client_cert too"
    for name in ("ca_bundle", "client_cert", "client_key"):
        path = getattr(ep, name)
        if path is not None and not os.path.isfile(path):
            return f"{name}: {path!r} is not a file"
    try:
        if ep.ca_bundle is not None:
            ssl.create_default_context(cafile=ep.ca_bundle)
    except (ssl.SSLError, ValueError) as exc:
        return f"ca_bundle: {ep.ca_bundle!r} holds no PEM CA certificate ({_reason(exc)})"
    try:
        if ep.client_cert is not None:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(ep.client_cert,
                                                                    ep.client_key)
    except (ssl.SSLError, ValueError) as exc:
        return (f"client_cert: {ep.client_cert!r} with client_key {ep.client_key!r} is not a "
                f"PEM certificate and its key ({_reason(exc)})")
    return None


def _reason(exc: Exception) -> str:
    return str(getattr(exc, "reason", None) or exc)
