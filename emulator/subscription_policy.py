"""The change-notification rules a tenant enforces, as a seed section (``Seed.subscriptions``).

Defaults are Graph's documented values; a seed can loosen or tighten each one (tests shorten the
waits so a timeout or a retry window passes in a fraction of a second).

Read, not run (no tenant here):
- Microsoft Graph "Change notifications overview", subscription lifetime table: Teams chatMessage
  4,320 minutes; Outlook message 10,080 minutes in the current table (older revisions said 4,230).
- Teams change notification pages: "If you request a subscription expirationDateTime that is more
  than 1 hour in the future, you must subscribe to lifecycle notifications by including a
  lifecycleNotificationUrl".
- Outlook message resource: "A maximum of 1,000 active subscriptions per mailbox for all
  applications is allowed". Teams chatMessage: "Per app and channel or chat combination: 1
  subscription; per organization: 10,000 total subscriptions"; the per-user cap on
  /users/{id}/chats/getAllMessages is not published as a number in the pages read, 10 is assumed.
- "Receive change notifications through webhooks": validation echoed as text/plain within 10 s;
  a notification not answered with 2xx within 3 s is retried "for up to 4 hours".
- Latency table: chatMessage average under 10 s, message under 1 minute.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SubscriptionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True  # False: POST /subscriptions answers as for an unsupported resource
    chat_max_minutes: int = Field(default=4320, ge=1)
    chat_without_lifecycle_max_minutes: int = Field(
        default=60, ge=1
    )  # beyond: lifecycleNotificationUrl required
    mail_max_minutes: int = Field(default=10080, ge=1)
    per_user_chat_quota: int = Field(
        default=10, ge=0
    )  # /users/{id}/chats/getAllMessages per user, all apps
    per_app_chat_quota: int = Field(default=1, ge=0)  # /chats/{id}/messages per app and chat
    organization_chat_quota: int = Field(
        default=10000, ge=0
    )  # every chatMessage subscription in the tenant
    mailbox_quota: int = Field(default=1000, ge=0)  # per mailbox, all apps
    validation_timeout_s: float = Field(default=10.0, gt=0)
    notification_timeout_s: float = Field(default=3.0, gt=0)
    latency_ms: int = Field(default=0, ge=0)  # how long a change waits before its batch is posted
    retry_initial_s: float = Field(default=1.0, gt=0)
    retry_max_backoff_s: float = Field(default=300.0, gt=0)
    retry_window_s: float = Field(
        default=4 * 3600.0, gt=0
    )  # after this, a notification counts as failed
    reauthorize_lead_s: int = Field(
        default=600, ge=0
    )  # reauthorizationRequired this long before the token expires
    allow_loopback_http: bool = True  # the emulator only: Graph itself requires https
