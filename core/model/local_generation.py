"""The embedded model's own generation, for requests that ask for token ids or logprobs
(``return_token_ids``, ``logprobs``): the prompt rendered by the model's chat template and
tokenized, then sampled token by token on llama-cpp-python, each sampled id kept with its
log-probability under the model's raw distribution (the logits before temperature and
truncation, as vLLM returns them by default). The answer has vLLM's shape: ``prompt_token_ids``
on the response (a stream's first chunk), ``token_ids`` on the choice (each chunk), and
``logprobs.content`` entries with ``top_logprobs`` when asked.

The ids are what was sampled: the end-of-turn token is the last completion id when the model
stopped by itself (the text leaves it out), and a stop string's tokens stay in the ids while
the text ends before it, as vLLM does. Sampling settings mean what they mean to
``create_chat_completion`` (the same defaults and seed handling), so a capturing request is
sampled as any other.

A request that gives ``required_prefix_token_ids`` (the prompt and completion ids of the
trace's previous call) continues from them: when the prompt the template renders begins with
their text, only the text after it is tokenized, and the prompt's ids are those ids and then
the new ones, so a token split the model sampled stays as it was sampled. When it does not (an
earlier turn's text changed), the prompt is tokenized whole, as without them.

Runs in the server's worker thread, one generation at a time; no I/O, no logging.
"""

from __future__ import annotations

import codecs
import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from interplay._plumbing.ids import new_id
from interplay.model.tokens import PREFIX_FIELD

if TYPE_CHECKING:
    import numpy as np

#: ``create_chat_completion``'s sampling defaults.
_DEFAULTS = {"temperature": 0.2, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
             "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
_SAMPLER_NAMES = {"temperature": "temp", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                  "repeat_penalty": "repeat_penalty", "presence_penalty": "presence_penalty",
                  "frequency_penalty": "frequency_penalty"}


@attrs.define
class Asked:
    """What a request asks of the tokens: ids, logprobs (with how many alternatives),
    logprob tokens written as ``token_id:N``, and the ids its prompt continues from."""

    ids: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    as_ids: bool = False
    prefix: list[int] | None = None

    @property
    def any(self) -> bool:
        return self.ids or self.logprobs

    @classmethod
    def of(cls, body: dict[str, Any]) -> Asked:
        """Read from a request body; ValueError names a field of the wrong type."""
        top = body.get("top_logprobs")
        if top is None:
            top = 0
        if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20:
            raise ValueError("'top_logprobs' must be an integer from 0 to 20")
        for key in ("logprobs", "return_token_ids", "return_tokens_as_token_ids"):
            if body.get(key) is not None and not isinstance(body[key], bool):
                raise ValueError(f"{key!r} must be a boolean")
        prefix = body.get(PREFIX_FIELD)
        if prefix is not None and not (isinstance(prefix, list) and all(
                type(i) is int and i >= 0 for i in prefix)):
            raise ValueError(f"{PREFIX_FIELD!r} must be a list of token ids (integers from 0)")
        return cls(ids=bool(body.get("return_token_ids")), logprobs=bool(body.get("logprobs")),
                   top_logprobs=top, as_ids=bool(body.get("return_tokens_as_token_ids")),
                   prefix=prefix or None)


@attrs.define
class Step:
    """One sampled token: its id, its logprob, the alternatives asked for, and the text it
    adds to what the client sees (empty while held back: a partial character, or what may be
    the start of a stop string)."""

    token: int
    logprob: float
    top: list[tuple[int, float]]
    text: str


class Generation:
    """One request's generation (see the module docstring); iterate it for its steps, then
    read ``finish_reason``, ``text``, ``completion_ids``."""

    def __init__(self, llm: Any, formatter: Any, messages: list[dict[str, Any]],
                 kw: dict[str, Any], asked: Asked, *,
                 stopped: Callable[[], bool] = lambda: False) -> None:
        rendered = formatter(messages=messages)
        self.llm = llm
        self.asked = asked
        text = rendered.prompt.encode("utf-8")
        add_bos = not rendered.added_special
        continued = _continued(llm, text, add_bos, asked.prefix) if asked.prefix else None
        #: Whether the prompt continues from the request's prefix ids.
        self.continued = continued is not None
        self.prompt_ids: list[int] = continued if continued is not None else llm.tokenize(
            text, add_bos=add_bos, special=True)
        if len(self.prompt_ids) >= llm.n_ctx():
            raise ValueError(f"Requested tokens ({len(self.prompt_ids)}) exceed context "
                             f"window of {llm.n_ctx()}")
        self.max_tokens = min(int(kw["max_tokens"]), llm.n_ctx() - len(self.prompt_ids))
        stop = kw.get("stop") or []
        self.stop = [s for s in stop if s]
        self.kw = kw
        self.stopped = stopped
        self.completion_ids: list[int] = []
        self.logprobs: list[float] = []
        self.tops: list[list[tuple[int, float]]] = []
        self.text = ""
        self.finish_reason = "length"
        self.id = f"chatcmpl-{new_id(16)}"
        self.created = int(time.time())

    def piece(self, token: int) -> bytes:
        return bytes(self.llm.detokenize([token]))

    def __iter__(self) -> Iterator[Step]:
        self._restore()
        try:
            yield from self._sample()
        finally:
            self._keep()

    def _restore(self) -> None:
        """Start from the state the server kept of this conversation, when it has a longer
        prefix of the prompt than the model holds now (as create_chat_completion does)."""
        llm = self.llm
        if not llm.cache:
            return
        try:
            kept = llm.cache[self.prompt_ids]
        except KeyError:
            return
        if (type(llm).longest_token_prefix(kept.input_ids.tolist(), self.prompt_ids)
                > type(llm).longest_token_prefix(llm._input_ids.tolist(), self.prompt_ids)):
            llm.load_state(kept)

    def _keep(self) -> None:
        """Keep the state for the conversation's next request, as create_chat_completion
        does: seats take turns, and the next turn of this one may come after another's."""
        if self.llm.cache and self.completion_ids:
            self.llm.cache[self.prompt_ids + self.completion_ids] = self.llm.save_state()

    def _sample(self) -> Iterator[Step]:
        llm = self.llm
        # Imported here: the server process has them (the local extra), the command need not.
        import llama_cpp
        import numpy as np

        settings = {k: self.kw.get(k, v) for k, v in _DEFAULTS.items()}
        sampler = {_SAMPLER_NAMES[k]: v for k, v in settings.items()}
        seed = self.kw.get("seed")
        llm.set_seed(int(seed) if seed is not None
                     else random.Random(llm._seed).randint(0, 2**32))
        n_vocab = llm.n_vocab()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        shown = 0  # characters of self.text handed to the client
        for token in llm.generate(self.prompt_ids, **sampler):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
            logprobs = _log_softmax(logits)
            top: list[tuple[int, float]] = []
            if self.asked.top_logprobs:
                best = np.argpartition(-logprobs, self.asked.top_logprobs)[
                    :self.asked.top_logprobs]
                best = best[np.argsort(-logprobs[best])]
                top = [(int(i), float(logprobs[i])) for i in best]
            self.completion_ids.append(int(token))
            self.logprobs.append(float(logprobs[token]))
            self.tops.append(top)
            if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
                self.finish_reason = "stop"
                self.text += decoder.decode(b"", final=True)
                yield Step(int(token), float(logprobs[token]), top, self.text[shown:])
                return
            self.text += decoder.decode(self.piece(token))
            cut = _stop_at(self.text, self.stop)
            if cut is not None:
                self.text = self.text[:cut]
                self.finish_reason = "stop"
                yield Step(int(token), float(logprobs[token]), top, self.text[shown:])
                return
            if len(self.completion_ids) >= self.max_tokens or self.stopped():
                self.text += decoder.decode(b"", final=True)
                yield Step(int(token), float(logprobs[token]), top, self.text[shown:])
                return
            visible = len(self.text) - _held(self.text, self.stop)
            yield Step(int(token), float(logprobs[token]), top, self.text[shown:visible])
            shown = max(shown, visible)

    # -- the answer in vLLM's shape --------------------------------------------------------

    def entry(self, token: int, logprob: float, top: list[tuple[int, float]]) -> dict[str, Any]:
        out = self._logprob(token, logprob)
        out["top_logprobs"] = [self._logprob(t, lp) for t, lp in top]
        return out

    def _logprob(self, token: int, logprob: float) -> dict[str, Any]:
        piece = self.piece(token)
        name = f"token_id:{token}" if self.asked.as_ids else piece.decode("utf-8", "replace")
        return {"token": name, "logprob": logprob, "bytes": list(piece)}

    def usage(self) -> dict[str, int]:
        prompt, completion = len(self.prompt_ids), len(self.completion_ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def completion(self, model: str) -> dict[str, Any]:
        """The whole chat.completion (after iterating)."""
        choice: dict[str, Any] = {
            "index": 0, "message": {"role": "assistant", "content": self.text},
            "finish_reason": self.finish_reason, "logprobs": None}
        if self.asked.logprobs:
            choice["logprobs"] = {"content": [
                self.entry(t, lp, top) for t, lp, top in
                zip(self.completion_ids, self.logprobs, self.tops, strict=True)]}
        out: dict[str, Any] = {"id": self.id, "object": "chat.completion",
                               "created": self.created, "model": model, "choices": [choice],
                               "usage": self.usage()}
        if self.asked.ids:
            choice["token_ids"] = list(self.completion_ids)
            out["prompt_token_ids"] = list(self.prompt_ids)
        return out

    def chunks(self, model: str) -> Iterator[dict[str, Any]]:
        """The stream of chat.completion chunks, one per sampled token (a usage chunk is the
        caller's to add)."""
        base = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": model}
        first: dict[str, Any] = dict(base, choices=[{"index": 0, "delta": {
            "role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
        if self.asked.ids:
            first["prompt_token_ids"] = list(self.prompt_ids)
        yield first
        for step in self:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": step.text}
                                      if step.text else {}, "logprobs": None,
                                      "finish_reason": None}
            if self.asked.logprobs:
                choice["logprobs"] = {"content": [self.entry(step.token, step.logprob,
                                                             step.top)]}
            if self.asked.ids:
                choice["token_ids"] = [step.token]
            yield dict(base, choices=[choice])
        yield dict(base, choices=[{"index": 0, "delta": {}, "logprobs": None,
                                   "finish_reason": self.finish_reason}])


def _continued(llm: Any, text: bytes, add_bos: bool, prefix: list[int]) -> list[int] | None:
    """The prompt ``text`` as ``prefix`` and then the tokens of what follows the prefix's text
    in it; None when it does not begin with that text (or the prefix names no token)."""
    if max(prefix) >= llm.n_vocab():
        return None
    lead = llm.tokenize(b"", add_bos=add_bos, special=True)  # a BOS the model adds, if any
    if prefix[:len(lead)] != lead:
        return None
    head = bytes(llm.detokenize(prefix[len(lead):], special=True))
    if not text.startswith(head):
        return None
    return list(prefix) + llm.tokenize(text[len(head):], add_bos=False, special=True)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    import numpy as np

    values = logits.astype(np.float64)
    top = values.max()
    return values - (top + np.log(np.exp(values - top).sum()))


def _stop_at(text: str, stops: list[str]) -> int | None:
    """Where the first stop string found in ``text`` begins, or None."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def _held(text: str, stops: list[str]) -> int:
    """How many characters at the end of ``text`` could begin a stop string (held back until
    the next token says whether it does)."""
    held = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:k]):
                held = max(held, k)
                break
    return held
