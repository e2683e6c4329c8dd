"""Change notifications from the settings, when ``ENTRABOT_NOTIFICATION_URL`` is set."""

from __future__ import annotations

from service.clock import Clock, utc_now
from service.config import Settings
from service.notifications.options import NotificationOptions
from service.notifications.wiring import Notifications
from service.storage.backend import MemoryBackend
from service.telemetry.metrics import ChangeMetrics


def notification_options(settings: Settings) -> NotificationOptions | None:
    url, lifecycle, state = (
        settings.notification_url,
        settings.lifecycle_url,
        settings.notification_client_state,
    )
    if not url:
        return None
    assert lifecycle is not None and state is not None  # Settings refuses a URL without the secret
    return NotificationOptions(
        url,
        lifecycle,
        state.get_secret_value(),
        settings.notification_max_concurrent,
        settings.channel_subscriptions_max,
    )


def notifications_from_settings(
    settings: Settings, backend: MemoryBackend, metrics: ChangeMetrics, clock: Clock = utc_now
) -> Notifications | None:
    options = notification_options(settings)
    return Notifications(options, backend, metrics, clock) if options is not None else None
