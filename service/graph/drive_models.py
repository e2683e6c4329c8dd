"""What Graph returns for files, as typed models: driveItem (with its remoteItem when another person's
file shows in the agent's recent files), the sharing permission createLink answers, an uploadSession.

Validated from Graph's camelCase JSON like ``service.graph.models``; unknown fields ignored."""

from __future__ import annotations

from pydantic import Field

from service.graph.models import GraphModel, UtcDatetime


class IdentityUser(GraphModel):
    id: str | None = None
    display_name: str | None = None
    email: str | None = None


class IdentitySet(GraphModel):
    user: IdentityUser | None = None


class FileFacet(GraphModel):
    mime_type: str | None = None


class ParentReference(GraphModel):
    drive_id: str | None = None
    id: str | None = None
    path: str | None = None


class RemoteItem(GraphModel):
    """Another drive's item, as it shows in the agent's own listings (recent files, shared with me)."""

    id: str
    name: str | None = None
    size: int | None = None
    web_url: str | None = None
    file: FileFacet | None = None
    parent_reference: ParentReference | None = None


class DriveItem(GraphModel):
    id: str
    name: str
    size: int | None = None
    web_url: str | None = None
    e_tag: str | None = Field(default=None, alias="eTag")
    file: FileFacet | None = None
    folder: dict[str, object] | None = None
    parent_reference: ParentReference | None = None
    last_modified_date_time: UtcDatetime | None = None
    last_modified_by: IdentitySet | None = None
    created_by: IdentitySet | None = None
    remote_item: RemoteItem | None = None

    @property
    def drive_id(self) -> str | None:
        """The drive the item lives in: the remote item's for another person's file."""
        if self.remote_item is not None and self.remote_item.parent_reference is not None:
            return self.remote_item.parent_reference.drive_id
        return self.parent_reference.drive_id if self.parent_reference else None

    @property
    def item_id(self) -> str:
        """The id in its own drive (the remote item's for another person's file)."""
        return self.remote_item.id if self.remote_item is not None else self.id

    @property
    def mime_type(self) -> str | None:
        facet = self.file or (self.remote_item.file if self.remote_item else None)
        return facet.mime_type if facet else None

    @property
    def etag_guid(self) -> str | None:
        """The GUID of a SharePoint eTag ``"{GUID},N"``: the id a chat's file attachment carries."""
        if not self.e_tag:
            return None
        head = self.e_tag.strip('"').split(",", 1)[0].strip("{}")
        return head.lower() or None


class Drive(GraphModel):
    id: str
    drive_type: str | None = None
    web_url: str | None = None


class SharingLink(GraphModel):
    type: str
    scope: str | None = None
    web_url: str


class Permission(GraphModel):
    id: str
    roles: list[str] = Field(default_factory=list)
    link: SharingLink | None = None


class UploadSession(GraphModel):
    upload_url: str | None = None
    expiration_date_time: UtcDatetime | None = None
    next_expected_ranges: list[str] = Field(default_factory=list)
