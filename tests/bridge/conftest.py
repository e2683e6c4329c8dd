"""The bridge tests reuse the MCP tests' live in-process replica server."""

from tests.mcp.conftest import live  # noqa: F401 - a fixture, used by name
