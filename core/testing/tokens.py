"""The token ids and logprobs the scripted model answers when a request asks for them, as vLLM
does: which were asked for (``return_token_ids``, ``logprobs``, the Responses API's
``enable_response_messages`` and ``include``), the ids of the prompt (its conversation rendered
by the scripted chat template) and of the completion (the pieces its answer streams in), and
where each goes in an answer, whole or streamed. A reply may answer without them or with ids
and logprobs of its own (:class:`~interplay.testing.script.ScriptedReply`).

This module owns the ids and logprobs and their places; it must not build the rest of an
answer (:mod:`interplay.testing.answers`) or serve one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from interplay.model import responses as rs
from interplay.testing.script import ScriptedReply, ScriptedTokenizer


@attrs.define
class Tokens:
    """What an answer carries: the prompt's and the completion's ids (None when not asked
    for), the completion's logprob entries (None when not asked for), the ids of each piece
    the answer streams in (empty when the reply gives its own), and whether an entry's token
    is written as its id."""

    prompt: list[int] | None
    ids: list[int] | None
    entries: list[dict[str, Any]] | None
    per_piece: list[list[int]]
    as_ids: bool


def prompt_text(tokenizer: ScriptedTokenizer, body: Mapping[str, Any], api: str) -> str:
    """The text whose ids are a request's prompt ids: its conversation rendered by the
    scripted chat template (:meth:`ScriptedTokenizer.render`)."""
    if api == "responses":
        try:
            messages = rs.responses_to_chat(body)["messages"]
        except rs.BadRequest:
            messages = []
    else:
        messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
    return tokenizer.render(messages)


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


def _entries(tokenizer: ScriptedTokenizer, ids: list[int], as_ids: bool) -> list[dict[str, Any]]:
    out = []
    for ident in ids:
        piece = tokenizer.decode([ident])
        out.append({"token": f"token_id:{ident}" if as_ids else piece,
                    "logprob": tokenizer.logprob(piece),
                    "bytes": list(piece.encode()), "top_logprobs": []})
    return out


def tokens_for(tokenizer: ScriptedTokenizer, body: Mapping[str, Any], reply: ScriptedReply,
               api: str, completion: dict[str, Any]) -> Tokens | None:
    """The ids and logprobs to answer ``completion`` (a Chat Completions body, whose usage
    then counts them) with, or None when none were asked for (or the reply answers without
    them)."""
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
    prompt = tokenizer.encode(prompt_text(tokenizer, body, api))
    per_piece = [tokenizer.encode(p) if p else [] for p in
                 completion_pieces(completion["choices"][0]["message"])]
    ids: list[int] | None = [i for piece in per_piece for i in piece]
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    entries: list[dict[str, Any]] | None = _entries(tokenizer, ids, as_ids)
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
    return Tokens(prompt=prompt if want_ids else None, ids=ids if want_ids else None,
                  entries=entries if want_logprobs else None, per_piece=per_piece,
                  as_ids=as_ids)


def on_completion(completion: dict[str, Any], tokens: Tokens) -> None:
    """Put the ids and logprobs on a whole Chat Completions answer."""
    choice = completion["choices"][0]
    if tokens.prompt is not None:
        completion["prompt_token_ids"] = tokens.prompt
        choice["token_ids"] = tokens.ids
    if tokens.entries is not None:
        choice["logprobs"] = {"content": tokens.entries}


def on_chunks(tokenizer: ScriptedTokenizer, chunks: list[dict[str, Any]],
              tokens: Tokens) -> None:
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
        entries_per = [_entries(tokenizer, ids, tokens.as_ids) for ids in per_piece] \
            if tokens.entries is not None else [None] * len(per_piece)
    for chunk, ids, entries in zip(carriers, per_piece, entries_per, strict=True):
        choice = chunk["choices"][0]
        if tokens.ids is not None:
            choice["token_ids"] = ids
        if entries is not None:
            choice["logprobs"] = {"content": entries}


def on_response(tokenizer: ScriptedTokenizer, response: dict[str, Any],
                body: Mapping[str, Any], tokens: Tokens) -> None:
    """Put the ids (vLLM's ``input_messages`` and ``output_messages``) and logprobs (on the
    first message's text) on a Responses answer."""
    if tokens.prompt is not None:
        response["input_messages"] = [{"type": "raw_message_tokens",
                                       "message": prompt_text(tokenizer, body, "responses"),
                                       "tokens": tokens.prompt}]
        response["output_messages"] = [
            {"type": "raw_message_tokens", "tokens": tokens.ids,
             "message": tokenizer.decode(tokens.ids or [])}]
    if tokens.entries is not None:
        for item in response["output"]:
            if item.get("type") == "message" and item.get("content"):
                item["content"][0]["logprobs"] = tokens.entries
                break
