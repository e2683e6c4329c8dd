"""The loops: chat poll, email poll, discovery, daily summary, under one supervisor."""
