"""The MCP tools the agent calls: Teams, mail, promises, interactions, the daily summary."""
