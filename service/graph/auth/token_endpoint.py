"""One hop against Entra's token endpoint: POST a form, get an AccessToken or a TokenAcquisitionError.

Asking for a token has no side effect, so a hop that got no answer, a 5xx or a 429 is retried
(bounded, with backoff and Retry-After); a 4xx is Entra's verdict on what we sent and is reported
at once, with the hop named and Entra's AADSTS code and description.

Why not MSAL Python. MSAL 1.39 has both agent-user hops (``acquire_token_for_client(fmi_path=)`` and
``acquire_token_by_user_federated_identity_credential``), checked in its source, but it does not fit:
- it accepts only an https authority (``msal.authority.canonicalize`` raises ValueError for
  http://127.0.0.1:.../tenant, even with ``oidc_authority``), so it cannot talk to the Graph + Entra
  emulator the tests, the demo and the benchmarks run over plain HTTP;
- it is synchronous (``requests``): every hop would need a worker thread, outside the shared httpx
  pool, its timeouts and its tracing;
- it fetches the tenant's OpenID configuration on construction (a network call at start-up) and keeps
  its own token cache, where ``acquire_token_for_client`` refuses ``force_refresh``: a token Graph
  revoked (CAE) could not be dropped the way ``SingleFlightTokenCache.invalidate`` drops it;
- what the fleet reports per hop (metrics by outcome, the AADSTS code with secrets redacted, retries
  honouring Retry-After) would have to be rebuilt around its return dicts anyway.
The forms in agent_user.py use the field names MSAL sends for these grants (``fmi_path``; ``user_id``
and ``user_federated_identity_credential``, from msal.oauth2cli's ``obtain_token_by_user_fic``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from opentelemetry import trace

from service.graph.auth.tokens import AccessToken
from service.graph.errors import HOP_NAMES, TokenAcquisitionError
from service.graph.retry_policy import Action, Attempt, RetryPolicy, next_step
from service.telemetry.metrics import GraphMetrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

# Fields whose values are credentials: they are redacted from anything Entra echoes back.
SECRET_FIELDS = ("client_secret", "client_assertion", "user_federated_identity_credential")
_AADSTS = re.compile(r"AADSTS\d+")
_DESCRIPTION_LIMIT = 300

HOP_ADVICE = {
    1: "Check ENTRABOT_TENANT_ID, ENTRABOT_BLUEPRINT_CLIENT_ID and the blueprint credential (secret, "
    "certificate or federated token file), and that ENTRABOT_AGENT_IDENTITY_ID (sent as fmi_path) names "
    "an agent identity of this blueprint",
    2: "Check ENTRABOT_AGENT_IDENTITY_ID: it must be the id of an agent identity created from this blueprint",
    3: "Check ENTRABOT_AGENT_USER_ID: it must be the object id of the agent user bound to this agent "
    "identity, and the requested scope must be consented for it",
}


def token_url(authority: str, tenant_id: str) -> str:
    return f"{authority.rstrip('/')}/{tenant_id}/oauth2/v2.0/token"


@dataclass(frozen=True)
class EntraAnswer:
    """Entra's last answer to a form POST: ``status`` None when none came, ``body`` its JSON (or why not)."""

    status: int | None
    body: Any
    form: Mapping[str, str] = field(repr=False)  # what was sent, to redact from Entra's words
    started: float  # when the answered attempt was sent: a token's lifetime counts from here


class TokenEndpoint:
    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str,
        *,
        metrics: GraphMetrics,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        self._http = http
        self.url = url
        self._metrics = metrics
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._policy = policy or RetryPolicy(max_attempts=3, max_retry_after=30.0)

    async def exchange(
        self, hop: int, build_form: Callable[[], Awaitable[Mapping[str, str]]]
    ) -> AccessToken:
        """Run one hop; ``build_form`` is called per attempt (assertions are single-use, files rotate)."""
        answer = await self.request(
            HOP_NAMES[hop].replace(" ", "_"),
            build_form,
            span=f"Entra token hop {hop}",
            attributes={"entrabot.token.hop": hop},
        )
        if answer.status == 200:
            return self._token_from(hop, answer.body, answer.started)
        raise self._failure(hop, answer.status, answer.body, answer.form)

    async def request(
        self,
        label: str,
        build_form: Callable[[], Awaitable[Mapping[str, str]]],
        *,
        span: str,
        attributes: Mapping[str, str | int] | None = None,
    ) -> EntraAnswer:
        """POST the form until Entra gives its verdict: a 200 or a 4xx comes back as it is; no answer, a 5xx
        or a 429 is retried (bounded, with backoff and Retry-After) and the last answer comes back.
        ``label`` names the request in ``entrabot_token_requests{hop}``; ``span`` names its trace span."""
        attempt = 0
        while True:
            attempt += 1
            form = dict(await build_form())
            started = self._clock()
            status, body, retry_after = await self._post(label, form, span, attributes or {})
            if status == 200:
                return EntraAnswer(status, body, form, started)
            # ``refreshed=True``: a 401 from the token endpoint is a verdict, not a stale token.
            step = next_step(
                Attempt(attempt, idempotent=True, refreshed=True),
                status=status,
                retry_after_header=retry_after,
                now=self._clock(),
                policy=self._policy,
                rng=self._rng,
            )
            if step.action is Action.RETRY:
                await self._sleep(step.delay)
                continue
            return EntraAnswer(status, body, form, started)

    async def _post(
        self, label: str, form: dict[str, str], span_name: str, attributes: Mapping[str, str | int]
    ) -> tuple[int | None, Any, str | None]:
        with tracer.start_as_current_span(
            span_name, kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            try:
                response = await self._http.post(
                    self.url, data=form, headers={"Accept": "application/json"}
                )
            except httpx.TransportError as exc:
                span.set_attribute("error.type", type(exc).__name__)
                self._count(label, "unavailable")
                return None, type(exc).__name__, None
            span.set_attribute("http.response.status_code", response.status_code)
        self._count(label, _outcome(response.status_code))
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        return response.status_code, body, response.headers.get("Retry-After")

    def _token_from(self, hop: int, body: Any, started: float) -> AccessToken:
        token = body.get("access_token") if isinstance(body, dict) else None
        expires_in = body.get("expires_in") if isinstance(body, dict) else None
        try:
            # Entra sends a number; v1-style endpoints a numeric string; anything else is no lifetime.
            lifetime = float(expires_in) if isinstance(expires_in, (int, float, str)) else -1.0
        except ValueError:
            lifetime = -1.0
        if not isinstance(token, str) or not token or not (0 < lifetime < math.inf):
            raise TokenAcquisitionError(
                hop,
                "the token endpoint answered 200 without a usable access_token and expires_in",
                advice="Check that ENTRABOT_AUTHORITY points at Entra (or the emulator)",
            )
        # Expiry counted from when the request started: never later than Entra's own clock.
        return AccessToken(token, started + lifetime)

    def _failure(
        self, hop: int, status: int | None, body: Any, form: Mapping[str, str]
    ) -> TokenAcquisitionError:
        if status is None:
            return TokenAcquisitionError(
                hop,
                f"the token endpoint {self.url} could not be reached ({body})",
                advice="Check ENTRABOT_AUTHORITY and the network path to it",
            )
        code, description = entra_error(body, form)
        log.warning("token hop %d (%s) failed: HTTP %s %s", hop, HOP_NAMES[hop], status, code or "")
        return TokenAcquisitionError(
            hop,
            f"HTTP {status}",
            description=description,
            status=status,
            code=code,
            advice=HOP_ADVICE[hop]
            if 400 <= status < 500
            else "Entra is failing; the next call tries again",
        )

    def _count(self, label: str, outcome: str) -> None:
        self._metrics.token_requests.labels(hop=label, outcome=outcome).inc()


def _outcome(status: int) -> str:
    if status == 200:
        return "ok"
    if status == 429:
        return "throttled"
    return "rejected" if 400 <= status < 500 else "unavailable"


def entra_error(body: Any, form: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(AADSTS code, Entra's description without trace ids) from an Entra error body."""
    if not isinstance(body, dict):
        return None, None
    raw = body.get("error_description")
    text = raw if isinstance(raw, str) else ""
    codes = body.get("error_codes")
    code = None
    if isinstance(codes, list) and codes and isinstance(codes[0], int):
        code = f"AADSTS{codes[0]}"
    elif match := _AADSTS.search(text):
        code = match.group(0)
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    described = re.sub(r"^AADSTS\d+:\s*", "", first_line).split(" Trace ID:")[0].strip()
    for name in SECRET_FIELDS:
        value = form.get(name)
        if value:
            described = described.replace(value, "[redacted]")
    description: str | None = described
    if not description:
        error = body.get("error")
        description = error if isinstance(error, str) else None
    return code, (clip_description(description) if description else None)


def clip_description(text: str, limit: int = _DESCRIPTION_LIMIT) -> str:
    """At most ``limit`` characters, ending where a sentence ends: a cut in the middle left a bracket
    or quote open ("… [grant_type=client_credentials, client_id=… (agent identity blueprint")."""
    if len(text) <= limit:
        return text
    head = text[: limit + 1]
    ends = [
        i for i, c in enumerate(head) if c == "." and (i + 1 == len(text) or text[i + 1] == " ")
    ]
    if ends and ends[-1] >= limit // 3:
        return text[: ends[-1] + 1]
    return text[:limit].rsplit(" ", 1)[0] + " …"
