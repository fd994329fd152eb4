"""What a settings class says about itself: each field's name, type, default, allowed values and
one line of meaning, read from the attrs class the config check structures into.

A field's meaning is its docstring, written as Sphinx reads it: a ``#:`` comment on the lines
just above the field, or a string literal just below it. Nested settings classes (a relay's
settings inside an env's) are listed field by field under a dotted name, with the defaults the
outer class gives them. Nothing here knows what any setting does.
"""

from __future__ import annotations

import ast
import enum
import inspect
import textwrap
import types
import typing
from functools import cache
from typing import Any

import attrs

from interplay.config.loading import _default_of, make_config_converter


@attrs.frozen
class Setting:
    """One setting of a settings class, as ``interplay describe`` and the reference show it."""

    #: Its key in a config file, dotted under the table that holds it (``relay.max_turns``).
    name: str
    #: Its type, written as a config file's values are (``int``, ``str | None``, ``table``).
    type: str
    #: Its default as JSON-like data; None when it has none or its default is null.
    default: Any
    #: Whether a config must give it (the field has no default).
    required: bool
    #: The values it may take, when they are a closed set (a Literal or an enum); else empty.
    allowed: tuple[Any, ...]
    #: Its meaning: its docstring, whitespace folded ("" when it has none).
    doc: str
    #: Fixed by the class (an ``init=False`` field, such as a rubric's own criteria): shown
    #: with its value, which no config can change.
    fixed: bool = False


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring in ``cls`` and the attrs classes it inherits from: a ``#:``
    comment just above the field, else a string literal just below it (whitespace folded)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not attrs.has(klass):
            continue
        docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):  # no source at hand (a class made at run time)
        return {}
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    body = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    if body is None:
        return {}
    src = source.splitlines()
    docs: dict[str, str] = {}
    for i, node in enumerate(body.body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        comment: list[str] = []
        row = node.lineno - 2  # the line above, 0-based
        while row >= 0 and src[row].strip().startswith("#:"):
            comment.insert(0, src[row].strip()[2:].strip())
            row -= 1
        text = " ".join(comment)
        following = body.body[i + 1] if i + 1 < len(body.body) else None
        if not text and isinstance(following, ast.Expr) and isinstance(
                following.value, ast.Constant) and isinstance(following.value.value, str):
            text = " ".join(following.value.value.split())
        if text:
            docs[node.target.id] = text
    return docs


def settings_of(cls: Any, defaults: Any = None, prefix: str = "", *,
                keys_of_tables: bool = True) -> list[Setting]:
    """Every setting of the attrs class ``cls`` in declaration order, nested settings classes
    flattened under dotted names. ``defaults``, an instance of ``cls``, gives the defaults
    (an outer class's default for the nested one); else each field's own default is used.
    ``keys_of_tables`` also lists the keys of a table that is off by default and of each
    table in a list (``criteria[].name``), with their class's defaults: what a config may
    write, not what ``defaults`` holds."""
    if not (isinstance(cls, type) and attrs.has(cls)):
        return []
    conv = make_config_converter()
    docs = field_docs(cls)
    out: list[Setting] = []
    for field in attrs.fields(attrs.resolve_types(cls)):
        if not field.init:
            if not field.name.startswith("_") and field.default is not attrs.NOTHING:
                value = getattr(defaults, field.name) if defaults is not None \
                    else _default_of(field)
                out.append(Setting(name=f"{prefix}{field.name}", type=type_text(field.type),
                                   default=_plain(conv, value), required=False, allowed=(),
                                   doc=docs.get(field.name, ""), fixed=True))
            continue
        name = f"{prefix}{field.alias}"
        required = field.default is attrs.NOTHING
        if defaults is not None:
            value = getattr(defaults, field.name)
        else:
            value = None if required else _default_of(field)
        nested = _settings_class(field.type)
        if nested is not None and value is not None and isinstance(value, nested):
            out += settings_of(nested, value, f"{name}.", keys_of_tables=keys_of_tables)
            continue
        out.append(Setting(name=name, type=type_text(field.type),
                           default=None if required else _plain(conv, value),
                           required=required, allowed=allowed_values(field.type),
                           doc=docs.get(field.name, "")))
        # A table that is off by default, or a list of tables: its keys, with their defaults.
        if not keys_of_tables:
            continue
        if nested is not None:
            out += settings_of(nested, None, f"{name}.")
        elif (item := _item_class(field.type)) is not None:
            out += settings_of(item, None, f"{name}[].")
    return out


def _item_class(typ: Any) -> type | None:
    """The settings class a list field holds (``list[Criterion]``), if any."""
    if typing.get_origin(typ) in (list, tuple) or _abstract_sequence(typ):
        args = [a for a in typing.get_args(typ) if a is not Ellipsis]
        if len(args) == 1:
            return _settings_class(args[0])
    return None


def _abstract_sequence(typ: Any) -> bool:
    origin = typing.get_origin(typ)
    return origin is not None and getattr(origin, "__name__", "") in ("Sequence",
                                                                      "MutableSequence")


def _settings_class(typ: Any) -> type | None:
    """The attrs class a field of type ``typ`` holds (``X`` or ``X | None``), if any."""
    if isinstance(typ, type) and attrs.has(typ):
        return typ
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(typ) if a is not type(None)]
        if len(members) == 1 and isinstance(members[0], type) and attrs.has(members[0]):
            return members[0]
    return None


def _plain(conv: Any, value: Any) -> Any:
    try:
        return conv.unstructure(value)
    except Exception:  # a default no converter can write: shown as its repr
        return repr(value)


def allowed_values(typ: Any) -> tuple[Any, ...]:
    """The closed set of values ``typ`` admits (a Literal's, an enum's values), else ()."""
    origin = typing.get_origin(typ)
    if origin is typing.Literal:
        return typing.get_args(typ)
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        return tuple(m.value for m in typ)
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for member in typing.get_args(typ):
            out += allowed_values(member)
        return tuple(out)
    return ()


_NAMES = {str: "str", int: "int", float: "float", bool: "bool", type(None): "null",
          typing.Any: "any"}


def type_text(typ: Any) -> str:
    """``typ`` written as a config file's values are: ``int``, ``str | None``, ``list[str]``,
    ``table`` (a mapping or settings class), ``"a" | "b"`` for a Literal."""
    if typ in _NAMES:
        return _NAMES[typ]
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        parts = [type_text(a) for a in args if a is not type(None)]
        return " | ".join(parts + (["None"] if type(None) in args else []))
    if origin is typing.Literal:
        return " | ".join(repr(a) if not isinstance(a, str) else f'"{a}"' for a in args)
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        return " | ".join(f'"{m.value}"' if isinstance(m.value, str) else repr(m.value)
                          for m in typ)
    if origin in (list, tuple, set, frozenset) or (
            origin is not None and getattr(origin, "__name__", "") in ("Sequence",)):
        inner = [type_text(a) for a in args if a is not Ellipsis]
        return f"list[{', '.join(dict.fromkeys(inner))}]" if inner else "list"
    if origin in (dict,) or (origin is not None and getattr(origin, "__name__", "") in (
            "Mapping", "MutableMapping")):
        return f"table of {type_text(args[1])}" if len(args) == 2 else "table"
    if isinstance(typ, type):
        if attrs.has(typ):
            return "table"
        return typ.__name__
    return str(typ).replace("typing.", "")
