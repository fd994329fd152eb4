"""The ``interplay serve-local`` process: the embedded model (:mod:`interplay.model.local`)
behind a small OpenAI-compatible server: ``POST /v1/chat/completions`` streamed and not,
``GET /v1/models``; one generation at a time in a worker thread. A malformed request is a 400
naming the field (the interception server's strict parse and shape check, then what the
template renders), never a 500.

SmolLM2's own chat template has no tool syntax. A request with ``tools`` goes through
llama-cpp-python's grammar-constrained ChatML tool handler (``chatml-function-calling``): a
forced ``tool_choice`` (a tool by name) always gives a valid call of that tool; ``auto`` gives a
call when the model picks one and a plain answer otherwise (the handler's own answer is empty),
and after a tool result always a plain answer; ``required`` forces the first tool listed. That
is what a 135M model can do (see the README). Tool requests are answered whole, also when
streaming was asked for.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import threading
from pathlib import Path
from typing import Any

from interplay import _aio as aio
from interplay import _asgi as asgi
from interplay import _codec
from interplay._ids import new_id
from interplay.interception import request
from interplay.log import get_logger
from interplay.model.local import DEFAULT_MAX_TOKENS, MODEL_NAME, N_CTX, model_path

log = get_logger("interplay.model.local_server")

#: llama.cpp's threads: two, but never every core. Its threads wait for each other at every
#: step of every token, so one that is descheduled (by the run's own process, which drives
#: the model, or by anything else) stalls the rest: on a busy 2-core machine two threads
#: generated 5 to 10 times slower than one, while on an idle one they were 1.5 times faster.
N_THREADS = max(1, min(2, (os.cpu_count() or 1) - 1))
STATE_CACHE_BYTES = 512 << 20
_PASSTHROUGH = ("temperature", "top_p", "stop", "seed", "presence_penalty",
                "frequency_penalty", "top_k", "min_p", "repeat_penalty")
_INTEGER = ("seed", "top_k")
# What llama.cpp raises for a request it cannot take (a wrong sampling type reaches ctypes):
# the client's fault, answered 400 so it is not retried as a server error.
_BAD_REQUEST = (ValueError, TypeError, ctypes.ArgumentError)


def _plain(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _check_messages(messages: list[dict[str, Any]]) -> None:
    """What the template renders, checked: text content (a string, or a list of parts), and
    tool calls as a list of {function: {name, arguments}} objects. ValueError says which."""
    for i, m in enumerate(messages):
        content = m.get("content")
        if not (content is None or isinstance(content, str) or (
                isinstance(content, list) and all(isinstance(p, dict) for p in content))):
            raise ValueError(f"messages[{i}].content must be a string or a list of content "
                             f"parts")
        calls = m.get("tool_calls")
        if calls is None:
            continue
        if not isinstance(calls, list):
            raise ValueError(f"messages[{i}].tool_calls must be a list")
        for j, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                    or not isinstance(function.get("arguments", ""), str):
                raise ValueError(f"messages[{i}].tool_calls[{j}] must be an object with a "
                                 f"function {{name, arguments}} of strings")


def to_template_messages(messages: list[dict[str, Any]], *,
                         keep_calls: bool = False) -> list[dict[str, Any]]:
    """Messages the model's template can render: roles system/user/assistant, text content.
    Tool results become text; so do tool calls, unless ``keep_calls`` (the tool handler's
    template renders them in its own syntax)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        text = _plain(m.get("content"))
        if role == "developer":
            role = "system"
        if role == "tool":
            role, text = "user", f"Tool result: {text}"
        if role == "assistant" and m.get("tool_calls") and keep_calls:
            out.append({"role": "assistant", "content": text or None,
                        "tool_calls": [c for c in m["tool_calls"] if isinstance(c, dict)]})
            continue
        if role == "assistant" and m.get("tool_calls"):
            calls = "; ".join(f"{(c.get('function') or {}).get('name')}("
                              f"{(c.get('function') or {}).get('arguments')})"
                              for c in m["tool_calls"])
            text = f"{text}\nCalled: {calls}".strip()
        if role not in ("system", "user", "assistant"):
            role = "user"
        out.append({"role": role, "content": text})
    return out


#: Settings the tool handler takes (it has no seed: that is set on the model instead).
_HANDLER_KEYS = ("temperature", "top_p", "top_k", "min_p", "stop", "max_tokens",
                 "presence_penalty", "frequency_penalty", "repeat_penalty")


def _tool_choice(body: dict[str, Any]) -> str | dict[str, Any] | None:
    """The request's tools and tool_choice checked; None when it asks for no tool."""
    tools = body.get("tools")
    if not tools:
        return None
    if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function"), dict)
            and isinstance(t["function"].get("name"), str) for t in tools):
        raise ValueError("'tools' must be a list of {type: function, function: {name, ...}}")
    for i, tool in enumerate(tools):
        if not isinstance(tool["function"].get("parameters", {}), dict):
            raise ValueError(f"tools[{i}].function.parameters must be a JSON schema object")
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        return None
    if choice in ("auto", "required"):
        return str(choice)
    if isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str):
        return {"type": "function", "function": {"name": choice["function"]["name"]}}
    raise ValueError("'tool_choice' must be none, auto, required or "
                     "{type: function, function: {name}}")


def _json_arguments(text: str) -> str:
    """Arguments as strict JSON: the handler's grammar lets a raw line break into a string,
    which a JSON reader refuses (and a tool loop then answers with an error)."""
    try:
        return json.dumps(json.loads(text, strict=False), ensure_ascii=False)
    except ValueError:
        return text


def _calls(result: dict[str, Any]) -> list[Any]:
    return (result["choices"][0].get("message") or {}).get("tool_calls") or []


#: Tokens of a reply that, found whole earlier in the same reply, end it: a 135M model that
#: starts repeating itself goes on to its max_tokens (a sentence over and over), which costs
#: the run seconds per call and says nothing new.
REPEAT_SPAN = 16


class RepeatStop:
    """A logits processor that ends a reply (only the end-of-turn token is left to sample)
    once its last ``span`` tokens already appeared, not overlapping them, earlier in it."""

    def __init__(self, eos: int, span: int = REPEAT_SPAN) -> None:
        self.eos = eos
        self.span = span
        self.start: int | None = None
        self.stopped = False

    def repeats(self, generated: Any) -> bool:
        """Whether the last ``span`` of ``generated`` (token ids, an int array) occur earlier."""
        n = len(generated)
        if n < 2 * self.span:
            return False
        data = generated.astype("<i4").tobytes()
        tail, width = data[-4 * self.span:], 4
        head = data[: -4 * self.span]
        at = head.find(tail)
        while at >= 0 and at % width:  # a match that is not on a token's boundary
            at = head.find(tail, at + 1)
        return at >= 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.start is None:
            # The first call comes before the first sampled token: all of it is the prompt.
            self.start = len(input_ids)
            return scores
        if self.stopped or self.repeats(input_ids[self.start:]):
            self.stopped = True
            scores[:] = -float("inf")
            scores[self.eos] = 0.0
        return scores


class LocalServer:
    """The ASGI app of ``interplay serve-local``."""

    def __init__(self, path: Path) -> None:
        from llama_cpp import Llama, LlamaRAMCache

        self.llm = Llama(model_path=str(path), n_ctx=N_CTX, n_threads=N_THREADS,
                         n_threads_batch=N_THREADS, verbose=False)
        # Seats take turns (a user and an assistant, two players), so consecutive requests
        # rarely share a prefix; keeping each conversation's evaluated state lets the next
        # request of that conversation skip re-reading it.
        self.llm.set_cache(LlamaRAMCache(capacity_bytes=STATE_CACHE_BYTES))
        self.lock = asyncio.Lock()

    def _kwargs(self, body: dict[str, Any]) -> dict[str, Any]:
        request.check("chat.completions", body)
        msgs = body["messages"]
        _check_messages(msgs)
        kw: dict[str, Any] = {"messages": to_template_messages(msgs)}
        for key in _PASSTHROUGH:
            value = body.get(key)
            if value is None:
                continue
            if key == "stop":
                if isinstance(value, str):
                    value = [value]
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError("'stop' must be a string or a list of strings")
            elif isinstance(value, bool) or not isinstance(
                    value, int if key in _INTEGER else int | float):
                kind = "an integer" if key in _INTEGER else "a number"
                raise ValueError(f"{key!r} must be {kind}")
            kw[key] = value
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        kw["max_tokens"] = int(max_tokens) if max_tokens else DEFAULT_MAX_TOKENS
        from llama_cpp import LogitsProcessorList

        kw["logits_processor"] = LogitsProcessorList([RepeatStop(self.llm.token_eos())])
        return kw

    def _with_tools(self, body: dict[str, Any], kw: dict[str, Any],
                    choice: str | dict[str, Any]) -> dict[str, Any]:
        """A completion through the grammar-constrained tool handler (see the module doc)."""
        from llama_cpp import llama_chat_format

        handler = llama_chat_format.get_chat_completion_handler("chatml-function-calling")
        args = {k: kw[k] for k in _HANDLER_KEYS if k in kw}
        messages = to_template_messages(body["messages"], keep_calls=True)
        tools = body["tools"]
        if "seed" in kw:
            self.llm.set_seed(int(kw["seed"]))
        if choice == "auto" and body["messages"][-1].get("role") == "tool":
            # One round of tool calls per turn: left to choose, a 135M model calls the same
            # tool again and again; after a tool result it answers.
            return self.llm.create_chat_completion(**kw)
        if choice == "required":
            # It cannot weigh tools against each other: required forces the first one.
            choice = {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
        result = handler(llama=self.llm, messages=messages, tools=tools, tool_choice=choice,
                         **args)
        if not _calls(result):
            # The handler's message branch answers empty: a plain answer instead.
            return self.llm.create_chat_completion(**kw)
        choice0 = result["choices"][0]
        # The legacy function_call the handler adds can carry a mangled name ("f:").
        (choice0.get("message") or {}).pop("function_call", None)
        choice0["finish_reason"] = "tool_calls"
        for call in _calls(result):
            call["function"]["arguments"] = _json_arguments(call["function"]["arguments"])
        return result

    async def app(self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if method == "GET" and path in ("/v1/models", "/models"):
            await asgi.send_json(send, 200, {"object": "list", "data": [
                {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "interplay"}]})
            return
        if method != "POST" or path not in ("/v1/chat/completions", "/chat/completions"):
            await asgi.send_error(send, 404, f"no route {method} {path}", code="not_found")
            return
        try:
            body = request.parse(await asgi.read_body(receive, 32 << 20))
            kw = self._kwargs(body)
            choice = _tool_choice(body)
        except asgi.BodyTooLarge:
            await asgi.send_error(send, 413, "request body too large")
            return
        except asgi.ClientGone:
            return
        except (ValueError, TypeError) as exc:
            await asgi.send_error(send, 400, str(exc) or "the request body is not valid JSON")
            return
        try:
            if choice is not None:
                async with self.lock:
                    result = await asyncio.to_thread(self._with_tools, body, kw, choice)
                result["model"] = MODEL_NAME
                await asgi.send_json(send, 200, result)
            elif body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage")) \
                    if isinstance(body.get("stream_options"), dict) else False
                await self._stream(send, receive, kw, usage)
            else:
                async with self.lock:
                    result = await asyncio.to_thread(self.llm.create_chat_completion, **kw)
                result["model"] = MODEL_NAME
                await asgi.send_json(send, 200, result)
        except _BAD_REQUEST as exc:  # e.g. the prompt does not fit the context
            await asgi.send_error(send, 400, str(exc) or type(exc).__name__)
        except Exception as exc:
            log.exception("local_model.generation_failed")
            await asgi.send_error(send, 500, f"generation failed: {type(exc).__name__}",
                                  type_="server_error")

    async def _stream(self, send: asgi.Send, receive: asgi.Receive, kw: dict[str, Any],
                      include_usage: bool) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = object()
        # Set when the client goes away: one generation at a time, so a request nobody
        # waits for must not hold the model until max_tokens.
        stop = threading.Event()

        def generate() -> None:
            chunks: Any = None
            try:
                chunks = self.llm.create_chat_completion(stream=True, **kw)
                for chunk in chunks:
                    if stop.is_set():
                        break
                    loop.call_soon_threadsafe(queue.put_nowait, chunk)
            except BaseException as exc:
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                if hasattr(chunks, "close"):
                    chunks.close()  # ends llama.cpp's generation where it stands
                loop.call_soon_threadsafe(queue.put_nowait, done)

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            stop.set()

        async with self.lock:
            watcher = asyncio.create_task(watch())
            worker = loop.run_in_executor(None, generate)
            try:
                await self._relay(send, queue, done, worker, include_usage)
            finally:
                stop.set()  # the worker ends at its next token if it has not already
                watcher.cancel()
                await worker

    async def _relay(self, send: asgi.Send, queue: asyncio.Queue[Any], done: object,
                     worker: asyncio.Future[None], include_usage: bool) -> None:
        """Send the generated chunks as SSE; a failure after the first one ends the stream
        with an error chunk and no ``[DONE]``, so the client cannot take it for a whole
        answer."""
        started = False
        completion = 0
        last: dict[str, Any] = {}
        while True:
            item = await queue.get()
            if item is done:
                break
            if isinstance(item, BaseException):
                await worker
                if not started:
                    raise item
                log.error("local_model.stream_failed", error=type(item).__name__,
                          chunks=completion)
                await send({"type": "http.response.body", "body": b"data: " + _codec.dumps(
                    asgi.error_body(f"generation failed: {type(item).__name__}",
                                    type_="server_error", code="server_error")) + b"\n\n",
                    "more_body": False})
                return
            if not started:
                started = True
                await asgi.start_sse(send)
            item["model"] = MODEL_NAME
            last = item
            if any((c.get("delta") or {}).get("content") for c in item.get("choices", ())):
                completion += 1
            await send({"type": "http.response.body",
                        "body": b"data: " + _codec.dumps(item) + b"\n\n", "more_body": True})
        await worker
        if not started:
            await asgi.start_sse(send)
        tail = b""
        if include_usage:
            prompt = max(0, int(self.llm.n_tokens) - completion)
            tail = b"data: " + _codec.dumps({
                "id": last.get("id", f"chatcmpl-{new_id(16)}"),
                "object": "chat.completion.chunk", "created": last.get("created", 0),
                "model": MODEL_NAME, "choices": [],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}) + b"\n\n"
        await send({"type": "http.response.body", "body": tail + b"data: [DONE]\n\n",
                    "more_body": False})


def serve(host: str, port: int) -> None:
    """Run the embedded model's server until interrupted; prints its URL once ready."""
    path = model_path()
    server = LocalServer(path)
    http = asgi.AsgiServer(server.app, host=host, port=port, graceful_s=1.0)

    async def run() -> None:
        await http.start()
        print(f"{http.url}/v1", flush=True)
        assert http._task is not None
        await http._task

    aio.run(run())


def add_serve_local(sub: Any) -> None:
    p = sub.add_parser("serve-local", help="serve the embedded default model "
                       f"({MODEL_NAME}) as an OpenAI-compatible server")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    p.set_defaults(func=cmd_serve_local)


def cmd_serve_local(args: argparse.Namespace) -> int:
    try:
        serve(args.host, args.port)
    except KeyboardInterrupt:
        pass
    return 0
