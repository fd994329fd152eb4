"""interplay-mini-swe-agent: the ``mini-swe-agent`` harness, which runs mini-swe-agent as an
agent, its loop on this machine against the interception server and its bash commands in the
episode's sandbox.

Registered through the ``interplay`` entry-point group (``interplay_mini_swe_agent.plugin``);
the kernel never imports this package by name. Importing it does not import mini-swe-agent
(which makes its config folder and loads a ``.env`` on import): only ``mini``'s own process
loads :mod:`interplay_mini_swe_agent.environment`.
"""

from __future__ import annotations

from interplay_mini_swe_agent.command_line import MINI_SWE_AGENT_VERSION, MiniSweAgentConfig
from interplay_mini_swe_agent.harness import MiniSweAgentHarness

__version__ = "0.1.0"

__all__ = ["MINI_SWE_AGENT_VERSION", "MiniSweAgentConfig", "MiniSweAgentHarness",
           "__version__"]
