"""Every user's OneDrive: files, sharing links and grants, pre-authenticated downloads, upload sessions.

Apart from ``TenantState`` (chats and mail) so the drive routes own their state; one lock as there, short
critical sections that never await, immutable items handed out. Shapes follow the driveItem, permission
and uploadSession pages of Graph v1.0 (read, not run): OneDrive for work or school ids (``b!…`` drives,
``01…`` items), ``"{GUID},N"`` eTags, webUrls on ``<tenant>-my.sharepoint.com``.

Who may see an item: its owner; a user it was shared with by ``invite``; anyone of the tenant holding an
``organization`` link's URL; the named people of a ``users`` link. A delegated token with only
``Files.Read``/``Files.ReadWrite`` reaches the signed-in user's own drive; another's file needs a ``.All``
scope (the permissions reference: Files.Read.All reads "all files the signed-in user can access").
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
import re
import secrets
import threading
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

from emulator.clock import Clock
from emulator.drive_policy import DriveLimits
from emulator.errors import GraphError
from emulator.seed import Seed, SeedUser
from emulator.timestamps import truncate_ms

LinkType = Literal["view", "edit"]
LinkScope = Literal["organization", "users"]
Role = Literal["read", "write"]


def item_not_found(what: str = "The resource could not be found.") -> GraphError:
    return GraphError(404, "itemNotFound", what)


def access_denied(what: str) -> GraphError:
    return GraphError(403, "accessDenied", what)


def invalid_request(what: str) -> GraphError:
    return GraphError(400, "invalidRequest", what)


@dataclass(frozen=True)
class DriveItem:
    id: str
    drive_id: str
    owner_id: str
    name: str
    parent_id: str | None  # None: the drive's root
    folder: bool
    data: bytes = field(repr=False)
    mime_type: str | None
    created: datetime
    modified: datetime
    created_by: str
    modified_by: str
    guid: str  # the GUID of the eTag "{GUID},N", and of a chat's reference attachment id
    version: int = 1
    path: str = ""  # the path under the root, "" for the root itself

    @property
    def etag(self) -> str:
        return f'"{{{self.guid.upper()}}},{self.version}"'

    @property
    def ctag(self) -> str:
        return f'"c:{{{self.guid.upper()}}},{self.version}"'


@dataclass(frozen=True)
class SharingLink:
    id: str
    item_id: str
    type: LinkType
    scope: LinkScope
    url: str
    created_by: str
    recipients: tuple[str, ...] = ()  # user ids, for a "users" link


@dataclass(frozen=True)
class Grant:
    id: str
    item_id: str
    user_id: str
    roles: tuple[Role, ...]
    invited_by: str


@dataclass
class UploadSession:
    id: str
    owner_id: str
    parent_id: str
    name: str
    expires: datetime
    total: int | None = None
    buffer: bytearray = field(default_factory=bytearray, repr=False)
    received: list[tuple[int, int]] = field(default_factory=list)  # [start, end) merged, sorted

    def missing(self) -> list[str]:
        """nextExpectedRanges: "start-end" (inclusive) for each gap, "start-" when the size is unknown."""
        if self.total is None:
            return ["0-"]
        ranges, at = [], 0
        for start, end in self.received:
            if start > at:
                ranges.append(f"{at}-{start - 1}")
            at = max(at, end)
        if at < self.total:
            ranges.append(f"{at}-{self.total - 1}")
        return ranges


@dataclass(frozen=True)
class Drive:
    id: str
    owner: SeedUser
    root_id: str


class Drives:
    def __init__(self, seed: Seed, clock: Clock, limits: DriveLimits) -> None:
        self.seed = seed
        self.limits = limits
        self._clock = clock
        self._lock = threading.RLock()
        self._drives: dict[str, Drive] = {}  # by owner id
        self._items: dict[str, DriveItem] = {}
        self._links: dict[str, SharingLink] = {}  # by URL
        self._grants: dict[str, list[Grant]] = {}  # by item id
        self._recent: dict[str, dict[str, datetime]] = {}  # user id -> item id -> last use
        self._downloads: dict[str, tuple[str, datetime]] = {}  # token -> (item id, expiry)
        self._sessions: dict[str, UploadSession] = {}
        prefix = seed.tenant_domain.split(".", 1)[0].lower()
        self.sharepoint_host = f"{prefix}.sharepoint.com"
        self.my_host = f"{prefix}-my.sharepoint.com"

    # --- drives and items ---

    def drive_of(self, user_id: str) -> Drive:
        user = self.seed.find_user(user_id)
        if user is None:
            raise item_not_found(f"User '{user_id}' has no drive in this tenant.")
        with self._lock:
            drive = self._drives.get(user.id)
            if drive is None:
                drive_id = "b!" + _b64(hashlib.sha256(f"drive/{user.id}".encode()).digest())
                now = truncate_ms(self._clock.now())
                root = DriveItem(
                    _item_id(),
                    drive_id,
                    user.id,
                    "root",
                    None,
                    True,
                    b"",
                    None,
                    now,
                    now,
                    user.id,
                    user.id,
                    str(uuid.uuid4()),
                )
                self._items[root.id] = root
                drive = Drive(drive_id, user, root.id)
                self._drives[user.id] = drive
            return drive

    def drive_by_id(self, drive_id: str) -> Drive:
        with self._lock:
            drive = next((d for d in self._drives.values() if d.id == drive_id), None)
        if drive is None:
            raise item_not_found(f"Drive '{drive_id}' was not found.")
        return drive

    def item(self, item_id: str, drive_id: str | None = None) -> DriveItem:
        with self._lock:
            item = self._items.get(item_id)
        if item is None or (drive_id is not None and item.drive_id != drive_id):
            raise item_not_found(f"Item '{item_id}' was not found.")
        return item

    def children(self, parent_id: str) -> list[DriveItem]:
        with self._lock:
            return sorted(
                (i for i in self._items.values() if i.parent_id == parent_id),
                key=lambda i: i.name.lower(),
            )

    def child_named(self, parent_id: str, name: str) -> DriveItem | None:
        with self._lock:
            return next(
                (
                    i
                    for i in self._items.values()
                    if i.parent_id == parent_id and i.name.lower() == name.lower()
                ),
                None,
            )

    def folder_at(self, owner_id: str, path: str) -> DriveItem:
        """The folder ``path`` ("a/b") under the owner's root, made as needed (Graph creates the
        missing folders of an upload path)."""
        drive = self.drive_of(owner_id)
        folder = self.item(drive.root_id)
        for part in [p for p in path.split("/") if p]:
            check_name(part)
            with self._lock:
                found = self.child_named(folder.id, part)
                if found is None:
                    found = self._store(owner_id, folder, part, b"", None, folder=True)
            if not found.folder:
                raise GraphError(409, "nameAlreadyExists", f"'{part}' is a file, not a folder.")
            folder = found
        return folder

    def put_file(
        self,
        owner_id: str,
        parent_id: str,
        name: str,
        data: bytes,
        *,
        by: str,
        conflict: Literal["replace", "fail", "rename"] = "replace",
    ) -> tuple[DriveItem, bool]:
        """Create or replace file ``name`` in folder ``parent_id``; returns it and whether it is new."""
        check_name(name)
        with self._lock:
            parent = self.item(parent_id)
            if not parent.folder:
                raise invalid_request(f"Item '{parent_id}' is a file; upload into a folder.")
            existing = self.child_named(parent.id, name)
            if existing is not None and conflict == "fail":
                raise GraphError(
                    409, "nameAlreadyExists", f"An item named '{name}' already exists here."
                )
            if existing is not None and conflict == "rename":
                stem, dot, ext = name.rpartition(".")
                n = 1
                while self.child_named(parent.id, name) is not None:
                    n += 1
                    name = f"{stem} {n}.{ext}" if dot else f"{ext} {n}"
                existing = None
            if existing is not None:
                if existing.folder:
                    raise GraphError(409, "nameAlreadyExists", f"'{name}' is a folder.")
                now = self._later_than(existing.modified)
                updated = replace(
                    existing, data=data, modified=now, modified_by=by, version=existing.version + 1
                )
                self._items[updated.id] = updated
                self.touch(by, updated.id)
                return updated, False
            item = self._store(owner_id, parent, name, data, _mime(name), folder=False, by=by)
            self.touch(by, item.id)
            return item, True

    def _store(
        self,
        owner_id: str,
        parent: DriveItem,
        name: str,
        data: bytes,
        mime: str | None,
        *,
        folder: bool,
        by: str | None = None,
    ) -> DriveItem:
        now = truncate_ms(self._clock.now())
        item = DriveItem(
            _item_id(),
            parent.drive_id,
            owner_id,
            name,
            parent.id,
            folder,
            data,
            mime,
            now,
            now,
            by or owner_id,
            by or owner_id,
            str(uuid.uuid4()),
            path=f"{parent.path}/{name}".lstrip("/"),
        )
        self._items[item.id] = item
        return item

    def _later_than(self, at: datetime) -> datetime:
        now = truncate_ms(self._clock.now())
        return now if now > at else at + timedelta(milliseconds=1)

    # --- who may see what ---

    def may_read(self, user_id: str, item: DriveItem) -> bool:
        return self.role_of(user_id, item) is not None

    def role_of(self, user_id: str, item: DriveItem) -> Role | None:
        if item.owner_id == user_id:
            return "write"
        with self._lock:
            roles: set[str] = set()
            for ancestor in self._lineage(item):
                for grant in self._grants.get(ancestor.id, ()):
                    if grant.user_id == user_id:
                        roles.update(grant.roles)
        return "write" if "write" in roles else ("read" if roles else None)

    def _lineage(self, item: DriveItem) -> list[DriveItem]:
        chain = [item]
        while chain[-1].parent_id is not None:
            chain.append(self._items[chain[-1].parent_id])
        return chain

    def touch(self, user_id: str, item_id: str) -> None:
        with self._lock:
            self._recent.setdefault(user_id, {})[item_id] = self._clock.now()

    def recent(self, user_id: str) -> list[DriveItem]:
        with self._lock:
            used = self._recent.get(user_id, {})
            items = [self._items[i] for i in used if i in self._items]
        files = [
            i
            for i in items
            if not i.folder and (self.may_read(user_id, i) or self.reachable_by_link(user_id, i))
        ]
        return sorted(files, key=lambda i: used[i.id], reverse=True)

    # --- sharing ---

    def web_url(self, item: DriveItem) -> str:
        drive = self.drive_of(item.owner_id)
        base = f"https://{self.my_host}/personal/{_personal(drive.owner)}/Documents"
        return base + ("/" + quote(item.path) if item.path else "")

    def create_link(
        self, item: DriveItem, by: str, link_type: LinkType, scope: LinkScope
    ) -> tuple[SharingLink, bool]:
        """A sharing link; the same type and scope asked again answers the existing one (and False)."""
        with self._lock:
            for link in self._links.values():
                if (
                    link.item_id == item.id
                    and link.type == link_type
                    and link.scope == scope
                    and not link.recipients
                ):
                    return link, False
            owner = self.drive_of(item.owner_id).owner
            kind = "f" if item.folder else _url_kind(item.name)
            url = f"https://{self.my_host}/:{kind}:/g/personal/{_personal(owner)}/" + _b64(
                secrets.token_bytes(33)
            )
            link = SharingLink(_b64(secrets.token_bytes(12)), item.id, link_type, scope, url, by)
            self._links[url] = link
            return link, True

    def invite(
        self, item: DriveItem, by: str, user_ids: list[str], roles: tuple[Role, ...]
    ) -> list[Grant]:
        with self._lock:
            made = []
            for user_id in user_ids:
                grant = Grant(_b64(secrets.token_bytes(12)), item.id, user_id, roles, by)
                kept = [g for g in self._grants.get(item.id, []) if g.user_id != user_id]
                self._grants[item.id] = [*kept, grant]
                made.append(grant)
            return made

    def resolve_url(self, url: str, user_id: str) -> DriveItem:
        """The item a sharing URL (or an item's webUrl) names, for ``user_id``; redeeming an
        organization link records the file among the user's recent ones."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme != "https" or host not in (self.my_host, self.sharepoint_host):
            raise item_not_found(
                "The sharing link is not a OneDrive or SharePoint URL of this tenant."
            )
        bare = f"https://{host}{parts.path}"
        with self._lock:
            link = self._links.get(bare)
            if link is not None:
                item = self._items[link.item_id]
                allowed = (
                    link.scope == "organization"
                    or user_id in link.recipients
                    or self.may_read(user_id, item)
                )
                if not allowed:
                    raise access_denied("The sharing link does not grant the caller access.")
                self.touch(user_id, item.id)
                return item
            named = next(
                (
                    i
                    for i in self._items.values()
                    if unquote(self.web_url(i)).lower() == unquote(bare).lower()
                ),
                None,
            )
        if named is None:
            raise item_not_found("The sharing link or item URL could not be found.")
        if not self.may_read(user_id, named):
            raise access_denied("The caller has no access to this item; ask its owner to share it.")
        return named

    def reachable_by_link(self, user_id: str, item: DriveItem) -> bool:
        """Whether an organization link (or a users link naming ``user_id``) covers the item."""
        with self._lock:
            return any(
                link.item_id == item.id
                and (link.scope == "organization" or user_id in link.recipients)
                for link in self._links.values()
            )

    def links_of(self, item_id: str) -> list[SharingLink]:
        with self._lock:
            return [link for link in self._links.values() if link.item_id == item_id]

    # --- downloads ---

    def download_token(self, item: DriveItem) -> str:
        token = _b64(secrets.token_bytes(24))
        expires = self._clock.now() + timedelta(seconds=self.limits.download_url_lifetime_s)
        with self._lock:
            self._downloads[token] = (item.id, expires)
        return token

    def take_download(self, token: str) -> DriveItem:
        with self._lock:
            found = self._downloads.get(token)
        if found is None or found[1] <= self._clock.now():
            raise GraphError(
                401, "unauthenticated", "The download URL is not valid or has expired."
            )
        return self.item(found[0])

    # --- upload sessions ---

    def open_session(self, owner_id: str, parent_id: str, name: str) -> UploadSession:
        check_name(name)
        session = UploadSession(
            _b64(secrets.token_bytes(24)),
            owner_id,
            parent_id,
            name,
            self._clock.now() + timedelta(seconds=self.limits.upload_session_lifetime_s),
        )
        with self._lock:
            self._sessions[session.id] = session
        return session

    def session(self, session_id: str) -> UploadSession:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.expires <= self._clock.now():
                del self._sessions[session_id]
                session = None
        if session is None:
            raise item_not_found("The upload session was not found; it expired or was completed.")
        return session

    def cancel_session(self, session_id: str) -> None:
        with self._lock:
            self.session(session_id)
            del self._sessions[session_id]

    def put_fragment(
        self, session_id: str, start: int, end: int, total: int, data: bytes
    ) -> UploadSession | tuple[DriveItem, bool]:
        """Bytes [start, end] (inclusive) of ``total``: the session while bytes are missing, the item
        (and whether it is new) once the last one arrived."""
        limits = self.limits
        size = end - start + 1
        if size > limits.fragment_max_bytes:
            raise invalid_request(
                f"The fragment is {size} bytes; each must be under "
                f"{limits.fragment_max_bytes} bytes (60 MiB)."
            )
        with self._lock:
            session = self.session(session_id)
            if session.total is None:
                session.total = total
                session.buffer = bytearray(total)
            if total != session.total:
                raise invalid_request(
                    f"The Content-Range total {total} differs from the session's {session.total}."
                )
            if end + 1 < total and size % limits.fragment_unit_bytes:
                raise invalid_request(
                    f"The fragment is {size} bytes; every fragment but the last must be a multiple "
                    f"of {limits.fragment_unit_bytes} bytes (320 KiB)."
                )
            if any(start < e and s <= end for s, e in session.received):
                raise GraphError(
                    416,
                    "invalidRange",
                    f"Bytes {start}-{end} overlap bytes already received; upload "
                    f"{', '.join(session.missing())} (nextExpectedRanges).",
                )
            session.buffer[start : end + 1] = data
            session.received = _merged([*session.received, (start, end + 1)])
            session.expires = self._clock.now() + timedelta(
                seconds=limits.upload_session_lifetime_s
            )
            if session.missing():
                return session
            del self._sessions[session.id]
            return self.put_file(
                session.owner_id,
                session.parent_id,
                session.name,
                bytes(session.buffer),
                by=session.owner_id,
            )


def check_name(name: str) -> None:
    """OneDrive for work or school refuses these characters in a name, and names that are only dots."""
    if not name or name.strip(". ") == "" or _BAD_NAME.search(name) or len(name) > 400:
        raise invalid_request(
            f"The name '{name}' is not valid: names cannot contain \" * : < > ? / \\ | or be empty."
        )


_BAD_NAME = re.compile(r'["*:<>?/\\|]')


def encode_sharing_url(url: str) -> str:
    """Graph's shareId for a sharing URL: "u!" + unpadded base64url of the URL ("Access shared items")."""
    return "u!" + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def decode_sharing_id(share_id: str) -> str:
    if not share_id.startswith("u!"):
        raise invalid_request(
            "The share id must be a sharing URL encoded as 'u!' + unpadded base64url."
        )
    raw = share_id[2:]
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise invalid_request("The encoded sharing URL is not valid base64url.") from None


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _item_id() -> str:
    return "01" + base64.b32encode(secrets.token_bytes(20)).decode()[:32]


def _personal(user: SeedUser) -> str:
    return re.sub(r"[.@]", "_", user.user_principal_name.lower())


def _mime(name: str) -> str:
    guessed, _ = mimetypes.guess_type(name)
    if name.lower().endswith(".md"):
        return "text/markdown"
    return guessed or "application/octet-stream"


def _url_kind(name: str) -> str:
    ext = name.rsplit(".", 1)[-1].lower()
    return {"docx": "w", "xlsx": "x", "pptx": "p", "txt": "t"}.get(ext, "u")
