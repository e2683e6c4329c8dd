"""Graph's ``subscription`` resource, as far as the subscription manager reads it.

Read, not run (Microsoft Graph "subscription resource type"): ``id``, ``resource``, ``changeType``,
``expirationDateTime`` (UTC), ``notificationUrl``, ``lifecycleNotificationUrl``; ``clientState`` is
echoed back on create and is not kept here.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field


class GraphSubscription(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str = Field(min_length=1)
    resource: str
    expiration: AwareDatetime = Field(alias="expirationDateTime")

    @property
    def expires_at(self) -> datetime:
        return self.expiration
