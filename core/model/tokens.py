"""Token capture at the model boundary: the request fields that ask an endpoint for the token
ids and logprobs of a call, and reading them out of what it answers.

What is asked for is vLLM's (read from its OpenAI-compatible server): on Chat Completions,
``logprobs: true`` (a ``logprobs.content`` entry per sampled token), ``return_token_ids: true``
(``prompt_token_ids`` on the response, or on the first chunk of a stream, and ``token_ids`` on
each choice, or each chunk's delta) and ``return_tokens_as_token_ids: true`` (a logprob's
``token`` written ``token_id:N``, how a vLLM older than ``return_token_ids`` names the ids it
sampled); on Responses, ``include: ["message.output_text.logprobs"]`` and vLLM's
``enable_response_messages: true`` (``input_messages`` and ``output_messages`` holding the
prompt's and the generation's token lists). llama.cpp's server gives a logprob's ``id``. Ids
are taken from whichever of these came; what none gave is recorded as missing, never made up.

What the caller did not ask for itself is taken out of the answer it gets (and the answer a
call records): a program that did not ask for logprobs does not see them. Pure functions and
one small stateful reader of streamed chunks; no I/O, no logging.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from interplay.values.records import Tokens, Usage

#: The request field holding the ids a call continues from (see the module docstring).
PREFIX_FIELD = "required_prefix_token_ids"
#: Every request field capture may add, for telling a refusal of one of them apart.
REQUEST_FIELDS = (PREFIX_FIELD, "return_token_ids", "return_tokens_as_token_ids", "logprobs",
                  "enable_response_messages", "message.output_text.logprobs")
_LOGPROBS_INCLUDE = "message.output_text.logprobs"
_ID_PREFIX = "token_id:"


def ask_chat(body: Mapping[str, Any], prefix: Sequence[int] | None = None,
             ) -> tuple[dict[str, Any], frozenset[str]]:
    """``body`` (a Chat Completions request) with the capture fields added (and ``prefix``, the
    ids it continues from, as :data:`PREFIX_FIELD`), and what of the answer to take out again:
    the parts its sender did not ask for (``"ids"``, ``"logprobs"``)."""
    out = dict(body)
    if prefix:
        out[PREFIX_FIELD] = list(prefix)
    strip = set()
    if not out.get("return_token_ids"):
        out["return_token_ids"] = True
        strip.add("ids")
    if not out.get("logprobs"):
        out["logprobs"] = True
        # The sender reads no logprobs, so their token strings may name ids instead.
        out.setdefault("return_tokens_as_token_ids", True)
        strip.add("logprobs")
    return out, frozenset(strip)


def ask_responses(body: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """:func:`ask_chat` for a Responses request forwarded as it is."""
    out = dict(body)
    strip = set()
    include = out.get("include")
    include = list(include) if isinstance(include, list) else []
    if _LOGPROBS_INCLUDE not in include:
        out["include"] = [*include, _LOGPROBS_INCLUDE]
        strip.add("logprobs")
    if not out.get("enable_response_messages"):
        out["enable_response_messages"] = True
        strip.add("ids")
    return out, frozenset(strip)


def continuation(calls: Sequence[Any]) -> list[int] | None:
    """The ids a trace's next call continues from: the prompt and completion ids of its last
    call that has both (``calls`` are :class:`~interplay.values.records.ModelCall`), or None."""
    for call in reversed(calls):
        if call.error_type is not None:
            continue
        tokens = call.tokens
        if tokens is None or tokens.prompt_ids is None or tokens.completion_ids is None:
            return None
        return [*tokens.prompt_ids, *tokens.completion_ids]
    return None


def diverged_at(prefix: Sequence[int], prompt: Sequence[int]) -> int | None:
    """Where ``prompt`` stops holding ``prefix`` (the previous call's ids) at its start: the
    index of the first id that differs (``len(prompt)`` when it is shorter), or None when it
    holds all of it."""
    n = min(len(prefix), len(prompt))
    for i in range(n):
        if prefix[i] != prompt[i]:
            return i
    return None if len(prompt) >= len(prefix) else n


def refusal_hint(body: bytes | None) -> str | None:
    """What to do when an endpoint refuses a call whose error ``body`` names a field capture
    added (an endpoint other than vLLM that checks its parameters), else None."""
    if not body:
        return None
    text = body.decode("utf-8", "replace")
    named = [f for f in REQUEST_FIELDS if f in text]
    if not named:
        return None
    if named[0] == PREFIX_FIELD:
        return (f"the endpoint refused {PREFIX_FIELD}, which model.continue_tokens sends; set "
                f"continue_tokens = false")
    return (f"the endpoint refused {named[0]}, which model.capture_tokens asks for (vLLM "
            f"serves it); point the seat at an endpoint that returns token ids, or set "
            f"capture_tokens = false")


# -- reading -------------------------------------------------------------------------------------


def compact(logprob: float) -> float:
    """A logprob with the digits a float32 holds: engines compute them in float32, and 9
    significant digits give back the same float32 in half the characters of a double."""
    return float(f"{logprob:.9g}")


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(v) is int for v in value):
        return value
    return None


class _Reader:
    """What one answer (or stream) gave, collected, then checked into a :class:`Tokens`."""

    def __init__(self) -> None:
        self.prompt: list[int] | None = None
        self.ids: list[int] | None = None
        self.logprobs: list[float] | None = None
        # Ids named by the logprob entries themselves (llama.cpp's id, vLLM's token_id:N).
        self.entry_ids: list[int] | None = []
        self.warnings: list[str] = []
        # Set once an entry without a number is met: a list with a hole is no list.
        self.bad_logprobs = False

    def add_prompt(self, value: Any) -> None:
        if value is None or self.prompt is not None:
            return
        ids = _int_list(value)
        if ids is None:
            self._warn("prompt token ids are not a list of integers")
        self.prompt = ids

    def add_ids(self, value: Any) -> None:
        if value is None:
            return
        ids = _int_list(value)
        if ids is None:
            self._warn("completion token ids are not a list of integers")
            return
        self.ids = ids if self.ids is None else self.ids + ids

    def add_logprobs(self, entries: Any) -> None:
        if entries is None or self.bad_logprobs:
            return
        if not isinstance(entries, list):
            self._warn("logprobs are not a list")
            self.bad_logprobs, self.logprobs, self.entry_ids = True, None, None
            return
        values = self.logprobs if self.logprobs is not None else []
        for entry in entries:
            value = entry.get("logprob") if isinstance(entry, Mapping) else None
            if not isinstance(value, int | float) or isinstance(value, bool):
                self._warn("a logprob entry has no number")
                self.bad_logprobs, self.logprobs, self.entry_ids = True, None, None
                return
            values.append(compact(float(value)))
            if self.entry_ids is not None:
                self.entry_ids = _entry_id(entry, self.entry_ids)
        self.logprobs = values

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def result(self, usage: Usage | None) -> Tokens:
        ids = self.ids
        if self.entry_ids:
            if ids is None:
                ids = self.entry_ids
            elif ids != self.entry_ids:
                self._warn("the logprob entries name other ids than token_ids")
        tokens = Tokens(prompt_ids=self.prompt, completion_ids=ids, logprobs=self.logprobs,
                        warnings=self.warnings)
        check(tokens, usage)
        return tokens


def _entry_id(entry: Mapping[str, Any], ids: list[int]) -> list[int] | None:
    ident = entry.get("id")
    if type(ident) is int:
        ids.append(ident)
        return ids
    token = entry.get("token")
    if isinstance(token, str) and token.startswith(_ID_PREFIX):
        try:
            ids.append(int(token[len(_ID_PREFIX):]))
            return ids
        except ValueError:
            return None
    return None


def check(tokens: Tokens, usage: Usage | None) -> None:
    """Fill ``tokens.missing`` and add a warning for each count that does not fit."""
    tokens.missing = [name for name, value in (("prompt_ids", tokens.prompt_ids),
                                               ("completion_ids", tokens.completion_ids),
                                               ("logprobs", tokens.logprobs)) if value is None]
    warn = tokens.warnings
    ids, logprobs = tokens.completion_ids, tokens.logprobs
    if ids is not None and logprobs is None:
        warn.append("completion ids without logprobs")
    elif ids is None and logprobs is not None:
        warn.append("logprobs without completion ids")
    elif ids is not None and logprobs is not None and len(ids) != len(logprobs):
        warn.append(f"{len(logprobs)} logprobs for {len(ids)} completion ids")
    if usage is not None:
        if tokens.prompt_ids is not None and usage.prompt_tokens and \
                usage.prompt_tokens != len(tokens.prompt_ids):
            warn.append(f"usage counts {usage.prompt_tokens} prompt tokens, the endpoint "
                        f"returned {len(tokens.prompt_ids)} ids")
        if ids is not None and usage.completion_tokens and usage.completion_tokens != len(ids):
            warn.append(f"usage counts {usage.completion_tokens} completion tokens, the "
                        f"endpoint returned {len(ids)} ids")


def _first_choice(response: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list):
        for ch in choices:
            if isinstance(ch, Mapping) and ch.get("index", 0) == 0:
                return ch
    return {}


def _content(logprobs: Any) -> Any:
    return logprobs.get("content") if isinstance(logprobs, Mapping) else None


def from_chat(response: Mapping[str, Any], usage: Usage | None) -> Tokens:
    """The tokens of a whole chat.completion (its first choice)."""
    reader = _Reader()
    reader.add_prompt(response.get("prompt_token_ids"))
    choice = _first_choice(response)
    reader.add_ids(choice.get("token_ids"))
    reader.add_logprobs(_content(choice.get("logprobs")))
    return reader.result(usage)


class StreamTokens:
    """Reads the tokens of a chat.completion stream, chunk by chunk."""

    def __init__(self) -> None:
        self._reader = _Reader()

    def add(self, chunk: Mapping[str, Any]) -> None:
        reader = self._reader
        reader.add_prompt(chunk.get("prompt_token_ids"))
        for ch in chunk.get("choices") or ():
            if isinstance(ch, Mapping) and ch.get("index", 0) == 0:
                reader.add_ids(ch.get("token_ids"))
                reader.add_logprobs(_content(ch.get("logprobs")))

    def result(self, usage: Usage | None) -> Tokens:
        return self._reader.result(usage)


def strip_chat(data: Mapping[str, Any], strip: frozenset[str]) -> dict[str, Any]:
    """A chat.completion or one of its chunks without what ``strip`` names (see
    :func:`ask_chat`)."""
    out = dict(data)
    if "ids" in strip:
        out.pop("prompt_token_ids", None)
    choices = out.get("choices")
    if isinstance(choices, list):
        kept = []
        for ch in choices:
            if isinstance(ch, Mapping):
                ch = dict(ch)
                if "ids" in strip:
                    ch.pop("token_ids", None)
                if "logprobs" in strip and "logprobs" in ch:
                    ch["logprobs"] = None
            kept.append(ch)
        out["choices"] = kept
    return out


def _single(reader: _Reader, response: Mapping[str, Any], key: str,
            many: str) -> list[int] | None:
    """The one token list of ``response[key]``, or None (with a warning when there is
    something else there)."""
    items = response.get(key)
    lists = _raw_tokens(items)
    if lists is None:
        if items:
            reader._warn(f"{key} hold no token lists")
        return None
    if len(lists) != 1:
        reader._warn(f"the response holds {len(lists)} {many}")
        return None
    return lists[0]


def _raw_tokens(items: Any) -> list[list[int]] | None:
    """The token lists of vLLM's ``input_messages``/``output_messages`` entries; None when
    there are none, or some entry is not a token list (a harmony model's messages)."""
    if not isinstance(items, list) or not items:
        return None
    out = []
    for item in items:
        ids = _int_list(item.get("tokens")) if isinstance(item, Mapping) else None
        if ids is None:
            return None
        out.append(ids)
    return out


def from_response(response: Mapping[str, Any], usage: Usage | None) -> Tokens:
    """The tokens of a Responses object (vLLM's, with ``enable_response_messages``)."""
    reader = _Reader()
    reader.add_prompt(_single(reader, response, "input_messages", "prompts"))
    # More than one generation: the server ran tools of its own between them, and the
    # response has no one completion.
    reader.add_ids(_single(reader, response, "output_messages", "generations"))
    entries = None
    for item in response.get("output") or ():
        if not isinstance(item, Mapping) or item.get("type") != "message":
            continue
        for part in item.get("content") or ():
            if isinstance(part, Mapping) and isinstance(part.get("logprobs"), list):
                entries = [*(entries or ()), *part["logprobs"]]
    reader.add_logprobs(entries)
    return reader.result(usage)


def strip_response(response: Mapping[str, Any], strip: frozenset[str]) -> dict[str, Any]:
    """A Responses object without what ``strip`` names (see :func:`ask_responses`)."""
    out = dict(response)
    if "ids" in strip:
        out.pop("input_messages", None)
        out.pop("output_messages", None)
    if "logprobs" in strip and isinstance(out.get("output"), list):
        out["output"] = [_without_logprobs(item) for item in out["output"]]
    return out


def _without_logprobs(item: Any) -> Any:
    if not isinstance(item, Mapping) or not isinstance(item.get("content"), list):
        return item
    parts: Sequence[Any] = item["content"]
    return {**item, "content": [{**p, "logprobs": []} if isinstance(p, Mapping)
                                and p.get("logprobs") else p for p in parts]}
