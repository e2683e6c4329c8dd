"""The limits a tenant's drives enforce, as a seed section (``Seed.drives``).

Defaults are Graph's documented values; a seed may lower them (a test uploads a few hundred KiB through
an upload session instead of 250 MB). Read, not run (no tenant here):
- "Upload small files" (driveItem: put content, v1.0): "This method only supports files up to 250 MB in
  size" (the page said 4 MB until it changed; the OneDrive REST copy of it still says 4 MB).
- "driveItem: createUploadSession": fragments must be a multiple of 320 KiB (327,680 bytes) except the
  last, each under 60 MiB; "Including the Authorization header when issuing the PUT call might result in an
  HTTP 401 Unauthorized response"; a session expires (uploadSession.expirationDateTime), and "each fragment
  uploaded during the session extends the expiration time". The lifetime itself is not published: one
  hour is assumed.
- "Download driveItem content": a 302 to a pre-authenticated URL that is "only valid for a short period of
  time (a few minutes)" and needs no Authorization header; five minutes is assumed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

KIB = 1024
MIB = 1024 * KIB
FRAGMENT_UNIT = 320 * KIB


class DriveLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    simple_upload_max_bytes: int = Field(default=250 * 1000 * 1000, ge=1)
    fragment_max_bytes: int = Field(default=60 * MIB, ge=FRAGMENT_UNIT)
    fragment_unit_bytes: int = Field(default=FRAGMENT_UNIT, ge=1)
    upload_session_lifetime_s: int = Field(default=3600, ge=1)
    download_url_lifetime_s: int = Field(default=300, ge=1)
