"""Why the signed-in person's token cannot be had. Both are GraphErrors, so every caller of Graph fails
closed on them as on any other Graph failure (a poll cycle claims nothing, a tool reports it)."""

from __future__ import annotations

from service.graph.errors import GraphError

SIGN_IN_ADVICE = "run `entrabot-fleet signin` with the replicas' settings"


class SignInRequired(GraphError):
    """Only a person can fix it: nobody signed in, the refresh token was refused, or the record cannot
    be opened with this replica's key. The message says which, and what to run."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code)


class SignInUnavailable(GraphError):
    """Transient: the store or Entra failed, or another replica's refresh is still under way."""
