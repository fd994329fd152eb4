"""The simulated world of always_on runs (import name ``interplay.world``).

One episode's world holds the clock's use, one event queue with a deterministic tie-break, apps
(tool providers with state and a changelog), triggers (time, state, action) and their fires,
contacts, the user's chat and phone, the agent's scheduled checks, and the timeline. A scenario
(:func:`load_scenario`, a TOML or JSON file) describes one as data; :func:`build_world` makes a
fresh one per episode. The always_on step (``interplay.builtin_envs.always_on``) runs the loop.

Scenario authors need nothing from here but the file format (docs/always_on.md); authors of an
app subclass :class:`App` and mark its tools with :func:`app_tool`; a duration in a scenario's
words (``"90m"``, ``"2h"``) reads with :func:`parse_duration`.
"""

from __future__ import annotations

from interplay.world.apps import App, app_tool
from interplay.world.scenario import build_world, load_scenario, scenario_from
from interplay.world.schedule import BusyBlock, Schedule
from interplay.world.times import parse_duration

__all__ = [
    "App",
    "BusyBlock",
    "Schedule",
    "app_tool",
    "build_world",
    "load_scenario",
    "parse_duration",
    "scenario_from",
]
