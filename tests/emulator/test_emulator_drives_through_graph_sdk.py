"""The emulator's file routes as Microsoft's Graph SDK for Python (msgraph-sdk) sees them: the SDK's own
request shapes are accepted and its models read every answer (drive, items, children, shares, createLink,
invite, createUploadSession, and the download it follows through the 302)."""

from __future__ import annotations

import httpx
from msgraph.generated.drives.item.items.item.create_link.create_link_post_request_body import (
    CreateLinkPostRequestBody,
)
from msgraph.generated.drives.item.items.item.create_upload_session.create_upload_session_post_request_body import (
    CreateUploadSessionPostRequestBody,
)
from msgraph.generated.drives.item.items.item.invite.invite_post_request_body import (
    InvitePostRequestBody,
)
from msgraph.generated.models.drive_item_uploadable_properties import (
    DriveItemUploadableProperties,
)
from msgraph.generated.models.drive_recipient import DriveRecipient

from emulator import RunningEmulator, Seed
from emulator.drive_state import encode_sharing_url
from tests.emulator.emulator_testkit import Entra, bearer
from tests.emulator.test_emulator_through_graph_sdk import _sdk


async def test_the_sdk_reads_every_file_route(
    emu: RunningEmulator, entra: Entra, http: httpx.Client, seed: Seed
) -> None:
    agent = bearer(entra.agent_token())
    put = http.put(
        emu.graph_url + "/me/drive/root:/sdk.txt:/content", content=b"via sdk", headers=agent
    )
    assert put.status_code == 201, put.text
    sdk = _sdk(emu, entra.agent_token())
    drive = await sdk.me.drive.get()
    assert drive is not None and drive.id is not None and drive.drive_type == "business"
    items = sdk.drives.by_drive_id(drive.id).items
    children = await items.by_drive_item_id("root").children.get()
    assert children is not None and [c.name for c in children.value or []] == ["sdk.txt"]
    item_id = put.json()["id"]
    item = await items.by_drive_item_id(item_id).get()
    assert item is not None and item.size == 7 and item.file is not None
    assert item.file.mime_type == "text/plain" and item.parent_reference is not None
    content = await items.by_drive_item_id(item_id).content.get()
    assert content == b"via sdk"  # the SDK followed the 302 to the other host, without the token
    link = await items.by_drive_item_id(item_id).create_link.post(
        CreateLinkPostRequestBody(type="view", scope="organization")
    )
    assert link is not None and link.link is not None and link.link.web_url is not None
    shared = await sdk.shares.by_shared_drive_item_id(
        encode_sharing_url(link.link.web_url)
    ).drive_item.get()
    assert shared is not None and shared.id == item_id
    invited = await items.by_drive_item_id(item_id).invite.post(
        InvitePostRequestBody(
            recipients=[DriveRecipient(email=seed.humans[0].user_principal_name)],
            roles=["read"],
            require_sign_in=True,
            send_invitation=False,
        )
    )
    assert invited is not None and invited.value and invited.value[0].roles == ["read"]
    session = await items.by_drive_item_id("root:/big.bin:").create_upload_session.post(
        CreateUploadSessionPostRequestBody(
            item=DriveItemUploadableProperties(
                additional_data={"@microsoft.graph.conflictBehavior": "replace"}
            )
        )
    )
    assert session is not None and session.upload_url is not None
    assert session.next_expected_ranges == ["0-"] and session.expiration_date_time is not None
