"""What the scripted model (:mod:`interplay.testing.scripted`) answers from and records: a
reply (:class:`ScriptedReply`, with its :class:`ScriptedToolCall`), the request as received
(:class:`ScriptedRequest`), and a script (replies in order, or a handler called per request)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from interplay._plumbing import codec as _codec
from interplay.model import responses as rs


@attrs.frozen
class ScriptedToolCall:
    """A tool call in a scripted reply (``ScriptedReply.tool_call(...)``,
    ``ScriptedReply.calls([...])``): the tool's ``name``, its ``arguments`` (an object, or JSON
    text sent as it is, valid or not) and the call's id (made up when None)."""

    name: str
    arguments: dict[str, Any] | str = attrs.Factory(dict)
    call_id: str | None = None

    def arguments_json(self) -> str:
        """The arguments as the JSON text a model writes (text given is kept as it is)."""
        if isinstance(self.arguments, str):
            return self.arguments
        return _codec.dumps(self.arguments).decode()


@attrs.frozen
class ScriptedReply:
    """One scripted answer. Build it with the class methods; ``latency_s`` works on any."""

    #: The reply's text (None: none, as beside tool calls).
    content: str | None = None
    #: The tool calls it makes, in order.
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    #: Responses output items, answered as they are to /v1/responses (:meth:`output_items`).
    output: tuple[dict[str, Any], ...] | None = None
    #: Seconds the server waits before it answers.
    latency_s: float = 0.0
    #: An HTTP error status to answer with instead (:meth:`fault`).
    status: int | None = None
    #: The Retry-After header of a fault (seconds, or an HTTP date).
    retry_after: float | str | None = None
    #: Never answer: hold the request until its client gives up (:meth:`hang`).
    hangs: bool = False
    #: Cut the connection partway through the answer (:meth:`drop`).
    drops: bool = False
    #: Answer with a body that is not a valid completion (:meth:`malformed`).
    is_malformed: bool = False
    #: The finish_reason answered (None: stop, or tool_calls when it calls tools).
    finish_reason: str | None = None
    #: Answer plain JSON even to a streamed request, as some OpenAI-compatible servers do.
    ignores_stream: bool = False
    #: Answer a request for token ids and logprobs (``return_token_ids``, ``logprobs``,
    #: vLLM's Responses ``enable_response_messages``) with them, as vLLM does; False answers
    #: without them, as most endpoints do.
    returns_tokens: bool = True
    #: What to answer instead of the ids and logprobs the scripted tokenizer gives (a
    #: misbehaving endpoint: ids without logprobs, counts that differ).
    completion_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    #: Whether ``completion_ids`` and ``logprobs`` replace the tokenizer's (None in them then
    #: leaves that list out).
    tokens_given: bool = False

    @classmethod
    def text(cls, s: str, *, latency_s: float = 0.0) -> ScriptedReply:
        """A plain text reply (a bare string in a script is one too)."""
        return cls(content=s, latency_s=latency_s)

    @classmethod
    def tool_call(cls, name: str, arguments: dict[str, Any] | None = None,
                  call_id: str | None = None, *, text: str | None = None,
                  latency_s: float = 0.0) -> ScriptedReply:
        """One call of the tool ``name`` with ``arguments`` (a dict, or JSON text as a model
        may write it), its id ``call_id`` (None: one is made), after ``text`` if given."""
        return cls(content=text, tool_calls=(ScriptedToolCall(name, arguments or {}, call_id),),
                   latency_s=latency_s)

    @classmethod
    def calls(cls, calls: Iterable[ScriptedToolCall | tuple[str, dict[str, Any]]], *,
                    text: str | None = None, latency_s: float = 0.0) -> ScriptedReply:
        """Several tool calls in one reply (optionally after some text)."""
        made = tuple(c if isinstance(c, ScriptedToolCall) else ScriptedToolCall(c[0], c[1])
                     for c in calls)
        return cls(content=text, tool_calls=made, latency_s=latency_s)

    def with_tool_call(self, name: str, arguments: dict[str, Any] | None = None,
                       call_id: str | None = None) -> ScriptedReply:
        """This reply with one more tool call after its others."""
        return attrs.evolve(self, tool_calls=(*self.tool_calls,
                                              ScriptedToolCall(name, arguments or {}, call_id)))

    @classmethod
    def output_items(cls, items: Iterable[dict[str, Any]], *,
                     latency_s: float = 0.0) -> ScriptedReply:
        """Responses output items, returned verbatim to /v1/responses requests."""
        return cls(output=tuple(items), latency_s=latency_s)

    @classmethod
    def fault(cls, status: int, retry_after: float | str | None = None, *,
              latency_s: float = 0.0) -> ScriptedReply:
        """An HTTP error answer (429, 500, 401, ...), with a Retry-After header if given:
        what a client's retries and error types are tested against."""
        return cls(status=status, retry_after=retry_after, latency_s=latency_s)

    @classmethod
    def hang(cls) -> ScriptedReply:
        """No answer at all: the request is held until its client gives up (a timeout)."""
        return cls(hangs=True)

    @classmethod
    def drop(cls, text: str = "this stream is cut") -> ScriptedReply:
        """An answer whose connection is cut partway through (streamed: after some of
        ``text``)."""
        return cls(content=text, drops=True)

    @classmethod
    def malformed(cls) -> ScriptedReply:
        """A 200 answer whose body is not a completion."""
        return cls(is_malformed=True)

    def unstreamed(self) -> ScriptedReply:
        """This reply, answered as one JSON body even when the request asks to stream."""
        return attrs.evolve(self, ignores_stream=True)

    def without_tokens(self) -> ScriptedReply:
        """This reply, answered without token ids or logprobs even when they are asked for."""
        return attrs.evolve(self, returns_tokens=False)

    def with_tokens(self, completion_ids: Iterable[int] | None = None,
                    logprobs: Iterable[float] | None = None) -> ScriptedReply:
        """This reply, answering these completion ids and logprobs when tokens are asked for
        (None: leave that list out of the answer)."""
        return attrs.evolve(self, tokens_given=True,
                            completion_ids=None if completion_ids is None
                            else tuple(completion_ids),
                            logprobs=None if logprobs is None else tuple(logprobs))


@attrs.frozen
class ScriptedRequest:
    """What the scripted model received, as a request function (``ScriptedModel(fn)``) gets
    it: ``api`` (``"chat.completions"`` or ``"responses"``), the parsed JSON ``body``, the
    ``headers`` (lower-case names) and the ``path``; ``messages`` (Chat Completions),
    ``input`` (Responses), ``stream`` and :meth:`last_user_text` (either API) read the body."""

    api: str  # "chat.completions" or "responses"
    body: dict[str, Any]
    headers: dict[str, str]
    path: str

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or ())

    @property
    def input(self) -> Any:
        return self.body.get("input")

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    def last_user_text(self) -> str:
        """The text of the request's last user message (either API); "" when it has none."""
        if self.api == "responses":
            try:
                msgs = rs.responses_to_chat(self.body)["messages"]
            except rs.BadRequest:
                return ""
        else:
            msgs = self.messages
        for m in reversed(msgs):
            if m.get("role") == "user":
                c = m.get("content")
                return c if isinstance(c, str) else "".join(
                    str(p.get("text", "")) for p in c or () if isinstance(p, Mapping))
        return ""


Handler = Callable[[ScriptedRequest], ScriptedReply | str]
Script = Iterable[ScriptedReply | str] | Handler


class ScriptedTokenizer:
    """The scripted model's tokenizer: a text's pieces (a special token such as ``<|end|>``,
    or a run of spaces with the word after it) numbered in the order first met, so ids decode
    back to their text exactly."""

    _PIECE = re.compile(r"<\|\w+\|>|\s*(?:(?!<\|)\S)+|\s+")
    #: What ends a reply (the last completion id, as an end-of-turn token), and each message.
    END = "<|end|>"

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: list[str] = []
        self._lock = threading.Lock()

    def pieces(self, text: str) -> list[str]:
        """``text`` cut into the pieces its ids stand for (words, spaces, special tokens)."""
        return self._PIECE.findall(text)

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``'s pieces (a piece seen first gets the next id)."""
        with self._lock:
            out = []
            for piece in self.pieces(text):
                ident = self._ids.get(piece)
                if ident is None:
                    ident = self._ids[piece] = len(self._pieces)
                    self._pieces.append(piece)
                out.append(ident)
            return out

    def decode(self, ids: Iterable[int], *, special: bool = False) -> str:
        """The text of ``ids``; special tokens left out unless ``special``."""
        pieces = (self._pieces[i] for i in ids)
        return "".join(p for p in pieces if special or not self.is_special(p))

    @staticmethod
    def is_special(piece: str) -> bool:
        """Whether ``piece`` is a special token (``<|...|>``)."""
        return piece.startswith("<|") and piece.endswith("|>")

    @staticmethod
    def render(messages: Iterable[Mapping[str, Any]]) -> str:
        """A conversation as the scripted chat template writes it: each message between its
        role's token and ``<|end|>``, then the assistant's token. A conversation that grows
        renders as the earlier rendering, the reply and its end, then the rest, as a real
        chat template does."""
        out = []
        for m in messages:
            content = m.get("content")
            text = content if isinstance(content, str) else "".join(
                str(p.get("text", "")) for p in content or () if isinstance(p, Mapping))
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                text += f"<{fn.get('name')}>{fn.get('arguments')}"
            out.append(f"<|{m.get('role')}|>{text}<|end|>")
        return "".join(out) + "<|assistant|>"

    @staticmethod
    def logprob(piece: str) -> float:
        """A piece's log-probability: made up, but the same for the same piece."""
        return -round(0.05 + (sum(map(ord, piece)) % 97) / 40, 6)


def echo(request: ScriptedRequest) -> ScriptedReply:
    """The default handler: answers with the last user message."""
    return ScriptedReply.text(f"echo: {request.last_user_text()}")
