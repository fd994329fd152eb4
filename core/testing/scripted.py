"""A scripted OpenAI-compatible model server: a test double for the MODEL, over real HTTP.

It answers Chat Completions and Responses requests (streamed and not) and ``GET /v1/models``
from a script: a list of :class:`ScriptedReply` consumed in order, or a handler called with each
:class:`ScriptedRequest`. Replies can carry text, tool calls, Responses output items, latency and
injected faults (an HTTP status with Retry-After, a hang, a dropped stream, malformed output).
Every request received is kept in ``requests``; ``abandoned`` counts hung requests whose client
gave up (closed the connection). Usage figures count words.

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
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import threading
import time
from collections.abc import Mapping
from typing import Any

import attrs

from interplay import _aio as aio
from interplay import _asgi as asgi
from interplay import _codec
from interplay.endpoint import Endpoint
from interplay.model import responses as rs
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


_TEXT_KEYS = ("content", "text", "output", "arguments")


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list | tuple):
        return sum(map(_words, value))
    if isinstance(value, Mapping):  # only the text a message carries, not its role or ids
        total = 0
        for key in _TEXT_KEYS:
            item = value.get(key)
            if item is not None:
                total += _words(item)
        return total
    return 0


class ScriptedModel:
    """An OpenAI-compatible server answering from a script (see the module docstring)."""

    def __init__(self, script: Script | None = None, *, model: str = "scripted",
                 port: int = 0) -> None:
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
        self.requests: list[ScriptedRequest] = []
        #: Requests held by a ``hang()`` reply until their client closed the connection.
        self.abandoned = 0
        self._server = asgi.AsgiServer(self.app, port=port, graceful_s=0.5)
        self._counter = 0
        #: Turns text into the ids it answers when token ids are asked for, and back.
        self.tokenizer = ScriptedTokenizer()

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"{self._server.url}/v1"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=self.base_url, model=self.model)

    def endpoint_with(self, **changes: Any) -> Endpoint:
        return attrs.evolve(self.endpoint, **changes)

    def start(self) -> ScriptedModel:
        self._server.start_in_thread()
        return self

    def stop(self) -> None:
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

    def _next(self, req: ScriptedRequest) -> ScriptedReply:
        with self._lock:
            self.requests.append(req)
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
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if method == "GET" and path.endswith("/models"):
            await asgi.send_json(send, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 0, "owned_by": "interplay"}]})
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
        reply = self._next(req)
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
        prompt_tokens = _words(body.get("messages") if api == "chat.completions"
                               else body.get("input"))
        if api == "chat.completions":
            await self._chat(send, receive, body, reply, stream, prompt_tokens)
        else:
            await self._responses(send, receive, body, reply, stream, prompt_tokens)

    def _completion(self, body: Mapping[str, Any], reply: ScriptedReply,
                    prompt_tokens: int) -> dict[str, Any]:
        calls = [{"id": c.call_id or f"call_{self._counter}_{i}", "type": "function",
                  "function": {"name": c.name, "arguments": c.arguments_json()}}
                 for i, c in enumerate(reply.tool_calls)]
        text = reply.content
        completion_tokens = _words(text or "") + sum(_words(c.arguments_json()) for c in
                                                     reply.tool_calls)
        message: dict[str, Any] = {"role": "assistant",
                                   "content": text if text is not None or not calls else None}
        if message["content"] is None and not calls:
            message["content"] = ""
        if calls:
            message["tool_calls"] = calls
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        out = {"id": f"chatcmpl-scripted-{self._counter}", "object": "chat.completion",
               "created": int(time.time()), "model": str(body.get("model") or self.model),
               "choices": [{"index": 0, "message": message, "finish_reason": finish,
                            "logprobs": None}],
               "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens}}
        return out

    # -- token ids and logprobs, when asked for ----------------------------------------------------

    def prompt_text(self, body: Mapping[str, Any], api: str) -> str:
        """The text whose ids are a request's prompt ids: its conversation rendered by the
        scripted chat template (:meth:`ScriptedTokenizer.render`)."""
        if api == "responses":
            try:
                messages = rs.responses_to_chat(body)["messages"]
            except rs.BadRequest:
                messages = []
        else:
            messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
        return self.tokenizer.render(messages)

    @staticmethod
    def completion_pieces(message: Mapping[str, Any]) -> list[str]:
        """The pieces an answer streams in (its words, then each tool call's name and the two
        halves of its arguments, then the end token), whose ids are its completion ids."""
        content = message.get("content") or ""
        pieces = [w if i == 0 else " " + w for i, w in enumerate(content.split(" "))] \
            if content else []
        for call in message.get("tool_calls") or ():
            args = call["function"]["arguments"]
            half = len(args) // 2
            pieces += [f"<{call['function']['name']}>" + args[:half], args[half:]]
        return [*pieces, ScriptedTokenizer.END]

    def _ids(self, piece: str) -> list[int]:
        return self.tokenizer.encode(piece) if piece else []

    def _entries(self, ids: list[int], as_ids: bool) -> list[dict[str, Any]]:
        out = []
        for ident in ids:
            piece = self.tokenizer.decode([ident])
            out.append({"token": f"token_id:{ident}" if as_ids else piece,
                        "logprob": self.tokenizer.logprob(piece),
                        "bytes": list(piece.encode()), "top_logprobs": []})
        return out

    def _tokens_for(self, body: Mapping[str, Any], reply: ScriptedReply, api: str,
                    completion: dict[str, Any]) -> _Tokens | None:
        """The ids and logprobs to answer, or None when none were asked for (or the reply
        answers without them)."""
        if api == "responses":
            include = body.get("include")
            want_ids = bool(body.get("enable_response_messages"))
            want_logprobs = isinstance(include, list) and \
                "message.output_text.logprobs" in include
        else:
            want_ids = bool(body.get("return_token_ids"))
            want_logprobs = bool(body.get("logprobs"))
        if not reply.returns_tokens or not (want_ids or want_logprobs):
            return None
        prompt = self.tokenizer.encode(self.prompt_text(body, api))
        per_piece = [self._ids(p) for p in
                     self.completion_pieces(completion["choices"][0]["message"])]
        ids = [i for piece in per_piece for i in piece]
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        entries = self._entries(ids, as_ids)
        if reply.tokens_given:
            ids = list(reply.completion_ids) if reply.completion_ids is not None else None
            entries = None if reply.logprobs is None else [
                {"token": "?", "logprob": lp, "bytes": [], "top_logprobs": []}
                for lp in reply.logprobs]
            per_piece = []
        usage = completion["usage"]
        usage["prompt_tokens"] = len(prompt)
        usage["completion_tokens"] = len(ids) if ids is not None else len(entries or ())
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return _Tokens(prompt=prompt if want_ids else None, ids=ids if want_ids else None,
                       entries=entries if want_logprobs else None, per_piece=per_piece,
                       as_ids=as_ids)

    async def _chat(self, send: asgi.Send, receive: asgi.Receive, body: Mapping[str, Any],
                    reply: ScriptedReply, stream: bool, prompt_tokens: int) -> None:
        completion = self._completion(body, reply, prompt_tokens)
        tokens = self._tokens_for(body, reply, "chat.completions", completion)
        if not stream:
            if tokens is not None:
                choice = completion["choices"][0]
                if tokens.prompt is not None:
                    completion["prompt_token_ids"] = tokens.prompt
                    choice["token_ids"] = tokens.ids
                if tokens.entries is not None:
                    choice["logprobs"] = {"content": tokens.entries}
            await _whole(send, receive, reply, completion)
            return
        base = {"id": completion["id"], "object": "chat.completion.chunk",
                "created": completion["created"], "model": completion["model"]}
        msg = completion["choices"][0]["message"]
        chunks: list[dict[str, Any]] = [
            dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                 "finish_reason": None}])]
        words = (msg.get("content") or "").split(" ")
        for i, w in enumerate(words if msg.get("content") else ()):
            piece = w if i == 0 else " " + w
            chunks.append(dict(base, choices=[{"index": 0, "delta": {"content": piece},
                                               "finish_reason": None}]))
        for i, call in enumerate(msg.get("tool_calls") or ()):
            args = call["function"]["arguments"]
            half = len(args) // 2
            chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [
                {"index": i, "id": call["id"], "type": "function",
                 "function": {"name": call["function"]["name"], "arguments": args[:half]}}]},
                "finish_reason": None}]))
            chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [
                {"index": i, "function": {"arguments": args[half:]}}]}, "finish_reason": None}]))
        chunks.append(dict(base, choices=[{"index": 0, "delta": {},
                                           "finish_reason": completion["choices"][0]
                                           ["finish_reason"]}]))
        if tokens is not None:
            self._stream_tokens(chunks, tokens)
        include_usage = (body.get("stream_options") or {}).get("include_usage")
        if include_usage:
            chunks.append(dict(base, choices=[], usage=completion["usage"]))
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

    def _stream_tokens(self, chunks: list[dict[str, Any]], tokens: _Tokens) -> None:
        """Put the ids and logprobs on the chunks that carry their pieces, as vLLM streams
        them: the prompt's ids on the first chunk, each piece's on its own."""
        if tokens.prompt is not None:
            chunks[0]["prompt_token_ids"] = tokens.prompt
        carriers = chunks[1:]
        if len(tokens.per_piece) != len(carriers):  # given ids: all on the closing chunk
            carriers, per_piece = [chunks[-1]], [tokens.ids or []]
            entries_per = [tokens.entries]
        else:
            per_piece = tokens.per_piece
            entries_per = [self._entries(ids, tokens.as_ids) for ids in per_piece] \
                if tokens.entries is not None else [None] * len(per_piece)
        for chunk, ids, entries in zip(carriers, per_piece, entries_per, strict=True):
            choice = chunk["choices"][0]
            if tokens.ids is not None:
                choice["token_ids"] = ids
            if entries is not None:
                choice["logprobs"] = {"content": entries}

    async def _responses(self, send: asgi.Send, receive: asgi.Receive,
                         body: Mapping[str, Any], reply: ScriptedReply, stream: bool,
                         prompt_tokens: int) -> None:
        completion = self._completion(body, reply, prompt_tokens)
        tokens = self._tokens_for(body, reply, "responses", completion)
        response = rs.chat_to_response(completion, body)
        if reply.output is not None:
            response["output"] = [dict(i) for i in reply.output]
        if tokens is not None:
            if tokens.prompt is not None:
                prompt_text = self.prompt_text(body, "responses")
                response["input_messages"] = [{"type": "raw_message_tokens",
                                               "message": prompt_text, "tokens": tokens.prompt}]
                response["output_messages"] = [
                    {"type": "raw_message_tokens", "tokens": tokens.ids,
                     "message": self.tokenizer.decode(tokens.ids or [])}]
            if tokens.entries is not None:
                for item in response["output"]:
                    if item.get("type") == "message" and item.get("content"):
                        item["content"][0]["logprobs"] = tokens.entries
                        break
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


@attrs.define
class _Tokens:
    prompt: list[int] | None
    ids: list[int] | None
    entries: list[dict[str, Any]] | None
    per_piece: list[list[int]]
    as_ids: bool


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
    server = asgi.AsgiServer(model.app, host=args.host, port=args.port, graceful_s=0.5)

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
