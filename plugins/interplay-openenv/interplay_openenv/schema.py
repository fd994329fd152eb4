"""How a reply becomes an OpenEnv action, and an observation becomes a message.

The action schema is the env's own: the JSON schema of its pydantic ``Action`` model, as its
server's ``GET /schema`` gives it. OpenEnv's own ``metadata`` field is left out; what remains are
the action's fields.

- One field: the reply is that field. A string field takes the reply's text as it is; a field of
  another type (a number, a boolean, a list, an object) takes the reply parsed as JSON, or a JSON
  object holding the field.
- Several fields: the reply is a JSON object (on its own, in a fenced block, or the outermost
  ``{...}`` of the text). One that is not, that lacks a required field, names a field the action
  does not have, or gives a field a value of the wrong type is refused with an
  :class:`ActionError` whose message says which and lists the fields; nothing is stepped.

Observations are shown as the text of their one field, or as JSON. No I/O here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

#: OpenEnv's base ``Action`` field, not part of what an agent chooses.
OPENENV_FIELDS = frozenset({"metadata"})
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,), "null": (type(None),)}
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class ActionError(ValueError):
    """A reply that cannot be made into an action; the message is for the agent."""


@attrs.frozen
class Field:
    name: str
    #: JSON types the field accepts (empty: any).
    types: frozenset[str]
    required: bool
    description: str = ""
    enum: tuple[Any, ...] | None = None

    def label(self) -> str:
        kind = " or ".join(sorted(self.types - {"null"})) or "any JSON value"
        parts = [kind, "required" if self.required else "optional"]
        if self.enum is not None:
            parts.append(f"one of {', '.join(json.dumps(v) for v in self.enum)}")
        text = f"{self.name} ({', '.join(parts)})"
        return f"{text}: {self.description}" if self.description else text

    def problem(self, value: Any) -> str | None:
        """Why ``value`` does not fit this field (None when it does)."""
        if self.enum is not None and value not in self.enum:
            return (f"{self.name} must be one of {', '.join(json.dumps(v) for v in self.enum)},"
                    f" got {json.dumps(value)}")
        if not self.types or any(_is(value, t) for t in self.types):
            return None
        kind = " or ".join(sorted(self.types))
        return f"{self.name} must be {kind}, got {_json_type(value)} {json.dumps(value)[:60]}"


def _is(value: Any, json_type: str) -> bool:
    kinds = _PY_TYPES.get(json_type)
    if kinds is None:
        return True
    if isinstance(value, bool) and json_type != "boolean":
        return False
    return isinstance(value, kinds)


def _json_type(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if _is(value, name):
            return name
    return type(value).__name__


def _types(prop: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> frozenset[str]:
    """The JSON types a property accepts, through ``$ref``, ``anyOf``, ``oneOf`` and
    ``allOf`` (empty when the schema does not say)."""
    if depth > 8:
        return frozenset()
    ref = prop.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1], {})
        return _types(target, defs, depth + 1) or frozenset({"object"})
    kind = prop.get("type")
    if isinstance(kind, str):
        return frozenset({kind})
    if isinstance(kind, list):
        return frozenset(str(k) for k in kind)
    found: set[str] = set()
    for key in ("anyOf", "oneOf", "allOf"):
        for option in prop.get(key) or ():
            if isinstance(option, Mapping):
                inner = _types(option, defs, depth + 1)
                if not inner:
                    return frozenset()
                found |= inner
    return frozenset(found)


@attrs.frozen
class ActionSchema:
    fields: tuple[Field, ...]
    #: The action refuses fields it does not declare (pydantic ``extra="forbid"``).
    closed: bool = True

    @classmethod
    def from_json_schema(cls, schema: Any) -> ActionSchema:
        """The action schema from ``GET /schema``'s ``action`` entry (ValueError when it is not
        an object schema with at least one field besides ``metadata``)."""
        if not isinstance(schema, Mapping) or not isinstance(schema.get("properties"), Mapping):
            raise ValueError("the action schema is not a JSON object schema with properties")
        defs = schema.get("$defs") or schema.get("definitions") or {}
        required = set(schema.get("required") or ())
        fields = []
        for name, prop in schema["properties"].items():
            if name in OPENENV_FIELDS or not isinstance(prop, Mapping):
                continue
            enum = prop.get("enum")
            fields.append(Field(name=str(name), types=_types(prop, defs),
                                required=name in required,
                                description=str(prop.get("description") or ""),
                                enum=tuple(enum) if isinstance(enum, list) else None))
        if not fields:
            raise ValueError("the action schema has no fields besides metadata")
        return cls(tuple(fields), closed=schema.get("additionalProperties") is False)

    @property
    def single(self) -> Field | None:
        return self.fields[0] if len(self.fields) == 1 else None

    def instructions(self) -> str:
        """How to write an action, told to the agent with the first observation."""
        single = self.single
        if single is not None and "string" in single.types:
            return (f"Your whole reply is sent to the environment as the action's "
                    f"{single.label()}.")
        if single is not None:
            return (f"Reply with the action's {single.label()}, written as JSON "
                    f"(for example {json.dumps(_example(single))}).")
        example = {f.name: _example(f) for f in self.fields if f.required} or {
            self.fields[0].name: _example(self.fields[0])}
        return ("Reply with the action as one JSON object with these fields: "
                f"{'; '.join(f.label() for f in self.fields)}. For example: "
                f"{json.dumps(example)}")

    def parse(self, text: str) -> dict[str, Any]:
        """The action payload for ``text`` (ActionError, for the agent, when there is none)."""
        single = self.single
        if single is not None and "string" in single.types:
            return {single.name: text}
        if single is not None:
            try:
                value = _json_value(text)
            except ActionError as exc:
                raise ActionError(f"{exc}. Reply with the action's {single.label()}, written "
                                  f"as JSON.") from None
            if isinstance(value, dict) and set(value) == {single.name}:
                value = value[single.name]
            problem = single.problem(value)
            if problem is not None:
                raise ActionError(f"{problem}. Reply with the action's {single.label()}, "
                                  f"written as JSON.")
            return {single.name: value}
        try:
            value = _json_value(text)
        except ActionError as exc:
            raise ActionError(f"{exc}. {self._fields_line()}") from None
        if not isinstance(value, dict):
            raise ActionError(f"your reply is JSON but not an object ({_json_type(value)}). "
                              f"{self._fields_line()}")
        problems = []
        known = {f.name: f for f in self.fields}
        missing = [f.name for f in self.fields if f.required and f.name not in value]
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        unknown = [k for k in value if k not in known and k not in OPENENV_FIELDS]
        if unknown and self.closed:
            problems.append(f"no such field {', '.join(unknown)}")
        problems += [p for k, v in value.items() if k in known
                     for p in [known[k].problem(v)] if p is not None]
        if problems:
            raise ActionError(f"the action is not valid: {'; '.join(problems)}. "
                              f"{self._fields_line()}")
        return dict(value)

    def _fields_line(self) -> str:
        return ("Reply with one JSON object with these fields: "
                f"{'; '.join(f.label() for f in self.fields)}.")


def _example(field: Field) -> Any:
    if field.enum:
        return field.enum[0]
    for kind, value in (("string", "..."), ("integer", 0), ("number", 0.0),
                        ("boolean", True), ("array", []), ("object", {})):
        if kind in field.types:
            return value
    return "..."


def _json_value(text: str) -> Any:
    """The JSON in a reply: the whole text, a fenced block, or its outermost ``{...}``."""
    candidates = [text.strip(), *(m.strip() for m in _FENCED.findall(text))]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    first_error = None
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError as exc:
            first_error = first_error or exc
    raise ActionError(f"your reply could not be read as JSON ({first_error})")


def render(observation: Mapping[str, Any], field: str = "") -> str:
    """An observation as one message: the named field's text, the text of its only field, or
    the whole observation as JSON. Never empty."""
    if field:
        value: Any = observation[field]
    elif len(observation) == 1:
        (value,) = observation.values()
    else:
        value = dict(observation)
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
    return text.strip() or "(the observation is empty)"
