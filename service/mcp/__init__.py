"""The MCP server layer: /mcp over streamable HTTP, sessions, channel pushes, host detection and auth.

``server.build_mcp`` wires the pieces; ``sdk_adapter`` is the only module that leans on the SDK's
private surface.
"""
