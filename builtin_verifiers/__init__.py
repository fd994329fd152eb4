"""The builtin verifiers, registered by name, and what a plugin builds on: the rubric judge
(:class:`Rubric`, :class:`RubricConfig`, :class:`Criterion`, :func:`always_on_seats`) to subclass,
and the state match (:class:`StateMatch`, :class:`StateMatchConfig`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interplay._plumbing.facade import lazy_names

if TYPE_CHECKING:
    from interplay.builtin_verifiers.rubric import Criterion, Rubric, RubricConfig, always_on_seats
    from interplay.builtin_verifiers.state import StateMatch, StateMatchConfig

_NAMES = {
    "Criterion": "interplay.builtin_verifiers.rubric:Criterion",
    "Rubric": "interplay.builtin_verifiers.rubric:Rubric",
    "RubricConfig": "interplay.builtin_verifiers.rubric:RubricConfig",
    "StateMatch": "interplay.builtin_verifiers.state:StateMatch",
    "StateMatchConfig": "interplay.builtin_verifiers.state:StateMatchConfig",
    "always_on_seats": "interplay.builtin_verifiers.rubric:always_on_seats",
}
__all__ = [
    "Criterion",
    "Rubric",
    "RubricConfig",
    "StateMatch",
    "StateMatchConfig",
    "always_on_seats",
]
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
