"""The plugin module the ``interplay`` entry point names: it registers the mini-swe-agent
harness."""

from __future__ import annotations

import interplay
from interplay import Register


@interplay.hookimpl
def register_harnesses(register: Register) -> None:
    from interplay_mini_swe_agent.harness import MiniSweAgentHarness

    register(MiniSweAgentHarness)
