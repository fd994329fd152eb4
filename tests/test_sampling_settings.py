"""Sampling settings are checked when the config loads: a known key for its type, an unknown
one refused with the known ones listed; a provider's own field goes through
``model.extra_body``, sent as it is."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from interplay.config.endpoint import Endpoint, Sampling
from interplay.errors import InterplayError
from interplay.model.client import ModelClient
from interplay.testing import ScriptedModel, ScriptedReply
from interplay.testing.cli import run_interplay
from interplay.values.records import Message

KNOWN = [f.name for f in attrs.fields(Sampling)]


def test_an_unknown_sampling_key_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InterplayError) as info:
        Endpoint(sampling={"temprature": 0.3})
    message = str(info.value)
    assert message.startswith("sampling.temprature: not a sampling setting")
    assert all(name in message for name in KNOWN)
    assert "model.extra_body" in message and "\n" not in message


@pytest.mark.parametrize(("sampling", "problem"), [
    ({"temperature": "abc"}, "sampling.temperature: expected float, got 'abc'"),
    ({"max_tokens": 1.5}, "sampling.max_tokens: expected int, got 1.5"),
    ({"seed": True}, "sampling.seed: expected int, got True"),
    ({"stop": ["ok", 3]}, "sampling.stop: expected str or list"),
    ({"logit_bias": [1]}, "sampling.logit_bias: expected"),
])
def test_a_known_sampling_key_of_the_wrong_type_is_refused(sampling: dict[str, object],
                                                           problem: str) -> None:
    with pytest.raises(InterplayError, match="^" + problem.replace("(", r"\(")):
        Endpoint(sampling=sampling)


def test_every_known_sampling_key_of_its_type_loads() -> None:
    values = {"temperature": 1, "top_p": 0.9, "max_tokens": 8, "max_completion_tokens": 8,
              "stop": "x", "seed": 3, "presence_penalty": 0.5, "frequency_penalty": -0.5,
              "logit_bias": {"12": -100}, "reasoning_effort": "low",
              "response_format": {"type": "json_object"}, "parallel_tool_calls": False,
              "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1, "repetition_penalty": 1.1}
    assert sorted(values) == sorted(KNOWN)
    assert Endpoint(sampling=values).sampling == values
    assert Endpoint(sampling={"stop": ["a", "b"], "temperature": None}).sampling["stop"] == [
        "a", "b"]


def test_each_sampling_field_is_documented() -> None:
    source = Path(__file__).parents[1].joinpath("core", "config", "endpoint.py").read_text()
    body = source.split("class Sampling:")[1].split("\ndef ")[0]
    for name in KNOWN:
        before = body.split(f"\n    {name}: ")[0].rstrip().splitlines()[-1]
        assert before.strip().startswith("#:"), name


async def test_extra_body_is_sent_as_it_is_over_the_sampling() -> None:
    async with ScriptedModel([ScriptedReply.text("ok")]) as m:
        endpoint = attrs.evolve(m.endpoint, sampling={"temperature": 0.5, "seed": 1},
                                extra_body={"guided_json": {"type": "object"}, "seed": 2})
        client = ModelClient(endpoint)
        try:
            call = await client.chat([Message("user", "hi")])
        finally:
            await client.aclose()
    body = m.requests[0].body
    assert body["guided_json"] == {"type": "object"}
    assert body["temperature"] == 0.5 and body["seed"] == 2
    assert call.request == body


def test_extra_body_must_be_a_table() -> None:
    with pytest.raises(InterplayError, match=r"^extra_body: expected a table"):
        Endpoint(extra_body=["x"])  # type: ignore[arg-type]


def test_the_command_refuses_a_misspelt_sampling_key_before_any_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_interplay("eval", "echo", "-n", "1", "-o", str(out), "--base-url",
                           "http://127.0.0.1:9/v1", "--set", "model.sampling.temprature=0.3")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "model: sampling.temprature: not a sampling setting" in lines[0]
    assert not out.exists()


def test_the_docs_list_every_sampling_setting() -> None:
    docs = Path(__file__).parents[1].joinpath("docs", "api.md").read_text()
    table = docs.split("## Sampling settings")[1].split("\n## ")[0]
    assert [line.split("`")[1] for line in table.splitlines()
            if line.startswith("| `")] == KNOWN
