"""Plugin discovery: the pluggy plugin manager and what it loaded.

Owns the builtins (``DEFAULT_PLUGINS``, registered in-process so a broken third-party plugin can
never take them down), the ``interplay`` entry-point group (each entry point loaded on its own,
its failures, ``sys.exit()`` included, kept to itself), the allow- and block-lists, and calling
each plugin's hooks to fill the registry of names (:mod:`interplay.plugins.registry`). It must not
import any plugin by name, and importing it loads nothing: plugins load once, on first use.

Environment:

- ``INTERPLAY_LOAD_PLUGINS``: comma-separated allow-list of external plugins (entry-point or
  distribution names). Set but empty: no external plugin loads. Unset: all load.
- ``INTERPLAY_BLOCK_PLUGINS``: comma-separated block-list, applied after the allow-list.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import inspect
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pluggy

from interplay.config import loading as config
from interplay.config.loading import default_sites
from interplay.contracts.env import OPTION_KEYS, EnvFile
from interplay.errors import InterplayError, describe_exception
from interplay.log import Verbatim, get_logger
from interplay.plugins import hookspecs
from interplay.plugins.registry import KIND_BASES, Entry, Registry, UnknownName
from interplay.plugins.registry import (
    KINDS as KINDS,  # the kinds, where callers have always found them
)
from interplay.plugins.registry import SINGULAR as SINGULAR
from interplay.plugins.registry import Clash as Clash

log = get_logger("interplay.plugins.host")

DEFAULT_PLUGINS: tuple[str, ...] = (
    "interplay.builtin_harnesses.plugin",
    "interplay.builtin_envs.plugin",
    "interplay.builtin_verifiers.plugin",
    "interplay.builtin_sandboxes.plugin",
    "interplay.export.plugin",
)

BUILTIN_PACKAGE = "interplay"


@attrs.define
class PluginInfo:
    """What `interplay plugins` reports about one plugin.

    ``clashes`` lists the names it registered that another package registers too (see
    :class:`Clash`); ``skipped`` says why an installed plugin was not loaded (the allow- or
    block-list), and is None for every plugin that was.
    """

    name: str
    package: str
    version: str
    builtin: bool
    hooks: list[str] = attrs.Factory(list)
    registered: dict[str, list[str]] = attrs.Factory(dict)
    error: str | None = None
    clashes: list[dict[str, Any]] = attrs.Factory(list)
    skipped: str | None = None
    #: Its error is a lookup of a name no plugin registered (yet): a plugin registered later
    #: (``register_module``) may register it, so its hooks are called again then.
    waiting: bool = False


class PluginHost:
    """The plugin manager plus what was loaded, what failed and what was registered."""

    def __init__(self, *, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        #: Installed plugins the allow- or block-list kept from loading.
        self.skipped: list[PluginInfo] = []
        self.registry = Registry()
        #: What the hooks called so far registered, while the registry is being rebuilt: a
        #: hook's own lookups see it (:func:`get`).
        self.building: Registry | None = None
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
                chosen, self.skipped = _selected_entry_points()
                for ep in chosen:
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
            # What a plugin prints must not end up in `interplay plugins --json`.
            with contextlib.redirect_stdout(sys.stderr):
                module = ep.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # sys.exit() or the like in a plugin is its own failure
            self.infos[ep.name] = PluginInfo(
                name=ep.name, package=package, version=version, builtin=False,
                error=describe_exception(exc),
            )
            # The plugin's own error, not user data: what its author needs to read.
            log.warning("plugins.load_failed", plugin=ep.name, package=package,
                        version=version, exception_type=type(exc).__name__,
                        error=Verbatim(self.infos[ep.name].error or ""))
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
                                          builtin=builtin, error=describe_exception(exc))
            return
        hooks = sorted(caller.name for caller in self.pm.get_hookcallers(module) or [])
        error = _hook_problem(self.pm, module)
        if error is not None:
            self.pm.unregister(module, name=name)
        self.infos[name] = PluginInfo(name=name, package=package, version=version,
                                      builtin=builtin, hooks=hooks, error=error)

    # -- the registry --------------------------------------------------------------------------

    def _collect(self) -> None:
        """Call every plugin's register_* hooks, each on its own, and rebuild the registry.

        The hooks run kind by kind (harnesses, user sims, steps, verifiers, envs, export
        formats), the builtins first, then the plugins in load order. A hook may look up what
        another plugin registers (``interplay.lookup("verifiers", "tau2")`` to subclass it):
        it sees everything registered by the hooks called before it, and a hook whose lookup
        names what is not registered yet is called again once every other hook has run, until
        no more succeed; then its lookup's error (which lists every name registered) is its
        plugin's error."""
        for info in self.infos.values():
            if info.waiting:
                info.error, info.waiting = None, False
            if info.error is None:
                info.registered = {}
            info.clashes = []
        added: dict[str, list[Entry]] = {}
        self.building = Registry()
        calls: list[tuple[Any, str, str, PluginInfo]] = []
        for hook_name, kind in hookspecs.HOOK_KINDS.items():
            hook = getattr(self.pm.hook, hook_name)
            # pluggy calls the last registered first; builtins register first, so reverse.
            for impl in reversed(hook.get_hookimpls()):
                info = self.infos.get(impl.plugin_name)
                if info is not None and info.error is None:
                    calls.append((impl, hook_name, kind, info))
        try:
            pending = [c for c in calls if not self._call(*c, added, last_try=False)]
            while pending:
                waiting = [c for c in pending if c[3].error is None]
                pending = [c for c in waiting if not self._call(*c, added, last_try=False)]
                if len(pending) == len(waiting):  # no lookup found its name this round
                    for c in pending:
                        if c[3].error is None:
                            self._call(*c, added, last_try=True)
                    break
        finally:
            self.building = None
        # Only plugins whose every hook succeeded contribute, so a plugin that failed in a
        # later hook keeps nothing from earlier ones and cannot clash with anyone.
        registry = Registry()
        for plugin_name, info in self.infos.items():  # in load order: builtins first
            if info.error is not None:
                continue
            for entry in added.get(plugin_name, []):
                registry.add(entry)
                info.registered.setdefault(entry.kind, []).append(entry.name)
        for clash in registry.clashes().values():
            for info in self.infos.values():
                if info.error is None and clash.name in info.registered.get(clash.kind, ()):
                    info.clashes.append(attrs.asdict(clash))
            log.warning("plugins.clash", kind=clash.kind, name=clash.name,
                        packages=clash.packages, used=clash.used)
        self.registry = registry

    def _call(self, impl: Any, hook_name: str, kind: str, info: PluginInfo,
              added: dict[str, list[Entry]], *, last_try: bool) -> bool:
        """One plugin's hook; whether it ran (False: it looked up a name not registered yet,
        and is to be called again; on the ``last_try`` that is its plugin's error)."""
        mine: list[Entry] = []
        try:
            _call_hook(impl.function, hook_name, kind, info, mine)
        except KeyboardInterrupt:
            raise
        except UnknownName as exc:
            if not last_try:
                return False
            self._failed(info, hook_name, exc)
            info.waiting = True
            return True
        except BaseException as exc:  # reported, never fatal
            self._failed(info, hook_name, exc)
            return True
        added.setdefault(info.name, []).extend(mine)
        if self.building is not None:
            for entry in mine:
                self.building.add(entry)
        return True

    def _failed(self, info: PluginInfo, hook_name: str, exc: BaseException) -> None:
        info.error = f"{hook_name}: {describe_exception(exc)}"
        info.registered = {}
        log.warning("plugins.hook_failed", plugin=info.name, hook=hook_name,
                    package=info.package, exception_type=type(exc).__name__,
                    error=Verbatim(info.error))

    def plugin_infos(self, *, include_builtins: bool = True) -> list[PluginInfo]:
        """Every plugin loaded (or that failed to), then the installed ones not loaded."""
        self.load()
        return [i for i in self.infos.values() if include_builtins or not i.builtin] + list(
            self.skipped)


def _call_hook(function: Callable[..., Any], hook_name: str, kind: str, info: PluginInfo,
               added: list[Entry]) -> None:
    """One plugin's hook, with a ``register`` that works only while the hook runs."""
    register = _Register(kind, info, added)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            returned = function(register=register)
    finally:
        register.closed = True
    if inspect.iscoroutine(returned):
        returned.close()
        raise InterplayError(f"{hook_name} is async; hooks are plain functions "
                             "(def, not async def) that call register(...)")
    if returned is not None:
        raise InterplayError(f"{hook_name} returned {type(returned).__name__}; hooks return "
                             "nothing: call register(cls) for each class instead")


def _hook_problem(pm: pluggy.PluginManager, module: Any) -> str | None:
    """Why a plugin module's hooks cannot work as written, or None."""
    marked = set(_marked_hooks(pm, module))
    # pluggy accepts implementations of hooks nobody specified; a misspelt hook would then
    # register nothing without a word, so it is reported as this plugin's error.
    unknown = sorted(marked - set(hookspecs.HOOK_KINDS))
    if unknown:
        return (f"unknown hook(s) {', '.join(unknown)}; interplay's hooks are "
                f"{', '.join(hookspecs.HOOK_KINDS)}")
    # A hook function without the marker is never called: as silent as a misspelt one.
    unmarked = sorted(h for h in hookspecs.HOOK_KINDS
                      if h not in marked and callable(getattr(module, h, None)))
    if unmarked:
        return (f"{', '.join(unmarked)} is not marked as a hook; decorate it with "
                f"@interplay.hookimpl (from interplay import hookimpl)")
    return None


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


class _Register:
    """The ``register`` one hook call receives: it checks what a plugin registers, keeps what
    passes, and refuses to be called once its hook has returned (what it kept is counted by
    then)."""

    def __init__(self, kind: str, info: PluginInfo, added: list[Entry]) -> None:
        self.kind, self.info, self.added = kind, info, added
        self.closed = False

    def __call__(self, obj: Any, name: str | None = None) -> None:
        kind, package = self.kind, self.info.package
        if self.closed:
            raise InterplayError(f"{package}: register() was called after its hook returned; "
                                 f"call it inside register_{kind.replace('-', '_')}")
        base = KIND_BASES[kind]
        if kind == "envs" and isinstance(obj, str | os.PathLike):
            # An env file is kept by its path and name, and read when the env is looked up
            # (interplay.run.loader): registering it needs nothing above the contracts.
            obj = EnvFile.at(obj)
        if kind == "envs" and isinstance(obj, EnvFile):
            self.added.append(Entry(name=name or obj.name, kind=kind, obj=obj,
                                    plugin=self.info.name, package=package,
                                    builtin=self.info.builtin))
            return
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise InterplayError(f"{package}: register() for {kind} takes a subclass of "
                                 f"interplay.{base.__name__}, got {obj!r}")
        resolved = name or getattr(obj, "name", None)
        if not resolved or not isinstance(resolved, str):
            raise InterplayError(f"{package}: {obj!r} has no name; pass name=...")
        config_cls = getattr(obj, "Config", None)
        if not (isinstance(config_cls, type)
                and (attrs.has(config_cls) or dataclasses.is_dataclass(config_cls))):
            raise InterplayError(f"{package}: {obj.__qualname__}.Config must be a class "
                                 f"made with @attrs.define, got {config_cls!r}")
        if kind == "envs" and attrs.has(config_cls):
            taken = sorted(OPTION_KEYS & set(attrs.fields_dict(config_cls)))
            if taken:
                raise InterplayError(
                    f"{package}: {obj.__qualname__}.Config has the setting {taken[0]}, which "
                    f"every env takes from the run (env.{taken[0]}: "
                    f"interplay.contracts.EnvOptions); rename it",
                    site=config.field_site(config_cls, taken[0]))
        problems = default_sites(config_cls, f"{obj.__qualname__}.Config")
        if problems:
            # Reported where the default is written, not at this register() call.
            text, site = problems[0]
            raise InterplayError(f"{package}: {text}; fix the default in the class", site=site)
        self.added.append(Entry(name=resolved, kind=kind, obj=obj, plugin=self.info.name,
                                package=package, builtin=self.info.builtin))


def _env_list(var: str) -> list[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def _selected_entry_points() -> tuple[list[importlib.metadata.EntryPoint], list[PluginInfo]]:
    """The installed plugins to load, and the ones the allow- or block-list keeps out."""
    allow = _env_list("INTERPLAY_LOAD_PLUGINS")
    block = set(_env_list("INTERPLAY_BLOCK_PLUGINS") or [])
    chosen, skipped = [], []
    for ep in importlib.metadata.entry_points(group=hookspecs.PROJECT):
        package, version = _dist_of(ep)
        names = {ep.name, package}
        why = None
        if allow is not None and not names & set(allow):
            why = ("INTERPLAY_LOAD_PLUGINS is set and empty" if not allow
                   else "not named in INTERPLAY_LOAD_PLUGINS")
        elif names & block:
            why = "named in INTERPLAY_BLOCK_PLUGINS"
        if why is None:
            chosen.append(ep)
        else:
            skipped.append(PluginInfo(name=ep.name, package=package, version=version,
                                      builtin=False, skipped=why))
    return chosen, skipped


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
    """The registry of names; inside a register_* hook, what the hooks called so far
    registered (see :meth:`PluginHost._collect`)."""
    plugin_host = host()
    return plugin_host.building or plugin_host.registry


def get(kind: str, name: str) -> Any:
    """What was registered as ``name`` of ``kind`` ('harnesses', 'envs', ...): a class, or
    for an env written as a file its :class:`~interplay.contracts.env.EnvFile` (an Env class of any
    name: :func:`interplay.run.loader.env_class`). An unknown name raises InterplayError listing
    the known ones, and every plugin that failed to load or register: the name may be one of
    theirs."""
    plugin_host = host()
    if plugin_host.building is not None:  # inside a hook: what is registered so far
        return plugin_host.building.get(kind, name)
    try:
        return plugin_host.registry.get(kind, name)
    except InterplayError as exc:
        failed = [i for i in plugin_host.infos.values() if i.error is not None]
        if not failed or kind not in KINDS or \
                plugin_host.registry.clash(kind, name) is not None:
            raise
        why = "; ".join(f"plugin {i.name} ({i.package} {i.version}) failed to load: {i.error}"
                        for i in failed)
        raise InterplayError(f"{exc}; {why} (`interplay plugins` lists it; fix or uninstall "
                             f"it)") from None


def is_kind(obj_or_name: Any, kind: str, base_name: str) -> bool:
    """Is this a ``base_name`` or a subclass of one? It may be a class, an instance, a
    registered name, or a stored config: a row naming its ``kind`` (a TOML env's
    ``[[verifiers]]``, ``env.verifiers`` in a results folder's config.json), or a
    :func:`describe_kinds` record (config.json's ``verifiers``), which answers without the
    plugin installed.

    ``is_kind("my_judge", "verifiers", "rubric")`` is true for any verifier registered under a
    name whose class subclasses the class registered as ``rubric``. Used wherever code asks
    "is this a rubric verifier?".
    """
    if isinstance(obj_or_name, Mapping):
        if isinstance(obj_or_name.get("is"), list):
            return base_name in obj_or_name["is"]
        obj_or_name = obj_or_name.get("kind")
        if not isinstance(obj_or_name, str):
            what = SINGULAR.get(kind, kind)
            raise InterplayError(f"a stored {what} config needs a kind (its registered name) "
                                 f"to tell what it is")
    reg = registry()
    base = reg.get(kind, base_name)
    cls = reg.get(kind, obj_or_name) if isinstance(obj_or_name, str) else obj_or_name
    if not isinstance(cls, type):
        cls = type(cls)
    return issubclass(cls, base)


def kinds_of(obj: Any, kind: str) -> list[str]:
    """The registered names of ``obj``'s class and of its registered base classes, nearest
    first: ``["always_on_agent_verifier", "rubric"]`` for a verifier subclassing the rubric."""
    cls = obj if isinstance(obj, type) else type(obj)
    names = {entry.obj: entry.name for entry in registry().entries(kind)}
    return [names[c] for c in cls.__mro__ if c in names]


def describe_kinds(obj: Any, kind: str) -> dict[str, Any]:
    """What a results folder keeps of one of an env's verifiers (or steps): its name and
    :func:`kinds_of`, so that :func:`is_kind` answers for it later, with or without the plugin
    that registered it."""
    return {"name": getattr(obj, "name", "") or type(obj).__name__, "is": kinds_of(obj, kind)}
