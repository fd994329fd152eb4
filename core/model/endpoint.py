"""Where a model lives: the endpoint config shared by agents, judges and the run."""

from __future__ import annotations

import os
from typing import Any, Literal

import attrs

from interplay.errors import InterplayError


@attrs.define
class Endpoint:
    """An OpenAI-compatible endpoint.

    ``base_url`` None means the embedded local model (started on demand). The API key is read
    from the environment variable named by ``api_key_var``, never stored in config.

    ``api`` is what the endpoint serves to programs that speak Responses (the codex CLI):
    "chat" (Chat Completions only, like vLLM and llama.cpp: their Responses requests are
    translated) or "responses" (the Responses API too, like OpenAI: their requests are
    forwarded as they are). interplay's own calls use Chat Completions either way.
    """

    base_url: str | None = None
    model: str = "default"
    api_key_var: str | None = None
    sampling: dict[str, Any] = attrs.Factory(dict)
    timeout_s: float = 120.0
    max_retries: int = 4
    retry_max_s: float = 60.0
    api: Literal["chat", "responses"] = "chat"

    def api_key(self) -> str:
        if not self.api_key_var:
            return "none"
        value = os.environ.get(self.api_key_var)
        if value is None:
            raise InterplayError(
                f"model.api_key_var names {self.api_key_var!r}, which is not set; "
                f"export {self.api_key_var}=... or change model.api_key_var"
            )
        return value

    @property
    def is_local(self) -> bool:
        return self.base_url is None
