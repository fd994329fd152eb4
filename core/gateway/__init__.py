"""The tool gateway: a seat's tools for harness programs that run as separate processes (codex,
any CLI), served over MCP beside the interception server."""

from __future__ import annotations

from interplay.gateway.server import SERVER_NAME, ToolBinding, ToolGateway, ToolRoute

__all__ = ["SERVER_NAME", "ToolBinding", "ToolGateway", "ToolRoute"]
