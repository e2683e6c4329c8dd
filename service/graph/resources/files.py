"""Files (OneDrive and SharePoint): the agent's drive, its recent files, shared links, downloads and
uploads, sharing links.

Graph's pages, read, not run (only the emulator is here): "Access shared items" (a sharing URL as
``u!`` + unpadded base64url), "Download driveItem content" (302 to a pre-authenticated URL that takes
no Authorization header), "Upload small files" (one PUT, up to 250 MB), "driveItem: createUploadSession"
(PUTs of byte ranges to the uploadUrl without the bearer token, each a multiple of 320 KiB but the
last; 202 with nextExpectedRanges until the last, then 201/200 with the item; a GET on the uploadUrl
tells what arrived), "driveItem: createLink".
"""

from __future__ import annotations

import base64
from urllib.parse import quote, urljoin

import httpx

from service.graph.answers import error_for
from service.graph.drive_models import Drive, DriveItem, Permission, UploadSession
from service.graph.errors import (
    GraphConnectionError,
    GraphError,
    GraphNotFound,
    GraphPayloadError,
    GraphUnavailable,
)
from service.graph.transport import GraphTransport

FRAGMENT_UNIT = 320 * 1024  # every fragment but the last is a multiple of this
DEFAULT_FRAGMENT_BYTES = 16 * FRAGMENT_UNIT  # 5 MiB, under Graph's 60 MiB a fragment
UPLOAD_ROUTE = "{uploadUrl}"  # the metrics' name of the pre-authenticated upload URL
DOWNLOAD_ROUTE = "{downloadUrl}"


def encode_sharing_url(url: str) -> str:
    """The share id Graph takes for a sharing URL: "u!" + the URL in unpadded base64url."""
    return "u!" + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def drive_path(path: str) -> str:
    """A path under the drive's root, each segment percent-encoded; a segment that climbs out ("..")
    or is empty is refused (paths reach here from model tool calls)."""
    parts = path.strip("/").split("/")
    if not path.strip("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a usable drive path: {path!r} (use e.g. 'notes/plan.txt')")
    return "/".join(quote(p, safe="") for p in parts)


class GraphFiles:
    def __init__(self, transport: GraphTransport) -> None:
        self._t = transport

    async def my_drive(self) -> Drive:
        return await self._t.get_one(Drive, "drive", "me/drive")

    async def recent(self, limit: int) -> list[DriveItem]:
        """The agent user's recently used files, newest first ("List recent files")."""
        url, route = self._t.urls.url("me/drive/recent")
        items = await self._t.collect(url, route, DriveItem, "drive item", max_pages=3)
        return items[:limit]

    async def get_item(self, drive_id: str, item_id: str) -> DriveItem:
        return await self._t.get_one(
            DriveItem, "drive item", "drives/{}/items/{}", drive_id, item_id
        )

    async def resolve_sharing_url(self, url: str) -> DriveItem:
        """The driveItem a sharing link (or a file's own URL) names (GET /shares/{u!…}/driveItem)."""
        return await self._t.get_one(
            DriveItem, "drive item", "shares/{}/driveItem", encode_sharing_url(url)
        )

    async def download(self, drive_id: str, item_id: str, *, max_bytes: int) -> bytes:
        """The file's bytes: Graph answers 302 to a pre-authenticated URL, followed here without the
        bearer token. GraphPayloadError when the file is larger than ``max_bytes``."""
        url, route = self._t.urls.url("drives/{}/items/{}/content", drive_id, item_id)
        response = await self._t.request("GET", url, route=route, idempotent=True, redirect_ok=True)
        if response.is_redirect:
            location = urljoin(url, response.headers.get("Location", ""))
            response = await self._t.send_preauthenticated("GET", location, route=DOWNLOAD_ROUTE)
            if not response.is_success:
                raise error_for(response, "GET", DOWNLOAD_ROUTE, None, True)
        declared = response.headers.get("Content-Length")
        if (declared is not None and declared.isdigit() and int(declared) > max_bytes) or len(
            response.content
        ) > max_bytes:
            raise GraphPayloadError(f"the file on {route} is larger than {max_bytes} bytes")
        return response.content

    async def upload_small(self, path: str, data: bytes) -> DriveItem:
        """Create or replace the file at ``path`` under the agent's root in one PUT ("Upload small
        files"). Retried like a read: the same bytes put twice leave the file as once."""
        url = f"{self._t.urls.base}/me/drive/root:/{drive_path(path)}:/content"
        route = "me/drive/root:/{path}:/content"
        response = await self._t.request(
            "PUT",
            url,
            route=route,
            content=data,
            headers={"Content-Type": "application/octet-stream"},
            idempotent=True,
        )
        return self._t.item(response, DriveItem, "drive item", route)

    async def upload_large(
        self,
        path: str,
        data: bytes,
        *,
        fragment_bytes: int = DEFAULT_FRAGMENT_BYTES,
        max_resumes: int = 3,
    ) -> DriveItem:
        """Create or replace the file at ``path`` through an upload session. A fragment that fails (an
        error or no answer) is not re-sent blindly: the session says which bytes it holds
        (nextExpectedRanges) and the upload resumes from there, at most ``max_resumes`` times."""
        if fragment_bytes % FRAGMENT_UNIT:
            raise ValueError(f"fragment_bytes must be a multiple of {FRAGMENT_UNIT} (320 KiB)")
        session = await self._open_session(path)
        upload_url, total, start, resumes = session.upload_url or "", len(data), 0, 0
        while True:
            end = min(start + fragment_bytes, total) - 1
            response: httpx.Response | None
            try:
                response = await self._t.send_preauthenticated(
                    "PUT",
                    upload_url,
                    route=UPLOAD_ROUTE,
                    content=data[start : end + 1],
                    headers={"Content-Range": f"bytes {start}-{end}/{total}"},
                )
            except GraphConnectionError:
                response = None
            if response is not None and response.status_code in (200, 201):
                return self._t.item(response, DriveItem, "drive item", UPLOAD_ROUTE)
            if response is not None and response.status_code == 202:
                ranges = UploadSession.model_validate(response.json()).next_expected_ranges
                start = _first_missing(ranges, total)
                continue
            if response is not None and response.status_code < 500 and response.status_code != 416:
                raise error_for(response, "PUT", UPLOAD_ROUTE, None, False)
            resumes += 1
            if resumes > max_resumes:
                raise GraphUnavailable(
                    f"the upload of {path} failed {resumes} times; nothing was committed, try again"
                )
            ranges = await self._session_status(upload_url)
            if not ranges:  # every byte arrived, only the answer was lost
                return await self._item_at(path)
            start = _first_missing(ranges, total)

    async def _item_at(self, path: str) -> DriveItem:
        url = f"{self._t.urls.base}/me/drive/root:/{drive_path(path)}:"
        route = "me/drive/root:/{path}:"
        response = await self._t.request("GET", url, route=route, idempotent=True)
        return self._t.item(response, DriveItem, "drive item", route)

    async def _open_session(self, path: str) -> UploadSession:
        url = f"{self._t.urls.base}/me/drive/root:/{drive_path(path)}:/createUploadSession"
        route = "me/drive/root:/{path}:/createUploadSession"
        body = {"item": {"@microsoft.graph.conflictBehavior": "replace"}}
        # A session opened twice costs nothing (the unused one expires): safe to retry.
        response = await self._t.request("POST", url, route=route, json=body, idempotent=True)
        session = self._t.item(response, UploadSession, "upload session", route)
        if not session.upload_url:
            raise GraphPayloadError(f"Graph's upload session on {route} has no uploadUrl")
        return session

    async def _session_status(self, upload_url: str) -> list[str]:
        try:
            response = await self._t.send_preauthenticated("GET", upload_url, route=UPLOAD_ROUTE)
        except GraphError as exc:
            raise GraphUnavailable(
                f"the upload session could not be asked what it holds ({exc}); try again"
            ) from None
        if response.status_code == 404:
            raise GraphNotFound(
                "the upload session expired before the file was complete; upload it again",
                status=404,
            )
        if not response.is_success:
            raise error_for(response, "GET", UPLOAD_ROUTE, None, True)
        return UploadSession.model_validate(response.json()).next_expected_ranges

    async def create_link(
        self, drive_id: str, item_id: str, *, link_type: str = "view", scope: str = "organization"
    ) -> Permission:
        """A sharing link ("driveItem: createLink"); asking again for the same type and scope answers
        the existing link, so a retry is harmless."""
        url, route = self._t.urls.url("drives/{}/items/{}/createLink", drive_id, item_id)
        response = await self._t.request(
            "POST", url, route=route, json={"type": link_type, "scope": scope}, idempotent=True
        )
        return self._t.item(response, Permission, "permission", route)


def _first_missing(ranges: list[str], total: int) -> int:
    """The start of the first range Graph still expects ("start-end" or "start-")."""
    if not ranges:
        return total
    head = ranges[0].split("-", 1)[0]
    if not head.isdigit():
        raise GraphPayloadError(f"Graph's nextExpectedRanges {ranges!r} cannot be read")
    return int(head)
