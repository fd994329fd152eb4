"""The registry of names: every harness, user sim, step, verifier and env a plugin registered,
each remembering the plugin and package it came from, and the names several packages claim.
What it holds is what was registered: a class, or for an env written as a file its
:class:`~interplay.contracts.env.EnvFile` (the loader, :mod:`interplay.run.loader`, reads it).

It owns lookups and clash rules (a builtin's registration wins; between installed packages none
does), not loading: :mod:`interplay.plugins.host` calls the hooks and fills a registry.
"""

from __future__ import annotations

from typing import Any

import attrs

from interplay.contracts.env import Env
from interplay.contracts.exporter import ExportFormat
from interplay.contracts.harness import Harness
from interplay.contracts.sandbox import Sandbox
from interplay.contracts.scenario import ScenarioKind
from interplay.contracts.step import Step
from interplay.contracts.usersim import UserSim
from interplay.contracts.verifier import Verifier
from interplay.errors import InterplayError

#: The kinds a plugin can register, by hook, with the base class each must subclass.
KIND_BASES: dict[str, type] = {
    "harnesses": Harness,
    "user-sims": UserSim,
    "steps": Step,
    "verifiers": Verifier,
    "sandboxes": Sandbox,
    "envs": Env,
    "export-formats": ExportFormat,
    "scenario-kinds": ScenarioKind,
}
KINDS: tuple[str, ...] = tuple(KIND_BASES)
#: One of each kind, for messages ("unknown harness 'x'").
SINGULAR: dict[str, str] = {"harnesses": "harness", "user-sims": "user sim", "steps": "step",
                            "verifiers": "verifier", "sandboxes": "sandbox",
                            "envs": "env",
                            "export-formats": "export format",
                            "scenario-kinds": "scenario kind"}


class UnknownName(InterplayError):
    """A lookup of a name nobody registered (its message lists the names that are)."""


@attrs.define
class Entry:
    """One registered name: the object and the plugin that registered it."""

    name: str
    kind: str
    obj: Any
    plugin: str
    package: str
    builtin: bool = False


@attrs.define
class Clash:
    """One name registered by several packages. A builtin's registration is used (no installed
    package can take a builtin down); between external packages none is, and looking the name
    up is an error naming them."""

    kind: str
    name: str
    #: Every package that registered the name, in load order (builtins load first).
    packages: list[str]
    #: The package whose registration is used, or None when the name cannot be used.
    used: str | None = None

    def describe(self) -> str:
        what = f"{SINGULAR[self.kind]} {self.name!r}"
        others = [p for p in self.packages if p != self.used]
        if self.used is not None:
            return (f"{what} registered by {' and '.join(self.packages)}; the builtin one is "
                    f"used and {', '.join(others)}'s is ignored (rename it)")
        return (f"{what} registered by {' and '.join(self.packages)}; it cannot be used until "
                f"one is uninstalled or blocked with INTERPLAY_BLOCK_PLUGINS")


class Registry:
    """Names of every kind, each remembering the plugin that registered it."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
        self._clashes: dict[tuple[str, str], Clash] = {}

    def add(self, entry: Entry) -> None:
        bucket = self._entries[entry.kind]
        prior = bucket.get(entry.name)
        if prior is None:
            bucket[entry.name] = entry
            return
        if prior.obj is entry.obj or prior.obj == entry.obj:  # one class (or env file) again
            return
        key = (entry.kind, entry.name)
        clash = self._clashes.get(key)
        if clash is None:
            clash = self._clashes[key] = Clash(entry.kind, entry.name, [prior.package],
                                               used=prior.package if prior.builtin else None)
        clash.packages.append(entry.package)
        if entry.builtin and clash.used is None:
            bucket[entry.name] = entry
            clash.used = entry.package

    def get(self, kind: str, name: str) -> Any:
        return self.entry(kind, name).obj

    def entry(self, kind: str, name: str) -> Entry:
        if kind not in self._entries:
            raise InterplayError(f"unknown kind {kind!r}; expected one of: {', '.join(KINDS)}")
        clash = self._clashes.get((kind, name))
        if clash is not None and clash.used is None:
            raise InterplayError(
                f"{SINGULAR[kind]} {name!r} is registered by both {clash.packages[0]!r} and "
                f"{clash.packages[1]!r}; uninstall one or block it with INTERPLAY_BLOCK_PLUGINS"
            )
        try:
            return self._entries[kind][name]
        except KeyError:
            known = ", ".join(sorted(self._entries[kind])) or "none"
            raise UnknownName(
                f"unknown {SINGULAR[kind]} {name!r}; known: {known} (`interplay list {kind}`)"
            ) from None

    def names(self, kind: str) -> list[str]:
        return sorted(self._entries[kind])

    def entries(self, kind: str) -> list[Entry]:
        return [self._entries[kind][n] for n in self.names(kind)]

    def clash(self, kind: str, name: str) -> Clash | None:
        return self._clashes.get((kind, name))

    def clashes(self) -> dict[tuple[str, str], Clash]:
        return dict(self._clashes)
