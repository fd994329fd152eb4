"""The model boundary: how a model is reached (where it lives and the settings of the way there
are :class:`~interplay.config.endpoint.Endpoint`, a value the contracts speak in), the client every
Chat Completions call interplay makes goes through (:mod:`interplay.model.client`) with its
transport (:mod:`interplay.model.transport`), retry policy (:mod:`interplay.model.retries`)
and reading of what comes back (:mod:`interplay.model.wire`), the OpenAI wire format every server
interplay runs shares (a request's strict parse and shape check, :mod:`interplay.model.request`;
Responses to and from Chat Completions, :mod:`interplay.model.responses`), token capture
(:mod:`interplay.model.tokens`: the ids and logprobs a call asks for and reads back), and the
embedded default model (:mod:`interplay.model.local`, its server process
:mod:`interplay.model.local_server`, which samples the tokens itself when they are asked for:
:mod:`interplay.model.local_generation`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interplay._plumbing.facade import lazy_names

if TYPE_CHECKING:
    from interplay.model.local import LocalTokenizer, local_tokenizer
    from interplay.model.retries import Failure as AttemptFailure
    from interplay.model.retries import RetryPolicy
    from interplay.model.wire import assistant_message, request_messages, request_tool_names

_NAMES = {
    "AttemptFailure": "interplay.model.retries:Failure",
    "LocalTokenizer": "interplay.model.local:LocalTokenizer",
    "RetryPolicy": "interplay.model.retries:RetryPolicy",
    "assistant_message": "interplay.model.wire:assistant_message",
    "local_tokenizer": "interplay.model.local:local_tokenizer",
    "request_messages": "interplay.model.wire:request_messages",
    "request_tool_names": "interplay.model.wire:request_tool_names",
}
__all__ = [
    "AttemptFailure",
    "LocalTokenizer",
    "RetryPolicy",
    "assistant_message",
    "local_tokenizer",
    "request_messages",
    "request_tool_names",
]
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
