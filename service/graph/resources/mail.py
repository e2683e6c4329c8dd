"""The agent user's mail (``/me/messages``, ``/me/sendMail``) and mailboxes shared with it."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Mapping
from datetime import datetime
from typing import Any, Literal

from service.graph.models import MailMessage
from service.graph.pages import Page
from service.graph.transport import GraphTransport
from service.graph.urls import MAX_TOP, check_top, graph_timestamp


class GraphMail:
    def __init__(self, transport: GraphTransport) -> None:
        self._t = transport

    def list_mail(
        self,
        since: datetime | None,
        *,
        top: int = MAX_TOP,
        folder: str = "inbox",
        max_pages: int = 10,
        mailbox: str | None = None,
    ) -> AsyncGenerator[Page[MailMessage], None]:
        """Pages of ``folder``'s mail received after ``since`` (all when None), newest first, with their
        internet headers, which the automated-mail filter reads: Graph returns internetMessageHeaders only
        when $select names it, and then only what $select names (read, not run: the message resource).

        ``mailbox`` (a user id or UPN) reads a mailbox shared with the agent user instead of its own:
        ``/users/{id | userPrincipalName}/mailFolders/{id}/messages`` with Mail.Read.Shared ("Get Outlook
        messages in a shared or delegated folder"; read, not run); 403 when the mailbox is not shared with it."""
        params: dict[str, str | int] = {
            "$top": check_top(top),
            "$orderby": "receivedDateTime desc",
            "$select": MailMessage.graph_select(),
        }
        if since is not None:
            params["$filter"] = f"receivedDateTime gt {graph_timestamp(since)}"
        if mailbox is None:
            url, route = self._t.urls.url("me/mailFolders/{}/messages", folder, params=params)
        else:
            url, route = self._t.urls.url(
                "users/{}/mailFolders/{}/messages", mailbox, folder, params=params
            )
        return self._t.pages(url, route, MailMessage, "mail", max_pages)

    async def get_mail(self, message_id: str, *, mailbox: str | None = None) -> MailMessage:
        if mailbox is None:
            return await self._t.get_one(MailMessage, "mail", "me/messages/{}", message_id)
        return await self._t.get_one(
            MailMessage, "mail", "users/{}/messages/{}", mailbox, message_id
        )

    async def send_mail(
        self,
        to: str | Iterable[str],
        subject: str,
        body: str,
        *,
        cc: Iterable[str] = (),
        content_type: Literal["text", "html"] = "text",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send mail as the agent user (kept in Sent Items). Like a chat message, never re-sent: Graph
        answers 202 with no body, so a lost answer leaves only Sent Items to tell. ``headers`` are custom
        internet message headers, names starting ``x-`` (the sendMail page's example 2; Graph refuses other
        names with 400 InvalidInternetMessageHeader, as its users report; read, not run)."""
        recipients = [to] if isinstance(to, str) else list(to)
        copied = list(cc)
        if not recipients and not copied:
            raise ValueError("send_mail needs at least one recipient")
        message: dict[str, Any] = {
            "subject": subject,
            "body": {"contentType": "HTML" if content_type == "html" else "Text", "content": body},
            "toRecipients": _recipients(recipients),
        }
        if copied:
            message["ccRecipients"] = _recipients(copied)
        if headers:
            message["internetMessageHeaders"] = _headers(headers)
        url, route = self._t.urls.url("me/sendMail")
        await self._t.request(
            "POST",
            url,
            route=route,
            json={"message": message, "saveToSentItems": True},
            idempotent=False,
        )

    async def answer_mail(
        self,
        message_id: str,
        kind: Literal["reply", "replyAll", "forward"],
        comment: str,
        *,
        to: Iterable[str] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Reply, reply-all or forward (to ``to``) a mail of the agent user's mailbox with ``comment`` above
        the original, which Graph quotes; saved to Sent Items, 202 with no body, never re-sent ("message:
        reply", "replyAll", "forward", v1.0; read, not run). The custom ``headers`` ride on the message
        parameter, "any writeable properties to update in the reply message": that Graph keeps them there as
        sendMail does is not documented, so whoever settles a lost answer must not rely on them alone."""
        body: dict[str, Any] = {"comment": comment}
        if kind == "forward":
            recipients = list(to)
            if not recipients:
                raise ValueError("a forward needs at least one recipient")
            body["toRecipients"] = _recipients(recipients)
        elif list(to):
            raise ValueError("a reply goes to the people of the original; it takes no recipients")
        if headers:
            body["message"] = {"internetMessageHeaders": _headers(headers)}
        url, route = self._t.urls.url("me/messages/{}/" + kind, message_id)
        await self._t.request("POST", url, route=route, json=body, idempotent=False)


def _recipients(addresses: Iterable[str]) -> list[dict[str, Any]]:
    return [{"emailAddress": {"address": address}} for address in addresses]


def _headers(headers: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in headers.items()]
