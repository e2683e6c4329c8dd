"""The emulator as Microsoft's Graph SDK for Python (msgraph-sdk) sees it: the SDK's own request
shapes (PascalCase sendMail) are accepted and its models read the answers, @odata.context included."""

from __future__ import annotations

import time
from typing import Any

import httpx
from azure.core.credentials import AccessToken
from kiota_authentication_azure.azure_identity_authentication_provider import (
    AzureIdentityAuthenticationProvider,
)
from msgraph.generated.models.body_type import BodyType
from msgraph.generated.models.chat_message import ChatMessage
from msgraph.generated.models.chat_message_hosted_content import ChatMessageHostedContent
from msgraph.generated.models.email_address import EmailAddress
from msgraph.generated.models.item_body import ItemBody
from msgraph.generated.models.message import Message
from msgraph.generated.models.recipient import Recipient
from msgraph.generated.models.user import User
from msgraph.generated.users.item.send_mail.send_mail_post_request_body import (
    SendMailPostRequestBody,
)
from msgraph.graph_request_adapter import GraphRequestAdapter
from msgraph.graph_service_client import GraphServiceClient
from seed_ids import seeded_chat_id

from emulator import RunningEmulator
from tests.emulator.emulator_testkit import Entra, bearer


class _EmulatorToken:
    """An async TokenCredential holding one emulator token (the SDK asks it before every request)."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self._token, int(time.time()) + 3600)

    async def close(self) -> None:
        """Nothing to release."""

    async def __aenter__(self) -> _EmulatorToken:
        return self

    async def __aexit__(self, *args: object) -> None:
        """Nothing to release."""


def _sdk(emu: RunningEmulator, token: str) -> GraphServiceClient:
    # TOOLCHAIN.md: kiota sends plain http only to localhost; the scopes are passed explicitly.
    auth = AzureIdentityAuthenticationProvider(
        _EmulatorToken(token), scopes=["https://graph.microsoft.com/.default"]
    )
    adapter = GraphRequestAdapter(auth)
    adapter.base_url = emu.graph_url
    return GraphServiceClient(request_adapter=adapter)


async def test_the_sdks_pascal_case_send_mail_is_delivered(
    emu: RunningEmulator, entra: Entra, http: httpx.Client
) -> None:
    ada = emu.seed.humans[0]
    body = SendMailPostRequestBody(
        message=Message(
            subject="Through the SDK",
            body=ItemBody(content_type=BodyType.Text, content="Sent by msgraph-sdk."),
            to_recipients=[Recipient(email_address=EmailAddress(address=ada.user_principal_name))],
        ),
        save_to_sent_items=True,
    )
    await _sdk(emu, entra.agent_token()).me.send_mail.post(body)
    inbox = http.get(
        emu.graph_url + "/me/mailFolders/inbox/messages",
        headers=bearer(entra.human_token(ada.user_principal_name)),
    ).json()["value"]
    assert [m["bodyPreview"] for m in inbox if m["subject"] == "Through the SDK"] == [
        "Sent by msgraph-sdk."
    ]


async def test_the_sdk_reads_a_chat_message_it_sent(emu: RunningEmulator, entra: Entra) -> None:
    client = _sdk(emu, entra.agent_token())
    chat = seeded_chat_id(emu.seed, 0)
    assert chat is not None
    sent = await client.chats.by_chat_id(chat).messages.post(
        ChatMessage(body=ItemBody(content_type=BodyType.Text, content="hello from the SDK"))
    )
    assert sent is not None and sent.id is not None
    got = await client.chats.by_chat_id(chat).messages.by_chat_message_id(sent.id).get()
    assert got is not None and got.body is not None and got.body.content == "hello from the SDK"
    assert got.additional_data.get("@odata.context", "").endswith("/messages/$entity")


async def test_the_sdk_sends_an_inline_image_and_reads_it_back_as_hosted_content(
    emu: RunningEmulator, entra: Entra
) -> None:
    client = _sdk(emu, entra.agent_token())
    chat = seeded_chat_id(emu.seed, 0)
    assert chat is not None
    image = b"\x89PNG\r\n\x1a\n" + b"through the SDK"
    messages = client.chats.by_chat_id(chat).messages
    sent = await messages.post(
        ChatMessage(
            body=ItemBody(
                content_type=BodyType.Html, content='<img src="../hostedContents/1/$value">'
            ),
            hosted_contents=[
                ChatMessageHostedContent(
                    content_bytes=image,
                    content_type="image/png",
                    additional_data={"@microsoft.graph.temporaryId": "1"},
                )
            ],
        )
    )
    assert sent is not None and sent.id is not None and sent.body is not None
    assert sent.body.content is not None and "../hostedContents/" not in sent.body.content
    listed = await messages.by_chat_message_id(sent.id).hosted_contents.get()
    assert listed is not None and listed.value is not None and len(listed.value) == 1
    hosted_id = listed.value[0].id
    assert hosted_id is not None
    assert f"/messages/{sent.id}/hostedContents/{hosted_id}/$value" in sent.body.content
    got = await (
        messages.by_chat_message_id(sent.id)
        .hosted_contents.by_chat_message_hosted_content_id(hosted_id)
        .content.get()
    )
    assert got == image


async def test_the_sdk_reads_the_agent_identitys_sponsors_as_users(
    emu: RunningEmulator, entra: Entra
) -> None:
    identity = emu.seed.agent_identity.id
    app_only = _sdk(emu, entra.identity_app_token())
    # The SDK has no builder for agentIdentity/sponsors: any directoryObject collection's builder reads it.
    url = f"{emu.graph_url}/servicePrincipals/{identity}/microsoft.graph.agentIdentity/sponsors"
    listed = await app_only.users.by_user_id(identity).sponsors.with_url(url).get()
    assert listed is not None and listed.value is not None
    sponsors = listed.value
    assert [type(s) for s in sponsors] == [User] and [s.id for s in sponsors] == [
        emu.seed.humans[0].id
    ]
    # The list names each sponsor; its profile (display name, UPN, mail) is the user's own to read.
    agent = _sdk(emu, entra.agent_token())
    named = [await agent.users.by_user_id(str(s.id)).get() for s in sponsors]
    assert [u.display_name for u in named if u is not None] == [emu.seed.humans[0].display_name]
