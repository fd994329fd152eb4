"""Plugin discovery and the registry of everything plugins bring.

Owns the pluggy plugin manager, the builtins (``DEFAULT_PLUGINS``, registered in-process so a
broken third-party plugin can never take them down), the ``interplay`` entry-point group (each
entry point loaded on its own), the allow- and block-lists, and the registry of names. It must
not import any plugin by name, and importing it loads nothing: plugins load once, on first use.

Environment:

- ``INTERPLAY_LOAD_PLUGINS``: comma-separated allow-list of external plugins (entry-point or
  distribution names). Set but empty: no external plugin loads. Unset: all load.
- ``INTERPLAY_BLOCK_PLUGINS``: comma-separated block-list, applied after the allow-list.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

import attrs
import pluggy
import structlog

from interplay import hookspecs
from interplay.errors import InterplayError

log = structlog.get_logger("interplay.plugins")

DEFAULT_PLUGINS: tuple[str, ...] = (
    "interplay.builtin_harnesses.plugin",
    "interplay.builtin_envs.plugin",
    "interplay.builtin_verifiers.plugin",
)

#: The kinds a plugin can register, by hook, with the base class each must subclass.
KIND_BASES: dict[str, tuple[str, str]] = {
    "harnesses": ("interplay.harness", "Harness"),
    "user-sims": ("interplay.usersim", "UserSim"),
    "steps": ("interplay.step", "Step"),
    "verifiers": ("interplay.verifier", "Verifier"),
    "envs": ("interplay.env", "Env"),
}
KINDS: tuple[str, ...] = tuple(KIND_BASES)
#: One of each kind, for messages ("unknown harness 'x'").
SINGULAR: dict[str, str] = {"harnesses": "harness", "user-sims": "user sim", "steps": "step",
                            "verifiers": "verifier", "envs": "env"}
BUILTIN_PACKAGE = "interplay"


@attrs.define
class PluginInfo:
    """What `interplay plugins` reports about one plugin."""

    name: str
    package: str
    version: str
    builtin: bool
    hooks: list[str] = attrs.Factory(list)
    registered: dict[str, list[str]] = attrs.Factory(dict)
    error: str | None = None


@attrs.define
class Entry:
    """One registered name: the object and the plugin that registered it."""

    name: str
    kind: str
    obj: Any
    plugin: str
    package: str


class Registry:
    """Names of every kind, each remembering the plugin that registered it."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
        self._clashes: dict[tuple[str, str], list[str]] = {}

    def add(self, entry: Entry) -> None:
        bucket = self._entries[entry.kind]
        prior = bucket.get(entry.name)
        if prior is not None and prior.obj is not entry.obj:
            packages = self._clashes.setdefault((entry.kind, entry.name), [prior.package])
            packages.append(entry.package)
            return
        bucket[entry.name] = entry

    def get(self, kind: str, name: str) -> Any:
        return self.entry(kind, name).obj

    def entry(self, kind: str, name: str) -> Entry:
        if kind not in self._entries:
            raise InterplayError(f"unknown kind {kind!r}; expected one of: {', '.join(KINDS)}")
        clash = self._clashes.get((kind, name))
        if clash:
            raise InterplayError(
                f"{SINGULAR[kind]} {name!r} is registered by both {clash[0]!r} and {clash[1]!r}; "
                f"uninstall one or block it with INTERPLAY_BLOCK_PLUGINS"
            )
        try:
            return self._entries[kind][name]
        except KeyError:
            known = ", ".join(sorted(self._entries[kind])) or "none"
            raise InterplayError(
                f"unknown {SINGULAR[kind]} {name!r}; known: {known} (`interplay list {kind}`)"
            ) from None

    def names(self, kind: str) -> list[str]:
        return sorted(self._entries[kind])

    def entries(self, kind: str) -> list[Entry]:
        return [self._entries[kind][n] for n in self.names(kind)]

    def clashes(self) -> dict[tuple[str, str], list[str]]:
        return dict(self._clashes)


class PluginHost:
    """The plugin manager plus what was loaded, what failed and what was registered."""

    def __init__(self, *, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.registry = Registry()
        self._load_entry_points = load_entry_points
        self._loaded = False
        self._lock = threading.RLock()

    # -- loading -----------------------------------------------------------------------------

    @property
    def loads_entry_points(self) -> bool:
        """Whether this host loads installed plugins (tests and benchmarks may use builtins
        only; worker processes do as their parent does)."""
        return self._load_entry_points

    def load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            for module_name in DEFAULT_PLUGINS:
                module = importlib.import_module(module_name)
                self._add(module, module_name, BUILTIN_PACKAGE, _own_version(), builtin=True)
            if self._load_entry_points:
                for ep in _selected_entry_points():
                    self._load_entry_point(ep)
            self._collect()

    def register_module(self, module: Any, name: str, package: str = "local") -> None:
        """Register an in-process plugin (tests, notebooks) and rebuild the registry."""
        with self._lock:
            self.load()
            self._add(module, name, package, "0", builtin=False)
            self._collect()

    def unregister(self, name: str) -> None:
        with self._lock:
            plugin = self.pm.get_plugin(name)
            if plugin is not None:
                self.pm.unregister(plugin, name=name)
            self.infos.pop(name, None)
            self._collect()

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        package, version = _dist_of(ep)
        try:
            module = ep.load()
        except Exception as exc:  # a broken plugin is reported, never fatal
            self.infos[ep.name] = PluginInfo(
                name=ep.name, package=package, version=version, builtin=False,
                error=_describe(exc),
            )
            log.warning("plugins.load_failed", plugin=ep.name, package=package,
                        version=version, error_type=type(exc).__name__)
            return
        self._add(module, ep.name, package, version, builtin=False)

    def _add(self, module: Any, name: str, package: str, version: str, *, builtin: bool) -> None:
        if self.pm.get_plugin(name) is not None or name in self.infos:
            existing = self.infos.get(name)
            other = existing.package if existing else "?"
            self.infos[f"{name} ({package})"] = PluginInfo(
                name=name, package=package, version=version, builtin=builtin,
                error=f"plugin name {name!r} is already taken by package {other!r}",
            )
            return
        try:
            self.pm.register(module, name=name)
        except Exception as exc:
            self.infos[name] = PluginInfo(name=name, package=package, version=version,
                                          builtin=builtin, error=_describe(exc))
            return
        hooks = sorted(caller.name for caller in self.pm.get_hookcallers(module) or [])
        # pluggy accepts implementations of hooks nobody specified; a misspelt hook would
        # then register nothing without a word, so it is reported as this plugin's error.
        unknown = sorted(set(_marked_hooks(self.pm, module)) - set(hookspecs.HOOK_KINDS))
        error = None
        if unknown:
            self.pm.unregister(module, name=name)
            error = (f"unknown hook(s) {', '.join(unknown)}; interplay's hooks are "
                     f"{', '.join(hookspecs.HOOK_KINDS)}")
        self.infos[name] = PluginInfo(name=name, package=package, version=version,
                                      builtin=builtin, hooks=hooks, error=error)

    # -- the registry --------------------------------------------------------------------------

    def _collect(self) -> None:
        """Call every plugin's register_* hooks, each on its own, and rebuild the registry."""
        for info in self.infos.values():
            if info.error is None:
                info.registered = {}
        added: dict[str, list[Entry]] = {}
        for hook_name, kind in hookspecs.HOOK_KINDS.items():
            hook = getattr(self.pm.hook, hook_name)
            # pluggy calls the last registered first; builtins register first, so reverse.
            for impl in reversed(hook.get_hookimpls()):
                info = self.infos.get(impl.plugin_name)
                if info is None or info.error is not None:
                    continue
                mine: list[Entry] = []
                register = _make_register(kind, info, mine)
                try:
                    impl.function(register=register)
                except Exception as exc:
                    info.error = f"{hook_name}: {_describe(exc)}"
                    info.registered = {}
                    log.warning("plugins.hook_failed", plugin=info.name, hook=hook_name,
                                package=info.package, error_type=type(exc).__name__)
                    continue
                added.setdefault(info.name, []).extend(mine)
        # Only plugins whose every hook succeeded contribute, so a plugin that failed in a
        # later hook keeps nothing from earlier ones and cannot clash with anyone.
        registry = Registry()
        for plugin_name, info in self.infos.items():  # in load order: builtins first
            if info.error is not None:
                continue
            for entry in added.get(plugin_name, []):
                registry.add(entry)
                info.registered.setdefault(entry.kind, []).append(entry.name)
        self.registry = registry

    def plugin_infos(self, *, include_builtins: bool = True) -> list[PluginInfo]:
        self.load()
        return [i for i in self.infos.values() if include_builtins or not i.builtin]


def _marked_hooks(pm: pluggy.PluginManager, module: Any) -> list[str]:
    """Names of the attributes of ``module`` marked with ``@interplay.hookimpl``."""
    names = []
    for attr in dir(module):
        try:
            if pm.parse_hookimpl_opts(module, attr) is not None:
                names.append(attr)
        except Exception:  # an attribute that cannot even be read is not a hook
            continue
    return names


def _make_register(kind: str, info: PluginInfo, added: list[Entry]) -> Callable[..., None]:
    module_name, class_name = KIND_BASES[kind]

    def register(obj: Any, name: str | None = None) -> None:
        base = getattr(importlib.import_module(module_name), class_name)
        if kind == "envs" and isinstance(obj, str | os.PathLike):
            from interplay.env import env_from_toml

            obj = env_from_toml(obj)
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise InterplayError(
                f"{info.package}: register() for {kind} takes a subclass of "
                f"{module_name}.{class_name}, got {obj!r}"
            )
        resolved = name or getattr(obj, "name", None)
        if not resolved or not isinstance(resolved, str):
            raise InterplayError(f"{info.package}: {obj!r} has no name; pass name=...")
        added.append(Entry(name=resolved, kind=kind, obj=obj, plugin=info.name,
                           package=info.package))

    return register


def _env_list(var: str) -> list[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def _selected_entry_points() -> list[importlib.metadata.EntryPoint]:
    allow = _env_list("INTERPLAY_LOAD_PLUGINS")
    block = set(_env_list("INTERPLAY_BLOCK_PLUGINS") or [])
    chosen = []
    for ep in importlib.metadata.entry_points(group=hookspecs.PROJECT):
        package, _ = _dist_of(ep)
        names = {ep.name, package}
        if allow is not None and not names & set(allow):
            continue
        if names & block:
            continue
        chosen.append(ep)
    return chosen


def _dist_of(ep: importlib.metadata.EntryPoint) -> tuple[str, str]:
    dist = ep.dist
    if dist is None:
        return ep.module, "?"
    return dist.metadata["Name"], dist.version


def _own_version() -> str:
    try:
        return importlib.metadata.version("interplay")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _describe(exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" ({frame[0].filename}:{frame[0].lineno})" if frame else ""
    return f"{type(exc).__name__}: {exc}{where}"


_host: PluginHost | None = None
_host_lock = threading.Lock()


def host() -> PluginHost:
    """The process's plugin host, loaded on first use."""
    global _host
    with _host_lock:
        if _host is None:
            _host = PluginHost()
    _host.load()
    return _host


def reset(*, load_entry_points: bool = True) -> PluginHost:
    """Forget every loaded plugin (tests use this to stay independent of what is installed)."""
    global _host
    with _host_lock:
        _host = PluginHost(load_entry_points=load_entry_points)
    _host.load()
    return _host


def registry() -> Registry:
    return host().registry


def get(kind: str, name: str) -> Any:
    """Look up a registered class by kind ('harnesses', 'envs', ...) and name."""
    return registry().get(kind, name)


def lookup(kind: str, name: str) -> Any:
    """The class registered as ``name`` of ``kind`` (``"harnesses"``, ``"user-sims"``,
    ``"steps"``, ``"verifiers"`` or ``"envs"``), e.g. ``lookup("verifiers", "payoff")``; an
    unknown name raises InterplayError listing the known ones."""
    return registry().get(kind, name)


def is_kind(obj_or_name: Any, kind: str, base_name: str) -> bool:
    """Is this (a class, or a registered name) a ``base_name`` or a subclass of one?

    ``is_kind("my_judge", "verifiers", "rubric")`` is true for any verifier registered under a
    name whose class subclasses the class registered as ``rubric``. Used wherever code asks
    "is this a rubric verifier?", stored configs included.
    """
    reg = registry()
    base = reg.get(kind, base_name)
    cls = reg.get(kind, obj_or_name) if isinstance(obj_or_name, str) else obj_or_name
    if not isinstance(cls, type):
        cls = type(cls)
    return issubclass(cls, base)
