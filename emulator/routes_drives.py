"""Graph v1.0 files: the signed-in user's OneDrive, items, downloads, uploads, sharing links and invites.

Pages read, not run (no tenant here): "Get drive", "List children of a driveItem", "List recent files",
"Get driveItem", "Download driveItem content" (302 to a pre-authenticated URL, no Authorization header
there), "Upload small files" (PUT …:/content, 250 MB), "driveItem: createUploadSession" (the upload URL
refuses an Authorization header with 401; fragments a multiple of 320 KiB but the last, under 60 MiB;
202 with nextExpectedRanges, then 201 or 200 with the driveItem; 416 for bytes already received; GET on
the URL for the session's status, DELETE to cancel), "Access shared items" (GET /shares/{u!…}/driveItem),
"driveItem: createLink" and "driveItem: invite". The least-privileged scopes are each page's. Graph v1.0
has no comments API for drive items (the driveItem resource lists none); so no route here either.

The pre-authenticated hosts are paths of this emulator outside /v1.0 (``/_drive_download/…``,
``/_drive_upload/…``); each refuses a request that carries a bearer token, as Graph's hosts may.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from emulator.bodies import json_object
from emulator.context import context_of
from emulator.drive_state import (
    DriveItem,
    Drives,
    Grant,
    SharingLink,
    UploadSession,
    access_denied,
    decode_sharing_id,
    encode_sharing_url,
    invalid_request,
    item_not_found,
)
from emulator.errors import GraphError
from emulator.graph_auth import Caller, graph_caller
from emulator.timestamps import teams_time

router = APIRouter()
ALL_READ = frozenset(
    {"Files.Read.All", "Files.ReadWrite.All", "Sites.Read.All", "Sites.ReadWrite.All"}
)
ALL_WRITE = frozenset({"Files.ReadWrite.All", "Sites.ReadWrite.All"})
OWN_READ = ALL_READ | {"Files.Read", "Files.ReadWrite"}
OWN_WRITE = ALL_WRITE | {"Files.ReadWrite"}
SHARES = frozenset({"Files.ReadWrite", "Files.ReadWrite.All", "Sites.ReadWrite.All"})
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)$")
Need = Literal["read", "write"]


def preauthenticated_base(request: Request) -> str:
    """Where the pre-authenticated download and upload URLs point: this emulator under its other
    loopback name, so a client that follows them sees another host, as with Graph's (an HTTP library
    keeps the Authorization header on a same-host redirect, and drops it across hosts)."""
    base = context_of(request).base(request)
    for one, other in (("//127.0.0.1", "//localhost"), ("//localhost", "//127.0.0.1")):
        if one + ":" in base or base.endswith(one):
            return base.replace(one, other, 1)
    return base


def drives_of(request: Request) -> Drives:
    drives: Drives = request.app.state.drives  # set once by the app factory
    return drives


def _require(caller: Caller, delegated: AbstractSet[str], application: AbstractSet[str]) -> None:
    held = caller.scopes if caller.user_id is not None else caller.roles
    wanted = delegated if caller.user_id is not None else application
    if not held & wanted:
        kind = "scope" if caller.user_id is not None else "role"
        raise GraphError(
            403,
            "accessDenied",
            f"Access denied: the token has no {kind} this API takes; it requires one of "
            f"'{', '.join(sorted(wanted))}'. {kind.capitalize()}s on the request "
            f"'{', '.join(sorted(held))}'.",
        )


def _accessible(request: Request, caller: Caller, item: DriveItem, need: Need) -> DriveItem:
    """``item`` when the caller's token and the caller may ``need`` it; Graph's 403 or 404 otherwise."""
    drives = drives_of(request)
    own = caller.user_id is not None and item.owner_id == caller.user_id
    if own:
        _require(caller, OWN_WRITE if need == "write" else OWN_READ, set())
        return item
    _require(
        caller,
        ALL_WRITE if need == "write" else ALL_READ,
        ALL_WRITE if need == "write" else ALL_READ,
    )
    if caller.user_id is None:
        return item
    role = drives.role_of(caller.user_id, item)
    if role is None and need == "read" and drives.reachable_by_link(caller.user_id, item):
        role = "read"
    if role is None:
        raise item_not_found(f"Item '{item.id}' was not found.")
    if need == "write" and role != "write":
        raise access_denied(f"The caller may read item '{item.id}' but not change it.")
    return item


def _item_of(
    request: Request, caller: Caller, drive_id: str | None, item_id: str, need: Need
) -> DriveItem:
    drives = drives_of(request)
    if drive_id is None:
        drive = drives.drive_of(caller.me())
        item = drives.item(drive.root_id if item_id == "root" else item_id, drive.id)
    else:
        drive = drives.drive_by_id(drive_id)
        item = drives.item(drive.root_id if item_id == "root" else item_id, drive_id)
    return _accessible(request, caller, item, need)


# --- shapes ---


def _identity(request: Request, user_id: str) -> dict[str, Any]:
    user = context_of(request).seed.find_user(user_id)
    return {
        "user": {
            "email": user.address if user else None,
            "id": user_id,
            "displayName": user.display_name if user else None,
        }
    }


def item_shape(request: Request, item: DriveItem, *, download: bool = False) -> dict[str, Any]:
    drives = drives_of(request)
    parent = drives.item(item.parent_id) if item.parent_id else None
    shaped: dict[str, Any] = {
        "createdDateTime": teams_time(item.created),
        "eTag": item.etag,
        "id": item.id,
        "lastModifiedDateTime": teams_time(item.modified),
        "name": item.name,
        "webUrl": drives.web_url(item),
        "size": len(item.data) if not item.folder else _folder_size(drives, item),
        "createdBy": _identity(request, item.created_by),
        "lastModifiedBy": _identity(request, item.modified_by),
        "parentReference": {
            "driveType": "business",
            "driveId": item.drive_id,
            **(
                {
                    "id": parent.id,
                    "name": parent.name if parent.parent_id else "Documents",
                    "path": "/drive/root:" + (f"/{parent.path}" if parent.path else ""),
                }
                if parent
                else {}
            ),
        },
        "fileSystemInfo": {
            "createdDateTime": teams_time(item.created),
            "lastModifiedDateTime": teams_time(item.modified),
        },
    }
    if item.folder:
        shaped["folder"] = {"childCount": len(drives.children(item.id))}
        if item.parent_id is None:
            shaped["root"] = {}
    else:
        shaped["cTag"] = item.ctag
        shaped["file"] = {"mimeType": item.mime_type or "application/octet-stream"}
        if download:
            token = drives.download_token(item)
            shaped["@microsoft.graph.downloadUrl"] = (
                f"{preauthenticated_base(request)}/_drive_download/{token}"
            )
    return shaped


def _folder_size(drives: Drives, folder: DriveItem) -> int:
    return sum(
        _folder_size(drives, c) if c.folder else len(c.data) for c in drives.children(folder.id)
    )


def _entity(request: Request, item: DriveItem, status: int = 200) -> JSONResponse:
    ctx = context_of(request)
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(
                request, "drives", item.drive_id, "items", entity=True
            ),
            **item_shape(request, item, download=True),
        },
        status_code=status,
    )


def _collection(request: Request, context: str, items: list[DriveItem]) -> JSONResponse:
    return JSONResponse(
        {
            "@odata.context": f"{context_of(request).graph_base(request)}/$metadata#{context}",
            "value": [item_shape(request, i) for i in items],
        }
    )


# --- drives and items ---


@router.get("/v1.0/me/drive")
@router.get("/v1.0/drives/{drive_id}")
async def get_drive(
    request: Request, drive_id: str | None = None, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    ctx = context_of(request)
    drives = drives_of(request)
    drive = drives.drive_of(caller.me()) if drive_id is None else drives.drive_by_id(drive_id)
    own = drive.owner.id == caller.user_id
    _require(caller, OWN_READ if own else ALL_READ, ALL_READ)
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(request, "drives", entity=True),
            "id": drive.id,
            "driveType": "business",
            "name": "OneDrive",
            "webUrl": drives.web_url(drives.item(drive.root_id)),
            "owner": _identity(request, drive.owner.id),
            "quota": {
                "total": 1099511627776,
                "used": 0,
                "remaining": 1099511627776,
                "state": "normal",
            },
        }
    )


@router.get("/v1.0/me/drive/root")
@router.get("/v1.0/me/drive/items/{item_id}")
@router.get("/v1.0/drives/{drive_id}/items/{item_id}")
async def get_item(
    request: Request,
    item_id: str = "root",
    drive_id: str | None = None,
    caller: Caller = Depends(graph_caller("other")),
) -> JSONResponse:
    item = _item_of(request, caller, drive_id, item_id, "read")
    return _entity(request, item)


@router.get("/v1.0/me/drive/root/children")
@router.get("/v1.0/me/drive/items/{item_id}/children")
@router.get("/v1.0/drives/{drive_id}/items/{item_id}/children")
async def list_children(
    request: Request,
    item_id: str = "root",
    drive_id: str | None = None,
    caller: Caller = Depends(graph_caller("other")),
) -> JSONResponse:
    folder = _item_of(request, caller, drive_id, item_id, "read")
    if not folder.folder:
        raise invalid_request(f"Item '{folder.id}' is a file; only folders have children.")
    return _collection(
        request,
        f"drives('{folder.drive_id}')/items('{folder.id}')/children",
        drives_of(request).children(folder.id),
    )


@router.get("/v1.0/me/drive/recent")
async def recent(request: Request, caller: Caller = Depends(graph_caller("other"))) -> JSONResponse:
    """Files the user used lately, newest first; another's file carries a ``remoteItem`` facet naming
    its own drive, as "List recent files" shows."""
    user_id = caller.me()
    _require(caller, OWN_READ, set())
    drives = drives_of(request)
    value = []
    for item in drives.recent(user_id):
        shaped = item_shape(request, item)
        if item.owner_id != user_id:
            shaped["remoteItem"] = {
                "id": item.id,
                "name": item.name,
                "size": shaped["size"],
                "webUrl": shaped["webUrl"],
                "file": shaped.get("file"),
                "parentReference": {"driveId": item.drive_id, "driveType": "business"},
            }
        value.append(shaped)
    return JSONResponse(
        {
            "@odata.context": f"{context_of(request).graph_base(request)}/$metadata#Collection(driveItem)",
            "value": value,
        }
    )


@router.get("/v1.0/me/drive/root:/{path:path}:")
async def get_item_by_path(
    request: Request, path: str, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    drives = drives_of(request)
    folder = drives.item(drives.drive_of(caller.me()).root_id)
    for part in [p for p in path.split("/") if p]:
        found = drives.child_named(folder.id, part)
        if found is None:
            raise item_not_found(f"No item at '{path}'.")
        folder = found
    return _entity(request, _accessible(request, caller, folder, "read"))


# --- downloads: 302 to a pre-authenticated URL ---


@router.get("/v1.0/me/drive/items/{item_id}/content")
@router.get("/v1.0/drives/{drive_id}/items/{item_id}/content")
async def download(
    request: Request,
    item_id: str,
    drive_id: str | None = None,
    caller: Caller = Depends(graph_caller("other")),
) -> Response:
    item = _item_of(request, caller, drive_id, item_id, "read")
    if item.folder:
        raise invalid_request("A folder has no content to download.")
    drives = drives_of(request)
    if caller.user_id is not None:
        drives.touch(caller.user_id, item.id)
    token = drives.download_token(item)
    return RedirectResponse(f"{preauthenticated_base(request)}/_drive_download/{token}", 302)


@router.get("/_drive_download/{token}")
async def pre_authenticated_download(token: str, request: Request) -> Response:
    if request.headers.get("authorization"):
        raise GraphError(
            403,
            "accessDenied",
            "The download URL is pre-authenticated: send no Authorization header to it.",
        )
    item = drives_of(request).take_download(token)
    return Response(item.data, media_type=item.mime_type or "application/octet-stream")


# --- simple upload ---


@router.put("/v1.0/me/drive/root:/{path:path}:/content")
@router.put("/v1.0/me/drive/items/{parent_id}:/{path:path}:/content")
@router.put("/v1.0/drives/{drive_id}/items/{parent_id}:/{path:path}:/content")
async def upload_new(
    request: Request,
    path: str,
    parent_id: str = "root",
    drive_id: str | None = None,
    caller: Caller = Depends(graph_caller("other")),
) -> JSONResponse:
    parent, name = _upload_target(request, caller, drive_id, parent_id, path)
    data = await _simple_body(request)
    item, new = drives_of(request).put_file(
        parent.owner_id, parent.id, name, data, by=caller.user_id or parent.owner_id
    )
    return _entity(request, item, 201 if new else 200)


@router.put("/v1.0/me/drive/items/{item_id}/content")
@router.put("/v1.0/drives/{drive_id}/items/{item_id}/content")
async def upload_replace(
    request: Request,
    item_id: str,
    drive_id: str | None = None,
    caller: Caller = Depends(graph_caller("other")),
) -> JSONResponse:
    item = _item_of(request, caller, drive_id, item_id, "write")
    if item.folder or item.parent_id is None:
        raise invalid_request("Only a file's content can be replaced.")
    data = await _simple_body(request)
    updated, _ = drives_of(request).put_file(
        item.owner_id, item.parent_id, item.name, data, by=caller.user_id or item.owner_id
    )
    return _entity(request, updated)


def _upload_target(
    request: Request, caller: Caller, drive_id: str | None, parent_id: str, path: str
) -> tuple[DriveItem, str]:
    parent = _item_of(request, caller, drive_id, parent_id, "write")
    folder_path, _, name = path.strip("/").rpartition("/")
    if folder_path:
        parent = drives_of(request).folder_at(parent.owner_id, f"{parent.path}/{folder_path}")
    return parent, name


async def _simple_body(request: Request) -> bytes:
    limit = drives_of(request).limits.simple_upload_max_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    data = await request.body()
    if len(data) > limit:
        raise _too_large(len(data), limit)
    return data


def _too_large(size: int, limit: int) -> GraphError:
    # The page states the limit, not the error; 413 with OneDrive's "requestTooLarge" is assumed.
    return GraphError(
        413,
        "requestTooLarge",
        f"The file is {size} bytes; a simple upload takes at most {limit}. Use an upload session "
        "(createUploadSession) for larger files.",
    )


# --- upload sessions ---


@router.post("/v1.0/me/drive/root:/{path:path}:/createUploadSession")
@router.post("/v1.0/me/drive/items/{parent_id}:/{path:path}:/createUploadSession")
@router.post("/v1.0/drives/{drive_id}/items/{parent_id}:/{path:path}:/createUploadSession")
async def create_upload_session(
    request: Request,
    path: str,
    parent_id: str = "root",
    drive_id: str | None = None,
    caller: Caller = Depends(graph_caller("other")),
) -> JSONResponse:
    parent, name = _upload_target(request, caller, drive_id, parent_id, path)
    raw = await request.body()
    body = await json_object(request) if raw.strip() else {}
    item = body.get("item") or {}
    conflict = (
        str(item.get("@microsoft.graph.conflictBehavior", "replace"))
        if isinstance(item, dict)
        else "replace"
    )
    if conflict not in ("replace", "fail", "rename"):
        raise invalid_request(f"Unknown @microsoft.graph.conflictBehavior '{conflict}'.")
    drives = drives_of(request)
    if conflict == "fail" and drives.child_named(parent.id, name) is not None:
        raise GraphError(409, "nameAlreadyExists", f"An item named '{name}' already exists here.")
    session = drives.open_session(parent.owner_id, parent.id, name)
    return JSONResponse(
        {
            "@odata.context": f"{context_of(request).graph_base(request)}/$metadata#microsoft.graph.uploadSession",
            **_session_shape(request, session),
        }
    )


def _session_shape(request: Request, session: UploadSession) -> dict[str, Any]:
    return {
        "uploadUrl": f"{preauthenticated_base(request)}/_drive_upload/{session.id}",
        "expirationDateTime": teams_time(session.expires),
        "nextExpectedRanges": session.missing(),
    }


def _no_bearer(request: Request) -> None:
    if request.headers.get("authorization"):
        raise GraphError(
            401,
            "unauthenticated",
            "The upload URL is pre-authenticated: send no Authorization header to it.",
        )


@router.put("/_drive_upload/{session_id}")
async def upload_fragment(session_id: str, request: Request) -> JSONResponse:
    _no_bearer(request)
    header = request.headers.get("content-range", "")
    match = _RANGE.match(header.strip())
    if match is None:
        raise invalid_request("Content-Range must be 'bytes {start}-{end}/{total}'.")
    start, end, total = (int(g) for g in match.groups())
    data = await request.body()
    if end < start or end >= total or len(data) != end - start + 1:
        raise invalid_request(
            f"Content-Range '{header}' does not match the {len(data)} bytes sent."
        )
    outcome = drives_of(request).put_fragment(session_id, start, end, total, data)
    if isinstance(outcome, UploadSession):
        return JSONResponse(
            {
                "expirationDateTime": teams_time(outcome.expires),
                "nextExpectedRanges": outcome.missing(),
            },
            status_code=202,
        )
    item, new = outcome
    return _entity(request, item, 201 if new else 200)


@router.get("/_drive_upload/{session_id}")
async def upload_status(session_id: str, request: Request) -> JSONResponse:
    _no_bearer(request)
    session = drives_of(request).session(session_id)
    return JSONResponse(_session_shape(request, session))


@router.delete("/_drive_upload/{session_id}", status_code=204)
async def cancel_upload(session_id: str, request: Request) -> Response:
    _no_bearer(request)
    drives_of(request).cancel_session(session_id)
    return Response(status_code=204)


# --- sharing ---


@router.get("/v1.0/shares/{share_id}/driveItem")
async def shared_drive_item(
    share_id: str, request: Request, caller: Caller = Depends(graph_caller("other"))
) -> JSONResponse:
    user_id = caller.me()
    _require(caller, SHARES, set())
    item = drives_of(request).resolve_url(decode_sharing_id(share_id), user_id)
    ctx = context_of(request)
    return JSONResponse(
        {
            "@odata.context": ctx.odata_context(
                request, "shares", share_id, "driveItem", entity=True
            ),
            **item_shape(request, item, download=True),
        }
    )


@router.post("/v1.0/me/drive/items/{item_id}/createLink")
@router.post("/v1.0/drives/{drive_id}/items/{item_id}/createLink")
async def create_link(
    request: Request,
    item_id: str,
    drive_id: str | None = None,
    caller: Caller = Depends(graph_caller("other")),
) -> JSONResponse:
    item, body = await _to_share(request, caller, drive_id, item_id)
    link_type, scope = body.get("type"), body.get("scope", "organization")
    if link_type not in ("view", "edit"):
        raise invalid_request(
            f"Link type '{link_type}' is not offered here; use 'view' or 'edit' ('embed' is OneDrive personal only)."
        )
    if scope not in ("organization", "users"):
        raise invalid_request(
            f"Link scope '{scope}' is not offered here; use 'organization' or 'users' "
            "(anonymous links are off in this tenant)."
        )
    link, new = drives_of(request).create_link(
        item, caller.user_id or item.owner_id, link_type, scope
    )
    return JSONResponse(
        {
            "@odata.context": f"{context_of(request).graph_base(request)}/$metadata#microsoft.graph.permission",
            **_link_shape(link),
        },
        status_code=201 if new else 200,
    )


async def _to_share(
    request: Request, caller: Caller, drive_id: str | None, item_id: str
) -> tuple[DriveItem, dict[str, Any]]:
    """The item a createLink or invite shares (the caller must be able to change it), and the body."""
    _require(caller, OWN_WRITE, ALL_WRITE)
    item = _item_of(request, caller, drive_id, item_id, "write")
    return item, await json_object(request)


def _link_shape(link: SharingLink) -> dict[str, Any]:
    return {
        "id": link.id,
        "roles": ["write" if link.type == "edit" else "read"],
        "link": {"type": link.type, "scope": link.scope, "webUrl": link.url},
        "hasPassword": False,
        "shareId": encode_sharing_url(link.url),
    }


@router.post("/v1.0/me/drive/items/{item_id}/invite")
@router.post("/v1.0/drives/{drive_id}/items/{item_id}/invite")
async def invite(
    request: Request,
    item_id: str,
    drive_id: str | None = None,
    caller: Caller = Depends(graph_caller("other")),
) -> JSONResponse:
    item, body = await _to_share(request, caller, drive_id, item_id)
    roles = body.get("roles")
    if not isinstance(roles, list) or not roles or any(r not in ("read", "write") for r in roles):
        raise invalid_request('roles must be ["read"] or ["write"].')
    recipients = body.get("recipients")
    if not isinstance(recipients, list) or not recipients:
        raise invalid_request("recipients must list at least one driveRecipient.")
    seed = context_of(request).seed
    user_ids = []
    for recipient in recipients:
        ref = (
            recipient.get("objectId") or recipient.get("email")
            if isinstance(recipient, dict)
            else None
        )
        user = seed.find_user(str(ref)) if ref else None
        if user is None:
            raise invalid_request(f"Recipient '{ref}' is not a user of this tenant.")
        user_ids.append(user.id)
    grants = drives_of(request).invite(
        item, caller.user_id or item.owner_id, user_ids, tuple(roles)
    )
    return JSONResponse(
        {
            "@odata.context": f"{context_of(request).graph_base(request)}/$metadata#Collection(permission)",
            "value": [_grant_shape(request, g) for g in grants],
        }
    )


def _grant_shape(request: Request, grant: Grant) -> dict[str, Any]:
    user = context_of(request).seed.find_user(grant.user_id)
    return {
        "id": grant.id,
        "roles": list(grant.roles),
        "grantedTo": _identity(request, grant.user_id),
        "invitation": {"email": user.address if user else None, "signInRequired": True},
    }
