"""The vocabulary the workers and the tools share: who the agent is, and Graph payloads as inbound messages."""
