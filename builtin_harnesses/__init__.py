"""The builtin harnesses (``chat``, ``null``, ``command``), registered by name, and the base a
program harness plugin builds on: :class:`ProgramHarness`, its settings :class:`ProgramConfig` and
the values a program's segment is told in (:class:`Launch`, :class:`Turn`, :class:`Heard`,
:class:`Ran`, :class:`Place`, :class:`Routes`, :class:`ProgramState`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interplay._plumbing.facade import lazy_names

if TYPE_CHECKING:
    from interplay.builtin_harnesses.program import (
        Heard,
        Launch,
        Place,
        ProgramConfig,
        ProgramHarness,
        ProgramState,
        Ran,
        Routes,
        Turn,
        segment_messages,
    )

_NAMES = {
    "Heard": "interplay.builtin_harnesses.program:Heard",
    "Launch": "interplay.builtin_harnesses.program:Launch",
    "Place": "interplay.builtin_harnesses.program:Place",
    "ProgramConfig": "interplay.builtin_harnesses.program:ProgramConfig",
    "ProgramHarness": "interplay.builtin_harnesses.program:ProgramHarness",
    "ProgramState": "interplay.builtin_harnesses.program:ProgramState",
    "Ran": "interplay.builtin_harnesses.program:Ran",
    "Routes": "interplay.builtin_harnesses.program:Routes",
    "Turn": "interplay.builtin_harnesses.program:Turn",
    "segment_messages": "interplay.builtin_harnesses.program:segment_messages",
}
__all__ = [
    "Heard",
    "Launch",
    "Place",
    "ProgramConfig",
    "ProgramHarness",
    "ProgramState",
    "Ran",
    "Routes",
    "Turn",
    "segment_messages",
]
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
