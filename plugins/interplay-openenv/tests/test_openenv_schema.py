"""Replies made into actions of a schema (the JSON schemas openenv-core's pydantic Action models
declare), and observations made into messages."""

from __future__ import annotations

from typing import Any

import pytest
from openenv.core.env_server import Action
from openenv_apps import Move, Say
from pydantic import Field

from interplay_openenv.demo import GuessAction
from interplay_openenv.schema import ActionError, ActionSchema, render


def schema(action: type[Action]) -> ActionSchema:
    return ActionSchema.from_json_schema(action.model_json_schema())


def test_metadata_is_not_one_of_the_actions_fields() -> None:
    assert [f.name for f in schema(Say).fields] == ["message"]
    assert [(f.name, f.required) for f in schema(Move).fields] == [("direction", True),
                                                                  ("steps", False)]


@pytest.mark.parametrize("text", ["hello", "  two words\n", '{"message": "json"}', ""])
def test_a_single_string_field_takes_the_text_as_it_is(text: str) -> None:
    assert schema(Say).parse(text) == {"message": text}


@pytest.mark.parametrize(("text", "guess"), [("42", 42), (" 7\n", 7), ('{"guess": 9}', 9),
                                             ("```json\n13\n```", 13)])
def test_a_single_number_field_takes_json(text: str, guess: int) -> None:
    assert schema(GuessAction).parse(text) == {"guess": guess}


@pytest.mark.parametrize(("text", "problem"), [
    ("forty-two", "could not be read as JSON"),
    ("4.5", "guess must be integer, got number 4.5"),
    ("true", "guess must be integer, got boolean true"),
    ('"42"', "guess must be integer, got string"),
])
def test_a_single_number_field_refuses_what_is_not_one(text: str, problem: str) -> None:
    with pytest.raises(ActionError) as info:
        schema(GuessAction).parse(text)
    assert problem in str(info.value)
    assert "Reply with the action's guess (integer, required)" in str(info.value)


@pytest.mark.parametrize("text", [
    '{"direction": "left", "steps": 2}',
    'I will go left.\n```json\n{"direction": "left", "steps": 2}\n```',
    'Going {"direction": "left", "steps": 2} now',
])
def test_several_fields_take_a_json_object_wherever_it_stands(text: str) -> None:
    assert schema(Move).parse(text) == {"direction": "left", "steps": 2}


@pytest.mark.parametrize(("text", "problem"), [
    ("left twice", "could not be read as JSON"),
    ('["left", 2]', "your reply is JSON but not an object (array)"),
    ('{"steps": 2}', "missing direction"),
    ('{"direction": "left", "speed": 2}', "no such field speed"),
    ('{"direction": "up"}', 'direction must be one of "left", "right", got "up"'),
    ('{"direction": "left", "steps": "two"}', "steps must be integer, got string"),
])
def test_several_fields_refuse_what_does_not_fit_with_the_fields_listed(
        text: str, problem: str) -> None:
    with pytest.raises(ActionError) as info:
        schema(Move).parse(text)
    assert problem in str(info.value)
    assert str(info.value).endswith(
        'Reply with one JSON object with these fields: direction (string, required, one of '
        '"left", "right"): which way to walk; steps (integer, optional): how far, 1 to 3.')


class Note(Action):
    title: str
    body: str | None = None
    tags: list[str] = Field(default_factory=list)


def test_optional_and_array_fields_are_typed_through_anyof() -> None:
    fields = {f.name: f.types for f in schema(Note).fields}
    assert fields == {"title": {"string"}, "body": {"string", "null"}, "tags": {"array"}}
    assert schema(Note).parse('{"title": "t", "body": null, "tags": ["a"]}') == {
        "title": "t", "body": None, "tags": ["a"]}
    with pytest.raises(ActionError, match="tags must be array"):
        schema(Note).parse('{"title": "t", "tags": "a"}')


def test_instructions_say_how_to_write_an_action() -> None:
    assert schema(Say).instructions() == ("Your whole reply is sent to the environment as the "
                                          "action's message (string, required): what you say.")
    assert schema(GuessAction).instructions().startswith(
        "Reply with the action's guess (integer, required): your guess")
    assert schema(Move).instructions().endswith('For example: {"direction": "left"}')


@pytest.mark.parametrize("bad", [None, {"type": "object"}, {"properties": {"metadata": {}}}])
def test_a_schema_without_fields_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        ActionSchema.from_json_schema(bad)


def test_observations_are_shown_as_text_or_json() -> None:
    assert render({"prompt": "Say the word apple."}) == "Say the word apple."
    assert render({"position": 1, "goal": 4}) == '{\n  "position": 1,\n  "goal": 4\n}'
    assert render({"prompt": "hi", "turn": 3}, field="prompt") == "hi"
    assert render({"prompt": "  "}) == "(the observation is empty)"
    assert render({"count": 3}) == "3"
