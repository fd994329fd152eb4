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
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import attrs
import cattrs

from interplay.config import loading as config
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


@attrs.define(frozen=True)
class Sampling:
    """The sampling settings interplay knows (``model.sampling``, a seat's ``sampling``): each
    is checked for its type when the config loads and sent as the request field of its name;
    unset, it is not sent and the endpoint's own default holds. The embedded model's
    defaults are given per setting. A provider's own field is no sampling setting: it goes in
    ``model.extra_body``, sent as it is."""

    #: Randomness of sampling, 0 for the likeliest token (embedded model: 0.2).
    temperature: float | None = None
    #: Nucleus sampling: the smallest set of tokens whose probability reaches it
    #: (embedded model: 0.95).
    top_p: float | None = None
    #: The reply's tokens at most (embedded model: 512).
    max_tokens: int | None = None
    #: The same limit under the newer OpenAI name (reasoning models count their reasoning in
    #: it); the embedded model reads it as max_tokens.
    max_completion_tokens: int | None = None
    #: Text that ends the reply where it appears, one string or several (embedded model: none).
    stop: str | list[str] | None = None
    #: Seed of the sampler, for repeatable replies where the endpoint honours it
    #: (embedded model: a random one per request).
    seed: int | None = None
    #: Penalty for tokens already present, -2 to 2 (embedded model: 0).
    presence_penalty: float | None = None
    #: Penalty growing with a token's count so far, -2 to 2 (embedded model: 0).
    frequency_penalty: float | None = None
    #: Token id (as text) to a bias added to its logit (the embedded model ignores it).
    logit_bias: dict[str, float] | None = None
    #: How much a reasoning model reasons: "minimal", "low", "medium" or "high"
    #: (the embedded model does not reason).
    reasoning_effort: str | None = None
    #: The reply's format, e.g. ``{type = "json_object"}`` (the embedded model ignores it).
    response_format: dict[str, Any] | None = None
    #: Whether the model may call several tools in one reply (the embedded model calls one).
    parallel_tool_calls: bool | None = None
    #: Sample from the k likeliest tokens only (llama.cpp, vLLM; embedded model: 40).
    top_k: int | None = None
    #: Drop tokens less likely than this fraction of the likeliest (llama.cpp, vLLM;
    #: embedded model: 0.05).
    min_p: float | None = None
    #: llama.cpp's penalty for repeating recent tokens, 1 for none (embedded model: 1.0).
    repeat_penalty: float | None = None
    #: vLLM's penalty for repeating tokens, 1 for none.
    repetition_penalty: float | None = None


def sampling_problem(values: Any, where: str) -> str | None:
    """What is wrong with sampling settings ``values`` (a table given at ``where``), as one
    line naming the key and the settings known, or None."""
    if not isinstance(values, dict):
        return f"{where}: expected a table, got {values!r}"
    known = [f.name for f in attrs.fields(Sampling)]
    for key, value in values.items():
        if key not in known:
            return (f"{where}.{key}: not a sampling setting interplay knows ({', '.join(known)}); "
                    f"a field of your provider's own goes in model.extra_body, sent as it is")
        if value is None:
            continue
        try:
            config.structure({key: value}, Sampling, path=where)
        except InterplayError as exc:
            return exc.message
    return None


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
    for each read of its answer, so a stream may last longer); a streamed answer must begin
    (its first byte, the status line: servers send it once they hold the request, before its
    queue and prefill) within ``first_byte_timeout_s``. A transient failure (429, 5xx, a
    timeout, a broken connection) is retried up to ``max_retries`` times within
    ``retry_max_s`` from the call's start; unset, that budget is ``2 * timeout_s`` (one
    ``timeout_s`` with ``max_retries = 0``): room to retry one hang, and a call that keeps
    failing ends well inside a seat's turn. Set, it must exceed ``timeout_s``: a request that
    hangs is retried like any other failure. An endpoint that twice in a row began no answer
    in time is not asked a third time: it accepts requests and answers none.

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

    ``sampling`` holds the settings of :class:`Sampling`, checked when the config loads (an
    unknown key is refused, naming the known ones); ``extra_body`` holds fields of the
    provider's own (vLLM's ``guided_json``, a gateway's routing hints), unchecked and sent in
    every request's body as they are, over ``sampling``. A seat's sampling is laid in one
    order (:func:`interplay.run.episode.seat_settings`): the env's defaults for the seat, then
    this ``sampling``, then the seat's own; what the run sets always wins over the env.

    A seat's own ``model`` table starts from the run's endpoint, key by key
    (:func:`seat_endpoint`): a seat that sets only ``base_url`` keeps the run's model name,
    sampling, timeouts and retries. Pointed at another server than the run's, it keeps none
    of the run's credentials (``api_key_var``, ``headers``, the client certificate) nor what
    that server speaks (``api``, ``extra_body``).

    ``continue_tokens`` (with ``capture_tokens``) sends each call of a trace after its first
    the ids the previous call read and sampled, as ``required_prefix_token_ids``: an endpoint
    that takes the field (the embedded model's server; a vLLM server with NeMo RL's chat
    preprocessing) continues from them instead of re-tokenizing the conversation, so the
    trace stays one token sequence. Other endpoints ignore it; a call whose prompt then leaves
    the previous ids records where (``tokens.diverged_at``).
    """

    #: The endpoint's OpenAI-compatible base URL (https://host/v1); None: the embedded local model,
    #: started on demand.
    base_url: str | None = attrs.field(
        default=None, repr=lambda url: repr(url if url is None else redact_url(url)))
    #: The model name sent with every request.
    model: str = "default"
    #: The environment variable holding the API key (never the key itself); None sends none.
    api_key_var: str | None = None
    #: Sampling settings sent with every chat completion (a seat's: over the env's defaults
    #: for the seat, under seats.<seat>.sampling): the keys of Sampling (listed below, each
    #: with the embedded model's default), checked when the config loads; a provider's own
    #: field goes in extra_body.
    sampling: dict[str, Any] = attrs.Factory(dict)
    #: Seconds each attempt waits to connect (at most 10) and for each read of the answer.
    timeout_s: float = 120.0
    #: Seconds a streamed call waits for its answer to begin (the first byte: servers send it
    #: once they hold the request, before queueing and prefill), at most timeout_s; a
    #: non-streamed answer begins only when whole, so it has timeout_s. Two attempts in a row
    #: that began no answer end the call.
    first_byte_timeout_s: float = 60.0
    #: Times a transient failure (429, 5xx, a timeout, a broken connection) is retried.
    max_retries: int = 4
    #: Seconds from the call's start within which retries may begin; None: 2 x timeout_s
    #: (timeout_s with max_retries = 0). Set, it must exceed timeout_s.
    retry_max_s: float | None = None
    #: What the endpoint serves to programs that speak Responses (codex): chat (Chat Completions
    #: only; their requests are translated) or responses (forwarded as they are).
    api: Literal["chat", "responses"] = "chat"
    #: What sends the requests: aiohttp, or the openai SDK's own client.
    transport: Literal["aiohttp", "openai"] = "aiohttp"
    #: Headers sent with every request, after the client's own (so they may replace Authorization).
    headers: dict[str, str] = attrs.Factory(dict)
    #: The proxy to send through; None: HTTP_PROXY, HTTPS_PROXY and NO_PROXY from the environment.
    proxy: str | None = attrs.field(
        default=None, repr=lambda url: repr(url if url is None else redact_url(url)))
    #: A PEM file of the CAs to trust instead of the system's (None: SSL_CERT_FILE, else the
    #: system's).
    ca_bundle: str | None = None
    #: A PEM client certificate for TLS (the key may be in the same file).
    client_cert: str | None = None
    #: The PEM file of the client certificate's key, when it is not in client_cert.
    client_key: str | None = None
    #: Record the token ids and logprobs the endpoint computed (vLLM's return_token_ids and
    #: logprobs) on every call of a trainable seat.
    capture_tokens: bool = False
    #: Fields of the provider's own (vLLM's guided_json, say), sent unchecked in every
    #: request's body after ``sampling``.
    extra_body: dict[str, Any] = attrs.Factory(dict)
    #: With capture_tokens, send each call of a trace the ids its previous call read and
    #: sampled (required_prefix_token_ids), for the endpoint to continue from them rather than
    #: re-tokenize the conversation.
    continue_tokens: bool = True
    # The keys of the config table this endpoint was structured from (None: made in code,
    # every field meant as it is): what :meth:`over` lays over the run's endpoint.
    _given: frozenset[str] | None = attrs.field(
        default=None, init=False, eq=False, repr=False, metadata={config.GIVEN_KEYS: True})

    def __attrs_post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            raise InterplayError(problem)

    def over(self, run: Endpoint) -> Endpoint:
        """This endpoint as a judge, a user sim or any setting of its own reaches it: a config
        table (``judge = {model = "gpt-4o"}``) laid over the run's endpoint key by key, as a
        seat's model table is (:func:`seat_endpoint`), so a judge that names only its model
        keeps the run's server, key and timeouts; an endpoint made in code, as it is."""
        if self._given is None or self is run:
            return self
        mine = cattrs.Converter().unstructure(self)
        return config.structure(seat_endpoint(run, {k: mine[k] for k in self._given}),
                                Endpoint)

    def api_key(self) -> str | None:
        """The key read from ``api_key_var``; None without one (no key is sent then, not a
        made-up one: a server that wants none must not be told ``Bearer none``)."""
        if not self.api_key_var:
            return None
        value = os.environ.get(self.api_key_var)
        if value is None:
            raise InterplayError(
                f"model.api_key_var names {self.api_key_var!r}, which is not set; "
                f"export {self.api_key_var}=... or change model.api_key_var"
            )
        return value

    @property
    def body_fields(self) -> dict[str, Any]:
        """What every request's body carries from here: ``sampling``, then ``extra_body``."""
        if not self.extra_body:
            return self.sampling
        return {**self.sampling, **self.extra_body}

    @property
    def is_local(self) -> bool:
        return self.base_url is None

    @property
    def retry_budget_s(self) -> float:
        """Seconds from a call's start within which its retries must begin."""
        if self.retry_max_s is not None:
            return self.retry_max_s
        # Room to retry one hang; (max_retries + 1) x timeout_s was the seat's whole turn.
        return min(self.max_retries + 1, 2) * self.timeout_s

    def first_byte_s(self, stream: bool) -> float:
        """Seconds an attempt waits for its answer's first byte: a stream's
        ``first_byte_timeout_s`` (at most ``timeout_s``), a whole answer's ``timeout_s``."""
        return min(self.first_byte_timeout_s, self.timeout_s) if stream else self.timeout_s

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
    if problem := sampling_problem(ep.sampling, "sampling"):
        return problem
    if not isinstance(ep.extra_body, dict):
        return f"extra_body: expected a table, got {ep.extra_body!r}"
    if ep.base_url is not None and (problem := _url_problem("base_url", ep.base_url)):
        return problem
    if ep.proxy is not None and (problem := _url_problem("proxy", ep.proxy)):
        return problem
    if ep.base_url is not None and ep.api_key_var and urlsplit(ep.base_url).username is not None:
        return ("base_url carries credentials (user:password@) and api_key_var is set: both "
                "would be the Authorization header; remove one")
    if not ep.timeout_s > 0:
        return f"timeout_s must be above 0, got {ep.timeout_s}"
    if not ep.first_byte_timeout_s > 0:
        return f"first_byte_timeout_s must be above 0, got {ep.first_byte_timeout_s}"
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


#: What a seat's own endpoint keeps of the run's only when both are the same server (scheme,
#: host and port): credentials, and what that server speaks. A seat pointed elsewhere never
#: sends the run's key, headers or client certificate there.
SAME_SERVER_ONLY = ("api_key_var", "headers", "client_cert", "client_key", "api", "extra_body")


def _origin(url: str | None) -> tuple[str, str, int | None] | None:
    if url is None:
        return None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port or default


def seat_endpoint(run: Endpoint, table: Mapping[str, Any]) -> dict[str, Any]:
    """A seat's ``model`` table laid over the run's endpoint, key by key (``sampling`` and
    ``headers`` too): a seat that names only its ``base_url`` keeps the run's model name,
    sampling, timeouts and retries. When its ``base_url`` is another server than the run's,
    the run's credentials and what its server speaks (:data:`SAME_SERVER_ONLY`) stay behind.
    Plain data, for :func:`interplay.config.loading.structure` into an Endpoint."""
    base = cattrs.Converter().unstructure(run)
    if "base_url" in table and _origin(table.get("base_url")) != _origin(run.base_url):
        for key in SAME_SERVER_ONLY:
            base.pop(key, None)
    return config.merge(base, table)
