"""The channel bridge: a stdio MCP server for one Claude Code host, relaying the fleet's tools and pushes.

Claude Code takes channel events only from a server it spawns over stdio (its channels reference);
the fleet speaks streamable HTTP. ``entrabot-fleet channel`` sits between them: ``host_server`` faces
the host, ``fleet_connection`` holds the fleet session (``acknowledgements`` batches what the host
has), ``run`` wires the two.
"""
