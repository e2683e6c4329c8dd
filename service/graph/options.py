"""What a Graph client is configured with, as the composition root reads it from the settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.graph.auth.tokens import GRAPH_SCOPE
from service.graph.retry_policy import RetryPolicy


@dataclass(frozen=True)
class GraphOptions:
    base_url: str  # Graph's root, e.g. https://graph.microsoft.com/v1.0 (ENTRABOT_GRAPH_URL)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    scope: str = GRAPH_SCOPE
