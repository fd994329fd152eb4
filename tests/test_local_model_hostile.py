"""``interplay serve-local`` (the embedded model's server) answers a malformed request with a
400 that names what is wrong, never a 500, and goes on serving: over HTTP to the real server
process, on its chat route and its /tokenize. Only requests refused before generation are
sent, so the model never runs here but for one four-token call."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from interplay.model.local import LocalModel

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                reason="llama_cpp is not installed (run: bash .ci/setup)")

USER = {"role": "user", "content": "hi"}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with LocalModel() as model:
        base = model.endpoint.base_url
        assert base is not None
        yield base + "/chat/completions"


def _with(**fields: Any) -> dict[str, Any]:
    return {"messages": [USER], "max_tokens": 1, **fields}


def _assistant_calls(calls: Any) -> dict[str, Any]:
    return {"messages": [{"role": "assistant", "content": "a", "tool_calls": calls}, USER],
            "max_tokens": 1}


HOSTILE: list[tuple[bytes | dict[str, Any], str]] = [
    (b"[1, 2]", "must be a JSON object"),
    (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "not valid JSON"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "not valid JSON"),
    (b'{"messages": ' + b"[" * 300 + b"]" * 300 + b"}", "nests deeper"),
    ({"messages": "hi"}, "'messages' must be a list"),
    ({"messages": []}, "non-empty"),
    ({"messages": [1]}, "messages[0] must be an object with a role"),
    ({"messages": [{"role": 1.5, "content": "hi"}]}, "messages[0] must be an object with a role"),
    ({"messages": [{"role": "user", "content": 1.5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": {"text": "hi"}}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, {
        "type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]},
     "messages[0].content[1] is of type 'image_url': SmolLM2-135M-Instruct reads text only"),
    (_assistant_calls("f()"), "messages[0].tool_calls must be a list"),
    (_assistant_calls([None]), "messages[0].tool_calls[0]"),
    (_assistant_calls([1]), "messages[0].tool_calls[0]"),
    (_assistant_calls([{"function": 1}]), "messages[0].tool_calls[0]"),
    (_assistant_calls([{"function": {"name": "f", "arguments": {"a": 1}}}]),
     "messages[0].tool_calls[0]"),
    (_with(max_tokens=1.5), "'max_tokens' must be an integer"),
    (_with(stream="yes"), "'stream' must be a boolean"),
    (_with(stream_options=1), "'stream_options' must be an object"),
    (_with(temperature="hot"), "'temperature' must be a number"),
    (_with(stop=5), "'stop' must be a string or a list of strings"),
    (_with(tools="f"), "'tools' must be a list"),
    (_with(tools=[{"type": "function", "function": {"name": "f", "parameters": 1}}]),
     "tools[0].function.parameters"),
    (_with(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="maybe"),
     "'tool_choice' must be"),
]


TOKENIZE: list[tuple[bytes | dict[str, Any], str]] = [
    (b"[1, 2]", "must be a JSON object"),
    (b'{"messages": ' + b"[" * 300 + b"]" * 300 + b"}", "nests deeper"),
    ({"messages": "hi"}, "'messages' must be a list"),
    ({"prompt": 5}, "'messages' must be a non-empty list"),
    ({"messages": [{"role": "user", "content": 1.5}]}, "messages[0].content"),
    (_assistant_calls([{"function": 1}]), "messages[0].tool_calls[0]"),
    ({"prompt": "hi", "add_special_tokens": "yes"}, "'add_special_tokens' must be a boolean"),
    ({"messages": [USER], "add_generation_prompt": False}, "'add_generation_prompt'"),
    (_with(tools=[{"type": "function", "function": {"name": "f", "parameters": 1}}]),
     "tools[0].function.parameters"),
    (_with(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="maybe"),
     "'tool_choice' must be"),
]
CASES = [(body, reason, "/chat/completions") for body, reason in HOSTILE] + [
    (body, reason, "/tokenize") for body, reason in TOKENIZE]


def _at(url: str, route: str) -> str:
    return url if route == "/chat/completions" else url.removesuffix("/v1/chat/completions") \
        + route


@pytest.mark.parametrize(("body", "reason", "route"), CASES)
def test_a_malformed_request_is_a_400_that_says_why(url: str, body: bytes | dict[str, Any],
                                                    reason: str, route: str) -> None:
    kw: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = httpx.post(_at(url, route), headers={"content-type": "application/json"},
                          timeout=30, **kw)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert reason in error["message"]
    assert len(error["message"].splitlines()) == 1


def test_the_server_goes_on_serving_after_them(url: str) -> None:
    for body, _, route in CASES:
        kw: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
        httpx.post(_at(url, route), headers={"content-type": "application/json"}, timeout=30,
                   **kw)
    models = httpx.get(url.replace("/chat/completions", "/models"), timeout=30)
    assert models.status_code == 200 and models.json()["data"]


def test_a_tool_without_parameters_is_one_of_no_arguments(url: str) -> None:
    """The API lets a function leave out ``parameters``; the tool handler's template lists
    every tool's: it is listed as taking an empty object, counted and called."""
    bare = {"type": "function", "function": {"name": "ping"}}
    counted = httpx.post(_at(url, "/tokenize"), json=_with(tools=[bare]), timeout=30)
    called = httpx.post(url, json=_with(tools=[bare], max_tokens=4, tool_choice={
        "type": "function", "function": {"name": "ping"}}), timeout=60)
    assert counted.status_code == 200, counted.text
    assert counted.json()["count"] > httpx.post(_at(url, "/tokenize"), json=_with(),
                                                timeout=30).json()["count"]
    assert called.status_code == 200, called.text
    [call] = called.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "ping"
