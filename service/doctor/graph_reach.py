"""Does anything answer at ENTRABOT_GRAPH_URL? One request, before any permission check.

Without it, a wrong URL showed up as one ``GraphConnectionError`` per permission check, each after
the Graph client's own resends (four lines, 11.8 s), none naming the setting. The probe is
``GET {graph_url}/me`` without a token: Microsoft Graph answers it 401 (InvalidAuthenticationToken,
"Access token is empty"; read in Graph's docs on authentication errors, not run against Graph here),
the emulator does too, so any answer but a 404 proves a Graph is there. A 404 means nothing serves
``/me`` at that path: the host answers but the path (the API version) is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from service.doctor.report import Finding, fail, ok

CHECK = "graph reachable"
_PROBE_TIMEOUT_S = 10.0
GRAPH_V1 = "https://graph.microsoft.com/v1.0"


@dataclass(frozen=True)
class GraphReach:
    finding: Finding
    answered: bool  # False: every later Graph check is skipped, saying why

    @property
    def why_not(self) -> str:
        return "not tried: nothing answers at ENTRABOT_GRAPH_URL (see 'graph reachable')"


async def check_graph_reachable(graph_url: str, http: httpx.AsyncClient) -> GraphReach:
    url = graph_url.rstrip("/")
    try:
        # No token: the question is only whether a Graph answers there.
        response = await http.get(f"{url}/me", timeout=_PROBE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return GraphReach(
            fail(
                CHECK,
                f"ENTRABOT_GRAPH_URL={url} does not answer ({type(exc).__name__}); set it to "
                f"{GRAPH_V1} (or the emulator's URL) and check the network path to it",
            ),
            answered=False,
        )
    if response.status_code == 404:
        return GraphReach(
            fail(
                CHECK,
                f"ENTRABOT_GRAPH_URL={url} answered 404 to GET /me: no Graph API at that path; "
                f"set it to {GRAPH_V1} (or the emulator's URL ending in /v1.0)",
            ),
            answered=False,
        )
    return GraphReach(ok(CHECK, f"{url} answered (HTTP {response.status_code})"), answered=True)
