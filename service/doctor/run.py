"""The preflight, in order: settings, identity (the agent user's chain, or in delegated mode the signed-in
person's record and token), sponsor read, Graph permissions, storage, URLs.

Every check runs that can (a failed hop skips only what depends on it, and Graph not answering at
ENTRABOT_GRAPH_URL skips every Graph check), each prints its line as soon as it is known, and the exit
code is non-zero when any check failed. Settings that do not parse never get here: the command
refuses them in one line, as every command does.
"""

from __future__ import annotations

from typing import TextIO

from service.config import Settings
from service.doctor.graph_checks import (
    SPONSOR_CHECK,
    GrantAdvice,
    Grantee,
    check_delegated,
    check_sponsors,
    skip_every_graph_check,
)
from service.doctor.graph_reach import check_graph_reachable
from service.doctor.identity_checks import check_identity
from service.doctor.report import Report, skip
from service.doctor.sign_in_checks import SignInGrantee, check_sign_in
from service.doctor.settings_checks import check_mcp_auth, check_notification_url
from service.doctor.storage_checks import check_storage
from service.graph.auth import TokenProvider
from service.graph.client import GraphClient
from service.graph.options import GraphOptions
from service.graph.retry_policy import RetryPolicy
from service.graph.models import DirectoryObjectRef
from service.graph.http_pool import new_http_client
from service.from_settings.storage import storage_options
from service.storage.errors import StorageError
from service.storage.resolution import BlobAuth, BlobChoice, choose_backend
from service.telemetry.metrics import GraphMetrics


async def run_doctor(
    settings: Settings, *, create_container: bool = False, out: TextIO | None = None
) -> bool:
    """Run every check, printing one line each; True when none failed. ``create_container``: the
    storage check creates a missing Blob container instead of failing on it."""
    report = Report(out)
    report.section("settings")
    report.add(check_mcp_auth(settings))
    async with new_http_client(read_timeout_s=settings.graph_timeout_s) as http:

        def make_graph(tokens: TokenProvider) -> GraphClient:
            # A doctor waits for nobody: a throttled tenant shows up as a failed line, not a long pause.
            return GraphClient(
                GraphOptions(settings.graph_url, retry=RetryPolicy(max_retry_after=5.0)),
                tokens,
                http=http,
                metrics=GraphMetrics(),
            )

        by_agent_user = _storage_by_agent_user(settings)
        if settings.auth_mode == "delegated":
            report.section("signed-in person (delegated mode)")
            identity, chain, person = await check_sign_in(settings, http)
            grantee: GrantAdvice = SignInGrantee(
                settings.delegated_client_id or "(ENTRABOT_DELEGATED_CLIENT_ID)",
                person.describe() if person else "the person who signs in",
            )
        else:
            report.section("identity chain")
            identity, chain = await check_identity(
                settings, http, storage_by_agent_user=by_agent_user
            )
            grantee = Grantee(
                settings.agent_identity_id or "(ENTRABOT_AGENT_IDENTITY_ID)",
                settings.agent_user_upn or settings.agent_user_id or "(ENTRABOT_AGENT_USER_UPN)",
            )
        for finding in identity:
            report.add(finding)
        report.section("graph permissions")
        reach = await check_graph_reachable(settings.graph_url, http)
        report.add(reach.finding)
        sponsors: list[DirectoryObjectRef] = []
        if not isinstance(grantee, Grantee):  # delegated mode
            why = "delegated mode: the signed-in person is the agent's only sponsor"
            report.add(skip("sponsor read", why))
        elif not reach.answered:
            report.add(skip(SPONSOR_CHECK, reach.why_not))
        else:
            sponsor_finding, sponsors = await check_sponsors(chain, make_graph, grantee)
            report.add(sponsor_finding)
        if reach.answered:
            graph_findings = await check_delegated(chain, make_graph, sponsors, grantee)
        else:
            graph_findings = skip_every_graph_check(reach.why_not)
        for finding in graph_findings:
            report.add(finding)
        report.section("storage")
        for finding in await check_storage(
            settings,
            chain.user_tokens,
            by_agent_user=by_agent_user,
            create_container=create_container,
        ):
            report.add(finding)
        report.section("notifications")
        report.add(await check_notification_url(settings, http))
    print(report.summary(), file=out, flush=True)
    return not report.failures


def _storage_by_agent_user(settings: Settings) -> bool:
    try:
        choice = choose_backend(storage_options(settings))
    except StorageError:
        return False  # the storage section reports the misconfiguration
    return isinstance(choice, BlobChoice) and choice.auth is BlobAuth.AGENT_USER
