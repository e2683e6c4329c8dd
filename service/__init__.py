"""Entrabot Fleet: the worker service that connects an AI agent to Teams and mail at fleet scale."""

__version__ = "0.1.0"
