"""The trainer's live model as an OpenAI-compatible endpoint: ``POST /v1/chat/completions``
(whole or streamed) and ``GET /v1/models``, served from a thread of the training process, so
every rollout samples from the weights of the step being trained.

A request is answered as vLLM answers one that asks for its tokens (what interplay's token
capture reads): ``prompt_token_ids`` on the response, ``token_ids`` on the choice, and
``logprobs.content`` with one entry per sampled id, its log-probability under the model's raw
distribution (before temperature and truncation, as vLLM returns it). A request that gives
``required_prefix_token_ids`` (interplay's ``model.continue_tokens``) continues from them: when
the prompt the chat template renders begins with their text, only the text after it is
tokenized, so a trace's ids stay the ones sampled. Tools are not offered: SmolLM2's chat
template has no tool syntax (tool messages are read as text).

One generation at a time (a lock): the model is one set of weights. Nothing here logs text.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from interplay import get_logger

log = get_logger("interplay_trl.policy")

PREFIX_FIELD = "required_prefix_token_ids"
DEFAULT_MAX_TOKENS = 256


class BadRequest(ValueError):
    """A request the policy cannot answer (answered 400 with this message)."""


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Messages a template without tool syntax renders: system, user and assistant text."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRequest(f"messages[{i}] must be an object")
        role, content = m.get("role"), m.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        text = "" if content is None else str(content)
        if role == "developer":
            role = "system"
        if role == "tool":
            role, text = "user", f"Tool result: {text}"
        if role not in ("system", "user", "assistant"):
            role = "user"
        out.append({"role": role, "content": text})
    return out


class PolicyModel:
    """A causal LM and its tokenizer answering chat completions (see the module docstring).
    ``name`` is the model name it answers as."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "policy") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.lock = threading.Lock()
        eos = {tokenizer.eos_token_id}
        config = getattr(model, "generation_config", None)
        if config is not None and config.eos_token_id is not None:
            eos |= set(_as_list(config.eos_token_id))
        #: The ids that end a reply.
        self.eos = {e for e in eos if e is not None}

    # -- the prompt ------------------------------------------------------------------------

    def prompt_ids(self, messages: list[dict[str, Any]],
                   prefix: list[int] | None) -> list[int]:
        tok = self.tokenizer
        text = tok.apply_chat_template(template_messages(messages), tokenize=False,
                                       add_generation_prompt=True)
        if prefix:
            if max(prefix) >= len(tok):
                raise BadRequest(f"{PREFIX_FIELD} names ids past the vocabulary")
            head = tok.decode(prefix, skip_special_tokens=False,
                              clean_up_tokenization_spaces=False)
            if text.startswith(head):
                return list(prefix) + tok(text[len(head):], add_special_tokens=False)[
                    "input_ids"]
        return tok(text, add_special_tokens=False)["input_ids"]

    # -- generation -----------------------------------------------------------------------

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        """The whole chat.completion for ``body`` (checked; BadRequest says what is wrong)."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        prefix = body.get(PREFIX_FIELD)
        if prefix is not None and not (isinstance(prefix, list) and all(
                type(i) is int and i >= 0 for i in prefix)):
            raise BadRequest(f"{PREFIX_FIELD!r} must be a list of token ids")
        temperature = _number(body, "temperature", 1.0)
        top_p = _number(body, "top_p", 1.0)
        top_k = int(_number(body, "top_k", 0))
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens")
                         or DEFAULT_MAX_TOKENS)
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else [s for s in stop if isinstance(s, str) and s]
        seed = body.get("seed")
        with self.lock:
            prompt = self.prompt_ids(messages, prefix)
            ids, logprobs, finish = self._sample(prompt, temperature, top_p, top_k,
                                                 max_tokens, stop, seed)
        text = self.tokenizer.decode([i for i in ids if i not in self.eos],
                                     skip_special_tokens=True,
                                     clean_up_tokenization_spaces=False)
        for s in stop:
            at = text.find(s)
            if at >= 0:
                text = text[:at]
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": finish, "logprobs": None}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [self._entry(i, lp, body)
                                              for i, lp in zip(ids, logprobs, strict=True)]}
        out: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion",
            "created": int(time.time()), "model": self.name, "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                      "total_tokens": len(prompt) + len(ids)}}
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = prompt
            choice["token_ids"] = ids
        return out

    def _entry(self, ident: int, logprob: float, body: dict[str, Any]) -> dict[str, Any]:
        piece = self.tokenizer.decode([ident], skip_special_tokens=False,
                                      clean_up_tokenization_spaces=False)
        name = f"token_id:{ident}" if body.get("return_tokens_as_token_ids") else piece
        return {"token": name, "logprob": logprob, "bytes": list(piece.encode()),
                "top_logprobs": []}

    def _sample(self, prompt: list[int], temperature: float, top_p: float, top_k: int,
                max_tokens: int, stop: list[str], seed: Any,
                ) -> tuple[list[int], list[float], str]:
        """Sample token by token with the model's cache; each id kept with its raw
        logprob."""
        import torch

        model = self.model
        device = next(model.parameters()).device
        generator = torch.Generator(device=device)
        generator.manual_seed(int(seed) if isinstance(seed, int) else
                              int.from_bytes(uuid.uuid4().bytes[:4], "little"))
        limit = getattr(model.config, "max_position_embeddings", None) or 2048
        max_tokens = max(0, min(max_tokens, limit - len(prompt)))
        if max_tokens == 0:
            raise BadRequest(f"the prompt ({len(prompt)} tokens) leaves no room in the "
                             f"model's context ({limit})")
        ids: list[int] = []
        logprobs: list[float] = []
        finish = "length"
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
                for _ in range(max_tokens):
                    logits = out.logits[0, -1].float()
                    raw = torch.log_softmax(logits, dim=-1)
                    token = _pick(logits, temperature, top_p, top_k, generator)
                    ids.append(token)
                    logprobs.append(float(raw[token]))
                    if token in self.eos:
                        finish = "stop"
                        break
                    if stop and any(s in self.tokenizer.decode(ids[-8:]) for s in stop):
                        finish = "stop"
                        break
                    out = model(input_ids=torch.tensor([[token]], device=device),
                                past_key_values=out.past_key_values, use_cache=True)
        finally:
            model.train(was_training)
        return ids, logprobs, finish


def _as_list(value: Any) -> list[int]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{key!r} must be a number")
    return float(value)


def _pick(logits: Any, temperature: float, top_p: float, top_k: int, generator: Any) -> int:
    import torch

    if temperature <= 0:
        return int(torch.argmax(logits))
    scores = logits / temperature
    if top_k > 0:
        kth = torch.topk(scores, min(top_k, scores.numel())).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < top_p
        mask = torch.zeros_like(probs, dtype=torch.bool)
        mask[order[keep]] = True
        probs = torch.where(mask, probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    return int(torch.multinomial(probs, 1, generator=generator))


# -- the HTTP server ------------------------------------------------------------------------------


def _chunks(completion: dict[str, Any], usage: bool) -> Iterator[dict[str, Any]]:
    """A whole chat.completion as the chunks of a stream."""
    base = {k: completion[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    first: dict[str, Any] = dict(base, choices=[{"index": 0, "delta": {
        "role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
    if "prompt_token_ids" in completion:
        first["prompt_token_ids"] = completion["prompt_token_ids"]
    yield first
    body: dict[str, Any] = {"index": 0, "delta": {"content": choice["message"]["content"]},
                            "logprobs": choice["logprobs"], "finish_reason": None}
    if "token_ids" in choice:
        body["token_ids"] = choice["token_ids"]
    yield dict(base, choices=[body])
    yield dict(base, choices=[{"index": 0, "delta": {}, "logprobs": None,
                               "finish_reason": choice["finish_reason"]}])
    if usage:
        yield dict(base, choices=[], usage=completion["usage"])


class PolicyServer:
    """Serves a :class:`PolicyModel` on 127.0.0.1 from a thread (``with PolicyServer(p) as s:``;
    ``s.base_url`` is the ``/v1`` URL an interplay Endpoint takes)."""

    def __init__(self, policy: PolicyModel, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.policy = policy
        handler = type("Handler", (_Handler,), {"policy": policy})
        self.http = ThreadingHTTPServer((host, port), handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True,
                                       name="interplay-trl-policy")

    @property
    def base_url(self) -> str:
        host, port = self.http.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> PolicyServer:
        self.thread.start()
        log.info("policy.serving", port=self.http.server_address[1])
        return self

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    policy: PolicyModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are not logged: their paths are all alike and bodies are not ours

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message, "type": "invalid_request_error"
                                      if status < 500 else "server_error", "code": None}})

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [
                {"id": self.policy.name, "object": "model", "created": 0,
                 "owned_by": "interplay-trl"}]})
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route POST {self.path}")
            return
        try:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            if body.get("tools") and body.get("tool_choice") not in (None, "none", "auto"):
                raise BadRequest("this policy has no tool syntax: send no forced tool_choice")
            completion = self.policy.generate(body)
        except (BadRequest, ValueError) as exc:
            self._error(400, str(exc))
            return
        except Exception as exc:
            log.exception("policy.generation_failed")
            self._error(500, f"generation failed: {type(exc).__name__}")
            return
        if not body.get("stream"):
            self._json(200, completion)
            return
        opts = body.get("stream_options")
        usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n"
                        for c in _chunks(completion, usage)) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
