"""The emulator's controls for files (under /_emulator): put a file into a person's OneDrive, and make
a sharing link to it, so a test can paste the link into a chat (``files`` on the admin message route)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from emulator.errors import bad_request
from emulator.routes_drives import drives_of, item_shape
from emulator.state import CardAttachment

router = APIRouter(prefix="/_emulator")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PutFile(_Body):
    name: str = Field(min_length=1)
    content_base64: str = ""
    folder: str = ""  # a path under the owner's root, made as needed


class MakeLink(_Body):
    type: Literal["view", "edit"] = "view"
    scope: Literal["organization", "users"] = "organization"


class Invite(_Body):
    users: list[str] = Field(min_length=1)  # ids or UPNs
    role: Literal["read", "write"] = "read"


@router.post("/drives/{user_ref}/files", status_code=201)
async def put_file(user_ref: str, body: PutFile, request: Request) -> JSONResponse:
    drives = drives_of(request)
    user = drives.seed.find_user(user_ref)
    if user is None:
        raise bad_request(f"{user_ref!r} is not a user of the tenant")
    try:
        data = base64.b64decode(body.content_base64, validate=True)
    except binascii.Error:
        raise bad_request("content_base64 is not base64") from None
    folder = drives.folder_at(user.id, body.folder)
    item, _ = drives.put_file(user.id, folder.id, body.name, data, by=user.id)
    return JSONResponse(item_shape(request, item), status_code=201)


@router.post("/drives/items/{item_id}/links", status_code=201)
async def make_link(item_id: str, body: MakeLink, request: Request) -> JSONResponse:
    drives = drives_of(request)
    item = drives.item(item_id)
    link, _ = drives.create_link(item, item.owner_id, body.type, body.scope)
    return JSONResponse(
        {"id": link.id, "webUrl": link.url, "type": link.type, "scope": link.scope}, status_code=201
    )


@router.post("/drives/items/{item_id}/invite", status_code=201)
async def invite(item_id: str, body: Invite, request: Request) -> JSONResponse:
    drives = drives_of(request)
    item = drives.item(item_id)
    users = [drives.seed.find_user(u) for u in body.users]
    if any(u is None for u in users):
        raise bad_request("every invited user must be a user of the tenant")
    grants = drives.invite(item, item.owner_id, [u.id for u in users if u], (body.role,))
    return JSONResponse({"granted": [g.user_id for g in grants]}, status_code=201)


def file_reference(request: Request, sender_id: str) -> Callable[[dict[str, Any]], CardAttachment]:
    """The check of a file attachment on a posted message ("Send message with file attachment", read,
    not run): {"id": the driveItem's eTag GUID, "contentType": "reference", "contentUrl": the file's URL,
    "name"}, the file one the sender can open."""
    drives = drives_of(request)

    def reference(raw: dict[str, Any]) -> CardAttachment:
        url = raw.get("contentUrl")
        if not isinstance(url, str) or not url:
            raise bad_request("A reference attachment needs the file's URL in contentUrl.")
        item = drives.resolve_url(url, sender_id)
        if str(raw.get("id", "")).strip("{}").lower() != item.guid.lower():
            raise bad_request(
                "A reference attachment's id must be the GUID of the file's eTag "
                f"('{item.guid}' for {item.name})."
            )
        return CardAttachment(item.guid, "reference", None, url, raw.get("name") or item.name)

    return reference


def shared_file_attachments(
    request: Request, sender_id: str, urls: list[str]
) -> tuple[list[CardAttachment], str]:
    """The reference attachments for files a person pastes into a chat, and the HTML placing them."""
    drives = drives_of(request)
    attachments = []
    for url in urls:
        item = drives.resolve_url(url, sender_id)
        attachments.append(CardAttachment(item.guid, "reference", None, url, item.name))
    tags = "".join(f'<attachment id="{a.id}"></attachment>' for a in attachments)
    return attachments, tags
