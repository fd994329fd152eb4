"""A scripted OpenAI-compatible model server: a test double for the MODEL, over real HTTP.

It answers Chat Completions and Responses requests (streamed and not), ``GET /v1/models`` and
vLLM's ``POST /tokenize`` (a conversation's prompt counted as its usage would count it) from a
script: a list of :class:`ScriptedReply` consumed in order, or a handler called with each
:class:`ScriptedRequest`. Replies can carry text, tool calls, Responses output items, latency and
injected faults (an HTTP status with Retry-After, a hang, a dropped stream, malformed output).
The requests received are kept in ``requests``, within a bound (the first ``keep_requests`` of
them and ``keep_bytes`` of their bodies, by default: a long run on it, a month of always_on wakes
each resending its conversation, would otherwise hold every body it was ever sent); ``keep``
keeps only the requests a test asks for; ``received`` counts them all and ``last`` is the latest.
``abandoned`` counts hung requests whose client gave up (closed the connection). Usage figures
count words.

Run it in-process (``with ScriptedModel(script) as m:`` / ``async with``; the server lives in a
background thread with its own loop) or as a process, which prints its base URL and then serves:
``python -m interplay.testing.scripted [--port N] [--script FILE [--repeat]]``. Without a script
it echoes the last user message; a script file
(:func:`interplay.testing.script_file.read_script`) is a JSON array or a JSONL
file of replies, each a string (the reply's text) or an object::

    {"content": "I will look it up.", "tool_calls": [{"name": "find_order",
     "arguments": {"order_id": "1042"}}], "latency_s": 0.2}
    {"status": 429, "retry_after": 1}          # a fault; also "hangs", "drops", "malformed"

Replies are served in order; past the end of the script every request is answered 500, or with
``--repeat`` the script starts over.

This module owns the server: its life, taking the script's next reply, the routes and the
faults. An answer's shape is :mod:`interplay.testing.answers`', the token ids and logprobs on
it :mod:`interplay.testing.tokens`'.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from interplay._plumbing import aio, asgi
from interplay._plumbing import codec as _codec
from interplay._plumbing.listener import AsgiServer
from interplay.config.endpoint import Endpoint
from interplay.model import responses as rs
from interplay.testing import answers
from interplay.testing import tokens as tk
from interplay.testing.script import (
    Handler,
    Script,
    ScriptedReply,
    ScriptedRequest,
    ScriptedTokenizer,
    ScriptedToolCall,
    echo,
)

__all__ = ["Handler", "Script", "ScriptedModel", "ScriptedReply", "ScriptedRequest",
           "ScriptedTokenizer", "ScriptedToolCall", "echo", "main"]


class _Dropped(Exception):
    """Raised inside the app to make a server other than uvicorn cut the connection."""


async def _whole(send: asgi.Send, receive: asgi.Receive, reply: ScriptedReply,
                 data: Mapping[str, Any]) -> None:
    """A non-streamed answer: the JSON body, or (a dropping reply) its first bytes and then a
    cut connection."""
    if reply.drops:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [*asgi.JSON_HEADERS, (b"content-length", b"100000")]})
        await send({"type": "http.response.body", "body": b'{"id": "x", ', "more_body": True})
        await _cut(send, receive)
        return
    await asgi.send_json(send, 200, data)


async def _cut(send: asgi.Send, receive: asgi.Receive) -> None:
    """Cut the connection mid-response, as a crashed or unplugged model server would.

    Raising through uvicorn would do it too, with an "Exception in ASGI application"
    traceback on stderr; closing the connection ourselves is quiet. The client sees the same:
    what was sent so far, then the connection closing.
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise _Dropped
    transport.close()
    # Return once the connection is gone: uvicorn then takes the unfinished response for the
    # client's doing and logs nothing.
    while (await receive())["type"] != "http.disconnect":
        pass


class ScriptedModel:
    """An OpenAI-compatible server on 127.0.0.1 answering from a script (see the module
    docstring): a model's test double for real HTTP clients, in-process or in a subprocess.

    ``script`` is a list of replies (:class:`ScriptedReply`, or strings), answered in order,
    or a request function ``(ScriptedRequest) -> ScriptedReply | str`` answering each request
    from what it holds; None echoes the last user message. ``model`` is the name its
    :attr:`endpoint` sends; ``port`` 0 takes a free one. Use it as a context manager (``with``
    or ``async with``): ``base_url`` is then its address, and ``requests`` what it received.

    ``requests`` keeps the first requests received in order (``requests[i]`` is the i-th), at
    most ``keep_requests`` of them and ``keep_bytes`` of their bodies as sent (None: no such
    bound); later ones are answered and counted (``received``, ``dropped``) but not kept, and
    ``last`` is always the latest. ``keep`` (a function of each request) keeps only the
    requests it says True of, within the same bounds."""

    #: The most requests :attr:`requests` keeps, and the most bytes of their bodies, by default.
    KEEP_REQUESTS = 1000
    KEEP_BYTES = 16 << 20

    def __init__(self, script: Script | None = None, *, model: str = "scripted",
                 port: int = 0, keep_requests: int | None = KEEP_REQUESTS,
                 keep_bytes: int | None = KEEP_BYTES,
                 keep: Callable[[ScriptedRequest], bool] | None = None) -> None:
        self.model = model
        self._port = port
        self._lock = threading.Lock()
        if script is None:
            self._handler: Handler | None = echo
            self._queue: list[ScriptedReply | str] = []
        elif callable(script):
            self._handler, self._queue = script, []
        else:
            self._handler, self._queue = None, list(script)
        for name, bound in (("keep_requests", keep_requests), ("keep_bytes", keep_bytes)):
            if bound is not None and bound < 0:
                raise ValueError(f"{name} is {bound}; give 0 or more, or None for no bound")
        self.keep_requests, self.keep_bytes, self._keep = keep_requests, keep_bytes, keep
        #: The requests kept (see the class's docstring), in the order received.
        self.requests: list[ScriptedRequest] = []
        #: Every request received (answered or not), and those the bounds left out.
        self.received = 0
        self.dropped = 0
        #: The latest request received, kept or not (None before the first).
        self.last: ScriptedRequest | None = None
        self._kept_bytes = 0
        #: Requests held by a ``hang()`` reply until their client closed the connection.
        self.abandoned = 0
        #: ``/tokenize`` requests answered (vLLM's route: what a Messages ``count_tokens``
        #: asks the upstream).
        self.tokenized = 0
        self._server = AsgiServer(self.app, port=port, graceful_s=0.5)
        self._counter = 0
        #: Turns text into the ids it answers when token ids are asked for, and back.
        self.tokenizer = ScriptedTokenizer()

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """Its OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``), once started."""
        return f"{self._server.url}/v1"

    @property
    def endpoint(self) -> Endpoint:
        """An Endpoint of it, naming ``model``."""
        return Endpoint(base_url=self.base_url, model=self.model)

    def endpoint_with(self, **changes: Any) -> Endpoint:
        """:attr:`endpoint` with other settings (``max_retries=0``, ``timeout_s=1``, ...)."""
        return attrs.evolve(self.endpoint, **changes)

    def start(self) -> ScriptedModel:
        """Serve in a thread of its own (``with`` does it): :attr:`base_url` is then set."""
        self._server.start_in_thread()
        return self

    def stop(self) -> None:
        """Stop serving (leaving ``with`` does it)."""
        self._server.stop_thread()

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedModel:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def add(self, *replies: ScriptedReply | str) -> None:
        """Append replies to the script."""
        with self._lock:
            self._queue.extend(replies)

    # -- the app ---------------------------------------------------------------------------------

    def _record(self, req: ScriptedRequest, size: int) -> None:
        """Count ``req`` (its body ``size`` bytes as sent) and keep it if the bounds allow."""
        self.received += 1
        self.last = req
        if self._keep is not None and not self._keep(req):
            return
        if (self.keep_requests is not None and len(self.requests) >= self.keep_requests) or (
                self.keep_bytes is not None and self._kept_bytes + size > self.keep_bytes):
            self.dropped += 1
            return
        self.requests.append(req)
        self._kept_bytes += size

    def _next(self, req: ScriptedRequest, size: int = 0) -> ScriptedReply:
        with self._lock:
            self._record(req, size)
            if self._handler is not None:
                handler = self._handler
            elif self._queue:
                reply = self._queue.pop(0)
                return ScriptedReply.text(reply) if isinstance(reply, str) else reply
            else:
                return ScriptedReply(status=500, content="scripted model: script exhausted")
        reply = handler(req)
        return ScriptedReply.text(reply) if isinstance(reply, str) else reply

    async def app(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        """The ASGI app it serves (Chat Completions and Responses, streamed or not)."""
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if method == "GET" and path.endswith("/models"):
            await asgi.send_json(send, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 0, "owned_by": "interplay"}]})
            return
        if method == "POST" and path == "/tokenize":
            await self._tokenize(receive, send)
            return
        if method != "POST" or not path.endswith(("/chat/completions", "/responses")):
            await asgi.send_error(send, 404, f"no route {method} {path}", code="not_found")
            return
        api = "responses" if path.endswith("/responses") else "chat.completions"
        try:
            raw = await asgi.read_body(receive, 64 << 20)
        except asgi.ClientGone:
            return
        try:
            body = _codec.loads(raw)
            if not isinstance(body, dict):
                raise ValueError
        except ValueError:
            await asgi.send_error(send, 400, "the body is not a JSON object")
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        req = ScriptedRequest(api=api, body=body, headers=headers, path=path)
        reply = self._next(req, len(raw))
        if reply.latency_s:
            await asyncio.sleep(reply.latency_s)
        if reply.hangs:
            while (await receive())["type"] != "http.disconnect":
                pass
            with self._lock:
                self.abandoned += 1
            return
        if reply.status is not None:
            extra = [] if reply.retry_after is None else [
                (b"retry-after", str(reply.retry_after).encode())]
            await asgi.send_error(send, reply.status, reply.content or f"scripted fault "
                                  f"{reply.status}", type_="server_error"
                                  if reply.status >= 500 else "invalid_request_error",
                                  extra=extra)
            return
        stream = bool(body.get("stream")) and not reply.ignores_stream
        if reply.is_malformed:
            if stream:
                await asgi.start_sse(send)
                await send({"type": "http.response.body", "body": b"data: {not json\n\n",
                            "more_body": False})
            else:
                await asgi.send_bytes(send, 200, b"{this is not json")
            return
        self._counter += 1
        prompt_tokens = answers.prompt_words(body, api)
        if api == "chat.completions":
            await self._chat(send, receive, body, reply, stream, prompt_tokens)
        else:
            await self._responses(send, receive, body, reply, stream, prompt_tokens)

    async def _tokenize(self, receive: asgi.Receive, send: asgi.Send) -> None:
        """vLLM's ``POST /tokenize`` of a conversation: its prompt counted as a completion's
        usage counts it (``count``), beside the model's window."""
        try:
            body = _codec.loads(await asgi.read_body(receive, 64 << 20))
        except asgi.ClientGone:
            return
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            await asgi.send_error(send, 400, "tokenize takes an object with messages")
            return
        with self._lock:
            self.tokenized += 1
        await asgi.send_json(send, 200, {"count": answers.prompt_words(body, "chat.completions"),
                                         "max_model_len": 32768, "tokens": []})

    async def _chat(self, send: asgi.Send, receive: asgi.Receive, body: Mapping[str, Any],
                    reply: ScriptedReply, stream: bool, prompt_tokens: int) -> None:
        completion = answers.completion(body, reply, prompt_tokens, number=self._counter,
                                        model=self.model)
        tokens = tk.tokens_for(self.tokenizer, body, reply, "chat.completions", completion)
        if not stream:
            if tokens is not None:
                tk.on_completion(completion, tokens)
            await _whole(send, receive, reply, completion)
            return
        chunks = answers.chat_chunks(completion)
        if tokens is not None:
            tk.on_chunks(self.tokenizer, chunks, tokens)
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(answers.usage_chunk(completion))
        await asgi.start_sse(send)
        if reply.drops:
            cut = max(1, len(chunks) // 2)
            payload = b"".join(b"data: " + _codec.dumps(c) + b"\n\n" for c in chunks[:cut])
            await send({"type": "http.response.body", "body": payload, "more_body": True})
            await _cut(send, receive)
            return
        payload = b"".join(b"data: " + _codec.dumps(c) + b"\n\n" for c in chunks)
        await send({"type": "http.response.body", "body": payload + b"data: [DONE]\n\n",
                    "more_body": False})

    async def _responses(self, send: asgi.Send, receive: asgi.Receive,
                         body: Mapping[str, Any], reply: ScriptedReply, stream: bool,
                         prompt_tokens: int) -> None:
        completion = answers.completion(body, reply, prompt_tokens, number=self._counter,
                                        model=self.model)
        tokens = tk.tokens_for(self.tokenizer, body, reply, "responses", completion)
        response = answers.response(completion, body, reply)
        if tokens is not None:
            tk.on_response(self.tokenizer, response, body, tokens)
        if not stream:
            await _whole(send, receive, reply, response)
            return
        events = rs.events_for_response(response, body)
        await asgi.start_sse(send)
        if reply.drops:
            await send({"type": "http.response.body", "body": b"".join(events[:3]),
                        "more_body": True})
            await _cut(send, receive)
            return
        await send({"type": "http.response.body", "body": b"".join(events),
                    "more_body": False})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m interplay.testing.scripted",
        description="Serve the scripted model: an OpenAI-compatible server that answers from a "
        "script file, or echoes the last user message. Prints its base URL, then serves until "
        "stopped.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default="scripted", help="the model name it serves")
    parser.add_argument("--script", metavar="FILE", help="replies to serve in order: a JSON "
                        "array or JSONL file, each reply a string or an object such as "
                        '{"content": "...", "tool_calls": [{"name": "...", "arguments": {}}]}')
    parser.add_argument("--repeat", action="store_true",
                        help="start the script over when it runs out (else: 500s)")
    args = parser.parse_args(argv)
    if args.repeat and not args.script:
        parser.error("--repeat goes with --script FILE")
    script: Script | None = None
    if args.script:
        from interplay.errors import InterplayError
        from interplay.testing.script_file import read_script

        try:
            replies = read_script(args.script)
        except InterplayError as exc:
            parser.error(exc.message)
        script = _cycling(replies) if args.repeat else replies
    model = ScriptedModel(script, model=args.model)
    server = AsgiServer(model.app, host=args.host, port=args.port, graceful_s=0.5)

    async def run() -> None:
        await server.start()
        print(f"{server.url}/v1", flush=True)
        assert server._task is not None
        await server._task

    try:
        aio.run(run())
    except KeyboardInterrupt:
        pass
    return 0


def _cycling(replies: list[ScriptedReply]) -> Handler:
    turn = itertools.count()
    return lambda request: replies[next(turn) % len(replies)]


if __name__ == "__main__":
    raise SystemExit(main())
