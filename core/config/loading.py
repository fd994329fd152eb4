"""Config: TOML files plus ``--set a.b.c=value`` overrides, structured into attrs classes.

Owns reading, merging and structuring config, and turning cattrs' validation errors into one
line that names the path and what is allowed (``env.relay.max_turns: expected int, got 'x'``).
It knows nothing about what any section means.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import inspect
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
import cattrs.cols
import cattrs.gen
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from interplay.errors import InterplayError

T = TypeVar("T")


#: The metadata key of an attrs field (not an init argument) that a config table structured
#: into its class fills with the table's keys: what the table gave, told from the defaults.
GIVEN_KEYS = "interplay_given_keys"


def make_config_converter() -> cattrs.Converter:
    """A strict converter for config: unknown keys and wrong types are errors."""
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)

    def strict(typ: type) -> Any:
        def hook(value: Any, _: Any) -> Any:
            if typ is float and isinstance(value, int) and not isinstance(value, bool):
                return float(value)
            if not isinstance(value, typ) or (typ is not bool and isinstance(value, bool)):
                raise _TypeMismatch(typ.__name__, value)
            return value

        return hook

    for typ in (int, float, str, bool):
        conv.register_structure_hook(typ, strict(typ))

    def literal(value: Any, typ: Any) -> Any:
        allowed = typing.get_args(typ)
        # bool is an int: 1 must not pass for True, nor True for 1.
        if not any(value == a and type(value) is type(a) for a in allowed):
            raise _TypeMismatch(_describe_type(typ), value)
        return value

    conv.register_structure_hook_func(lambda t: typing.get_origin(t) is typing.Literal, literal)
    conv.register_structure_hook(Any, lambda v, _: v)
    conv.register_structure_hook(
        Path, lambda v, _: v if isinstance(v, Path) else Path(strict(str)(v, str)))

    # cattrs turns any iterable into a list and reads any object with .items() as a table, so
    # `argv = "python"` would become ["p", "y", ...]: a value of the wrong shape is refused.
    def shaped(make: Callable[[Any], Any], expected: str, fits: Callable[[Any], bool]) -> Any:
        def factory(typ: Any) -> Any:
            inner = make(typ)

            def hook(value: Any, t: Any) -> Any:
                if not fits(value):
                    raise _TypeMismatch(expected, value)
                return inner(value, t)

            return hook

        return factory

    def sequence(typ: Any) -> Any:
        if typing.get_origin(typ) is tuple:
            return cattrs.cols.homogenous_tuple_structure_factory(typ, conv)
        return cattrs.cols.list_structure_factory(typ, conv)

    def fixed_tuple(typ: Any) -> Any:
        args = typing.get_args(typ)

        def hook(value: Any, _: Any) -> tuple[Any, ...]:
            if len(value) != len(args):
                raise _TypeMismatch(f"an array of {len(args)}", value)
            return tuple(conv.structure(v, a) for v, a in zip(value, args, strict=True))

        return hook

    conv.register_structure_hook_factory(
        cattrs.cols.is_sequence, shaped(sequence, "an array", _is_array))
    conv.register_structure_hook_factory(
        lambda t: typing.get_origin(t) is tuple and not cattrs.cols.is_sequence(t),
        shaped(fixed_tuple, "an array", _is_array))
    conv.register_structure_hook_factory(
        cattrs.cols.is_mapping,
        shaped(lambda t: cattrs.cols.mapping_structure_factory(t, conv), "a table",
               _is_table))

    # cattrs handles X | None but no other union: `arguments: dict | str` in a plugin's Config
    # would be a traceback at load. Each member is tried in the order written.
    def union(typ: Any) -> Any:
        members = [a for a in typing.get_args(typ) if a is not type(None)]
        optional = len(members) < len(typing.get_args(typ))
        expected = _describe_type(typ)

        tables = [m for m in members if isinstance(m, type) and attrs.has(m)]

        def hook(value: Any, _: Any) -> Any:
            if value is None and optional:
                return None
            for member in members:
                try:
                    return conv.structure(value, member)
                except Exception:  # not this member; the next may fit
                    continue
            if len(tables) == 1 and _is_table(value):
                # A table meant for the one table member: its own error says which key.
                return conv.structure(value, tables[0])
            raise _TypeMismatch(expected, value)

        return hook

    conv.register_structure_hook_factory(
        lambda t: typing.get_origin(t) in (typing.Union, types.UnionType)
        and sum(a is not type(None) for a in typing.get_args(t)) > 1, union)

    def settled(cls: type) -> Any:
        # A table laid over a default (``_over_defaults``) arrives as the instance itself.
        from_dict = cattrs.gen.make_dict_structure_fn(cls, conv)
        given = next((f.name for f in attrs.fields(cls) if f.metadata.get(GIVEN_KEYS)), None)

        def hook(value: Any, typ: Any) -> Any:
            if isinstance(value, cls):
                return value
            if not _is_table(value):
                raise _TypeMismatch("a table", value)
            made = from_dict(value, typ)
            if given is not None:
                object.__setattr__(made, given, frozenset(value))
            return made

        return hook

    conv.register_structure_hook_factory(attrs.has, settled)
    return conv


def _is_array(value: Any) -> bool:
    return isinstance(value, list | tuple)


def _is_table(value: Any) -> bool:
    # A dict first: an ABC check costs several times more, on every agent of every episode.
    return type(value) is dict or isinstance(value, Mapping)


class _TypeMismatch(ValueError):
    def __init__(self, expected: str, value: Any) -> None:
        super().__init__(f"expected {expected}, got {value!r}")
        self.expected = expected
        self.value = value


_converter: cattrs.Converter | None = None


def _config_converter() -> cattrs.Converter:
    # Every agent of every episode structures its harness settings: build the converter once.
    global _converter
    if _converter is None:
        _converter = make_config_converter()
    return _converter


def structure(data: Mapping[str, Any], cls: type[T], *, path: str = "") -> T:
    """Structure ``data`` into ``cls``; a bad key or value raises a one-line InterplayError.

    A table given for a field whose default is itself a table of settings is laid over that
    default, key by key: ``--set env.relay.max_turns=1`` changes ``max_turns`` of the relay
    settings the env's ``Config`` chose and keeps the rest of them, rather than starting over
    from the relay's own defaults.
    """
    if not isinstance(data, Mapping):
        raise InterplayError(f"{path or 'config'}: expected a table, got {data!r}")
    return _structure(_over_defaults(data, cls, path), cls, path)


def _structure(value: Any, typ: Any, path: str) -> Any:
    try:
        return _config_converter().structure(value, typ)
    except (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError) as exc:
        raise InterplayError(_first_problem(exc, path, typ)) from None
    except (_TypeMismatch, ValueError, TypeError) as exc:
        raise InterplayError(f"{path or 'config'}: {exc}") from None


def settle(value: Any, owner: Any, kind: str, *, path: str | None = None) -> Any:
    """The settings ``owner`` (a step, a verifier, ... of ``kind``) is constructed with, as its
    ``Config``: None is ``Config()``, an instance of ``Config`` is kept, a mapping is structured
    as a config file's table would be (its errors name ``path``, by default the owner's name);
    anything else is refused with one line."""
    cls = owner.Config
    name = getattr(owner, "name", "") or type(owner).__name__
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return structure(value, cls, path=path or name)
    raise InterplayError(f"{kind} {name!r} takes a {cls.__qualname__} or a mapping of its "
                         f"settings, got {type(value).__qualname__} {value!r}")


def _default_of(field: attrs.Attribute[Any]) -> Any:
    """The field's default value (a factory called), or None when it has none to lay over."""
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return None if default.takes_self else default.factory()
    return None if default is attrs.NOTHING else copy.deepcopy(default)


def field_site(cls: type, name: str) -> str | None:
    """Where the field ``name`` of the class ``cls`` (or of the class it inherits it from) is
    written, as ``file:line``; None when its source cannot be read."""
    for klass in cls.__mro__:
        if name not in getattr(klass, "__annotations__", {}):
            continue
        try:
            lines, start = inspect.getsourcelines(klass)
            file = inspect.getsourcefile(klass)
        except (OSError, TypeError):
            return None
        field = re.compile(rf"^\s+{re.escape(name)}\s*:")
        for i, line in enumerate(lines):
            if field.match(line):
                return f"{file}:{start + i}"
        return None
    return None


def default_problems(cls: Any, path: str) -> list[str]:
    """Why defaults of the settings class ``cls`` do not fit their fields' types (one line
    each, naming ``path.field``): a default a config file could not set is a mistake in the
    class, found when its plugin registers rather than in a run that never sets the field.
    :func:`default_sites` says where each is written."""
    return [text for text, _ in default_sites(cls, path)]


def default_sites(cls: Any, path: str) -> list[tuple[str, str | None]]:
    """:func:`default_problems`, each with where its field is written (:func:`field_site`)."""
    defaults: list[tuple[str, Any, Any]] = []  # (name, default, type)
    try:
        if isinstance(cls, type) and attrs.has(cls):
            for field in attrs.fields(attrs.resolve_types(cls)):
                if field.init and field.default is not attrs.NOTHING and not (
                        isinstance(field.default, attrs.Factory)  # type: ignore[arg-type]
                        and field.default.takes_self):
                    defaults.append((field.alias, _default_of(field), field.type))
        elif isinstance(cls, type) and dataclasses.is_dataclass(cls):
            hints = typing.get_type_hints(cls)
            for dfield in dataclasses.fields(cls):
                if dfield.default is not dataclasses.MISSING:
                    defaults.append((dfield.name, dfield.default, hints[dfield.name]))
                elif dfield.default_factory is not dataclasses.MISSING:
                    defaults.append((dfield.name, dfield.default_factory(), hints[dfield.name]))
    except (NameError, TypeError):  # annotations that cannot be resolved: cattrs will say so
        return []
    problems = []
    for name, default, typ in defaults:
        try:
            _structure(_config_converter().unstructure(default), typ, _join(path, name))
        except InterplayError as exc:
            problems.append((f"{exc} (the field's default)", field_site(cls, name)))
    return problems


def _over_defaults(data: Mapping[str, Any], cls: Any, path: str) -> dict[str, Any]:
    """``data`` with each table that sets part of a field whose default is a settings object
    turned into that object with the table's keys changed (see :func:`structure`)."""
    out = dict(data)
    # Most settings (a seat's harness_config, every episode) hold no table at all.
    if not any(_is_table(v) for v in out.values()) or not (
            isinstance(cls, type) and attrs.has(cls)):
        return out
    try:
        fields = attrs.fields(attrs.resolve_types(cls))
    except (NameError, TypeError):  # annotations that cannot be resolved: cattrs will say so
        return out
    for field in fields:
        value = out.get(field.alias)
        if not isinstance(value, Mapping) or not field.init:
            continue
        where = _join(path, field.alias)
        default = _default_of(field)
        if attrs.has(type(default)):
            out[field.alias] = _evolve(default, value, where)
        elif isinstance(field.type, type) and attrs.has(field.type):
            out[field.alias] = _over_defaults(value, field.type, where)
    return out


def _evolve(instance: Any, data: Mapping[str, Any], path: str) -> Any:
    """``instance`` with the keys of ``data`` changed (each structured into its field's type);
    the values it already has are kept as they are."""
    cls = type(instance)
    fields = {f.alias: f for f in attrs.fields(attrs.resolve_types(cls)) if f.init}
    extra = sorted(set(data) - set(fields))
    if extra:
        raise InterplayError(f"{path}: unknown key {', '.join(map(str, extra))}; "
                             f"allowed: {', '.join(sorted(fields))}")
    changes: dict[str, Any] = {}
    for key, value in data.items():
        field = fields[key]
        current = getattr(instance, field.name)
        where = _join(path, key)
        if isinstance(value, Mapping) and attrs.has(type(current)):
            changes[key] = _evolve(current, value, where)
        else:
            changes[key] = _structure(_over_defaults(value, field.type, where)
                                      if isinstance(value, Mapping) else value, field.type, where)
    try:
        return attrs.evolve(instance, **changes)
    except (ValueError, TypeError, InterplayError) as exc:  # the class's own validators
        raise InterplayError(f"{path}: {exc}") from None


def _describe_type(typ: Any) -> str:
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe_type(a) for a in typing.get_args(typ))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(typ))
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in typ)
    if typ is type(None):
        return "null"
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    if isinstance(typ, type):
        return "a table" if attrs.has(typ) else typ.__name__
    return str(typ)


def _join(path: str, name: str | int) -> str:
    if isinstance(name, int):
        return f"{path}[{name}]"
    return f"{path}.{name}" if path else str(name)


def explain(exc: BaseException, path: str = "", cls: Any = None) -> str:
    """One line for a cattrs structuring error: the path of the first problem and what is
    allowed there."""
    return _first_problem(exc, path, cls)


def _first_problem(exc: BaseException, path: str, cls: Any) -> str:
    if isinstance(exc, ForbiddenExtraKeysError):
        allowed = sorted(a.alias for a in attrs.fields(exc.cl) if a.init) \
            if attrs.has(exc.cl) else []
        keys = ", ".join(sorted(exc.extra_fields))
        where = path or "config"
        hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
        return f"{where}: unknown key {keys}{hint}"
    if isinstance(exc, ClassValidationError | IterableValidationError):
        for sub in exc.exceptions:
            sub_path, sub_type = path, None
            for n in getattr(sub, "__notes__", None) or []:
                if hasattr(n, "name"):
                    sub_path, sub_type = _join(path, n.name), getattr(n, "type", None)
                    break
                if hasattr(n, "index"):
                    sub_path, sub_type = _join(path, n.index), getattr(n, "type", None)
                    break
            return _first_problem(sub, sub_path, sub_type)
        return f"{path or 'config'}: invalid"
    if isinstance(exc, KeyError):
        return f"{path}: missing value; expected {_describe_type(cls)}"
    if isinstance(exc, _TypeMismatch):
        return f"{path}: expected {exc.expected}, got {exc.value!r}"
    if isinstance(exc, InterplayError):
        return f"{path}: {exc.message}" if path else exc.message
    if isinstance(exc, ValueError | TypeError):
        text = str(exc)
        if cls is not None and ("not a valid" in text or "is not" in text or not text):
            return f"{path}: expected {_describe_type(cls)}; {text}".rstrip("; ")
        return f"{path}: {text or 'expected ' + _describe_type(cls)}"
    return f"{path}: {type(exc).__name__}: {exc}"


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a","b","c"], value); the value is read as TOML, else as text."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InterplayError(f"--set {item!r}: expected KEY=VALUE, e.g. --set env.max_turns=4")
    parts = key.split(".")
    if any(not p for p in parts):
        raise InterplayError(f"--set {item!r}: empty part in key {key!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply ``--set`` overrides onto a copy of ``data``."""
    out = _deep_copy(data)
    for item in overrides:
        parts, value = parse_override(item)
        node = out
        for i, part in enumerate(parts[:-1]):
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                where = ".".join(parts[: i + 1])
                raise InterplayError(f"--set {item!r}: {where} is a value, not a table")
            node = nxt
        node[parts[-1]] = value
    return out


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise InterplayError(f"config file {str(p)!r} does not exist") from None
    except IsADirectoryError:
        raise InterplayError(f"config file {str(p)!r} is a directory; "
                             "expected a TOML file") from None
    except PermissionError:
        raise InterplayError(f"config file {str(p)!r} cannot be read (permission denied)") from None
    except OSError as exc:
        raise InterplayError(f"config file {str(p)!r} cannot be read: "
                             f"{exc.strerror or type(exc).__name__}") from None
    except UnicodeDecodeError:
        raise InterplayError(f"{p}: not valid TOML: the file is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InterplayError(f"{p}: not valid TOML: {exc}") from None


def merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two config dicts; ``top`` wins."""
    out = _deep_copy(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = _deep_copy(value) if isinstance(value, Mapping) else value
    return out


def load(cls: type[T], *, files: Iterable[str | Path] = (), overrides: Iterable[str] = (),
         base: Mapping[str, Any] | None = None) -> T:
    """Read TOML files in order, apply overrides, and structure into ``cls``."""
    data: dict[str, Any] = _deep_copy(base or {})
    for f in files:
        data = merge(data, read_toml(f))
    data = apply_overrides(data, overrides)
    return structure(data, cls)
