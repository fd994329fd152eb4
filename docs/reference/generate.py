"""Writes the settings reference, docs/reference/settings/<kind>.md, from the settings classes
of the builtins and of the plugins in plugins/ (each installed, as `.ci/setup --test` does),
and the JSON Schema of an episodes.jsonl record, docs/reference/episode.schema.json, from the
record classes (interplay.values.records) and the shape the writer gives them:

    .venv/bin/python docs/reference/generate.py

tests/test_describe.py fails when the files checked in differ from what this writes, and
tests/test_record_schema.py when a run's records do not fit the schema.
`interplay describe --markdown DIR` writes the same pages for whatever is installed.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import attrs

from interplay.commands.describe import reference_pages
from interplay.config.settings import field_docs
from interplay.plugins import hookspecs
from interplay.plugins import host as plugins
from interplay.values import records

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "reference" / "settings"
SCHEMA = ROOT / "docs" / "reference" / "episode.schema.json"
COMMAND = ".venv/bin/python docs/reference/generate.py"


def repo_plugins() -> list[str]:
    """The distribution names of the plugins in plugins/ that register names with interplay
    (an ``interplay`` entry point; a bridge such as interplay-trl registers none)."""
    projects = (tomllib.loads(p.read_text())["project"]
                for p in ROOT.glob("plugins/*/pyproject.toml"))
    return sorted(project["name"] for project in projects
                  if hookspecs.PROJECT in project.get("entry-points", {}))


def register() -> list[str]:
    """A plugin host holding the builtins and the plugins in plugins/ (and nothing else that
    may be installed); the plugins' distribution names."""
    wanted = repo_plugins()
    host = plugins.reset(load_entry_points=False)
    found = set()
    for ep in importlib.metadata.entry_points(group=hookspecs.PROJECT):
        if ep.dist is not None and ep.dist.name in wanted:
            host.register_module(ep.load(), ep.name, package=ep.dist.name)
            found.add(ep.dist.name)
    missing = sorted(set(wanted) - found)
    if missing:
        raise SystemExit(f"plugins not installed: {', '.join(missing)}; run .ci/setup --test")
    return wanted


def pages() -> dict[str, str]:
    """The reference pages of the builtins and the plugins in plugins/."""
    return reference_pages(["interplay", *register()], command=COMMAND)


# -- the record schema --------------------------------------------------------------------------

#: A message as a record holds it: the OpenAI chat shape (records.message_to_openai).
MESSAGE = {
    "type": "object",
    "description": "One chat message in the OpenAI shape.",
    "properties": {
        "role": {"enum": list(typing.get_args(records.Role))},
        "content": {"type": ["string", "array", "null"],
                    "description": "Text, or a list of content parts ({type, text, ...})."},
        "name": {"type": "string"},
        "tool_calls": {"type": "array", "items": {
            "type": "object", "required": ["id", "type", "function"],
            "additionalProperties": False,
            "properties": {"id": {"type": "string"}, "type": {"const": "function"},
                           "function": {"type": "object", "required": ["name", "arguments"],
                                        "additionalProperties": False, "properties": {
                                            "name": {"type": "string"},
                                            "arguments": {"type": "string", "description":
                                                          "The JSON text the model wrote."}}}}}},
        "tool_call_id": {"type": "string"},
    },
    "required": ["role", "content"],
    "additionalProperties": False,
}

#: Fields the writer gives another shape than their type says (records.make_converter).
SPECIAL = {
    ("ModelCall", "request"): {"type": "object",
                               "description": "The request's JSON as it was sent."},
    ("ModelCall", "response"): {"description": "The answer's JSON as the endpoint sent it "
                                "(for a streamed call, the completion its chunks add up to; "
                                "for a failed one, the error body), or null."},
    ("Tokens", "prompt_ids"): {"type": ["array", "null"], "items": {"type": "integer"}},
    ("Tokens", "completion_ids"): {"type": ["array", "null"], "items": {"type": "integer"}},
    ("Tokens", "logprobs"): {"type": ["array", "null"], "items": {"type": "number"}},
    ("Task", "prompt"): {"anyOf": [{"type": ["string", "null"]},
                                   {"type": "array", "items": {"$ref": "#/$defs/Message"}}]},
}


def _type_schema(typ: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if typ is Any:
        return {}
    if typ is type(None):
        return {"type": "null"}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if typ in simple:
        return {"type": simple[typ]}
    if typ is records.Message:
        return {"$ref": "#/$defs/Message"}
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(a, defs) for a in args]}
    if origin in (list, tuple):
        inner = [a for a in args if a is not Ellipsis]
        return {"type": "array", **({"items": _type_schema(inner[0], defs)} if inner else {})}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    if isinstance(typ, type) and attrs.has(typ):
        _class_schema(typ, defs)
        return {"$ref": f"#/$defs/{typ.__name__}"}
    raise TypeError(f"no schema for {typ!r}")


def _class_schema(cls: type, defs: dict[str, Any]) -> None:
    if cls.__name__ in defs:
        return
    defs[cls.__name__] = {}  # taken, for a class that refers to itself
    docs = field_docs(cls)
    props: dict[str, Any] = {}
    required = []
    for field in attrs.fields(attrs.resolve_types(cls)):
        if not field.init:
            continue
        schema = dict(SPECIAL.get((cls.__name__, field.name)) or _type_schema(field.type, defs))
        if field.name in docs:
            schema["description"] = docs[field.name]
        props[field.alias] = schema
        required.append(field.alias)  # the writer writes every field, defaults included
    defs[cls.__name__] = {"type": "object", "description": " ".join((cls.__doc__ or "").split()),
                          "properties": props, "required": required,
                          "additionalProperties": False}


def record_schema() -> dict[str, Any]:
    """The JSON Schema of one episodes.jsonl record, made whole (interplay.run.whole_record)."""
    defs: dict[str, Any] = {"Message": MESSAGE}
    _class_schema(records.Episode, defs)
    episode = defs.pop("Episode")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://interplay.dev/schemas/episode.schema.json",
            "title": f"interplay episode record, schema_version {records.SCHEMA_VERSION}",
            **episode, "$defs": dict(sorted(defs.items()))}


def schema_text() -> str:
    return json.dumps(record_schema(), indent=2) + "\n"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, page in pages().items():
        (OUT / name).write_text(page)
        print(OUT / name)
    SCHEMA.write_text(schema_text())
    print(SCHEMA)
    return 0


if __name__ == "__main__":
    sys.exit(main())
