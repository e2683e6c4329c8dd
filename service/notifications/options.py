"""What the change notifications take from the settings (built by service.from_settings)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NotificationOptions:
    url: str  # ENTRABOT_NOTIFICATION_URL: where Graph delivers the change notifications (https)
    # ENTRABOT_NOTIFICATION_LIFECYCLE_URL, else the notification URL: where reauthorizationRequired,
    # subscriptionRemoved and missed go.
    lifecycle_url: str
    # ENTRABOT_NOTIFICATION_CLIENT_STATE: the secret Graph echoes in every notification's clientState;
    # a notification without it is dropped by the receiver. Kept out of the repr.
    client_state: str = field(repr=False)
    max_concurrent: (
        int  # ENTRABOT_NOTIFICATION_MAX_CONCURRENT: requests the receiver serves at once
    )
    # ENTRABOT_CHANNEL_SUBSCRIPTIONS_MAX: watched channels that get a subscription of their own.
    channel_subscriptions_max: int = 200
