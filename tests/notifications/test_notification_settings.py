"""The change-notification settings: a notification URL without its clientState secret, or a secret
longer than Graph takes, stops ``serve`` with one line naming the setting; the lifecycle URL
defaults to the notification URL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from service.config import Settings
from service.from_settings.notifications import notification_options
from service.notifications.options import NotificationOptions

URL = "https://agent.example.com/graph/notifications"


def run_serve(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    env.update(ENTRABOT_KEEP_MEMORY_LOCAL="true", ENTRABOT_DATA_DIR=str(tmp_path / "d"), **extra)
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("state", [None, "", "x" * 129])
def test_a_notification_url_without_a_fitting_client_state_is_refused_with_one_line(
    tmp_path: Path, state: str | None
) -> None:
    extra = {"ENTRABOT_NOTIFICATION_URL": URL}
    if state is not None:
        extra["ENTRABOT_NOTIFICATION_CLIENT_STATE"] = state
    result = run_serve(tmp_path, **extra)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.count("ENTRABOT_NOTIFICATION_CLIENT_STATE") == 1 and "128" in last
    assert "x" * 20 not in result.stderr  # the secret is never echoed
    assert "listening on" not in result.stdout


def test_the_lifecycle_url_defaults_to_the_notification_url() -> None:
    state = SecretStr("s" * 128)
    assert Settings(notification_url=URL, notification_client_state=state).lifecycle_url == URL
    other = "https://agent.example.com/graph/lifecycle"
    assert (
        Settings(
            notification_url=URL, notification_client_state=state, notification_lifecycle_url=other
        ).lifecycle_url
        == other
    )
    assert Settings().lifecycle_url is None


def test_a_webhook_concurrency_bound_below_one_is_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    result = run_serve(tmp_path, ENTRABOT_NOTIFICATION_MAX_CONCURRENT="0")
    assert result.returncode != 0
    assert "ENTRABOT_NOTIFICATION_MAX_CONCURRENT" in result.stderr.strip().splitlines()[-1]


def test_a_sponsor_list_that_would_expire_between_refreshes_is_refused_naming_both_settings(
    tmp_path: Path,
) -> None:
    result = run_serve(
        tmp_path, ENTRABOT_SPONSOR_REFRESH_INTERVAL_S="120", ENTRABOT_SPONSOR_STALE_AFTER_S="60"
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert (
        "ENTRABOT_SPONSOR_STALE_AFTER_S" in last and "ENTRABOT_SPONSOR_REFRESH_INTERVAL_S" in last
    )


def test_the_options_carry_what_the_settings_say_and_none_without_a_url() -> None:
    settings = Settings(
        notification_url=URL,
        notification_client_state=SecretStr("s3cr3t"),
        notification_max_concurrent=7,
    )
    options = notification_options(settings)
    assert options == NotificationOptions(URL, URL, "s3cr3t", max_concurrent=7)
    assert "s3cr3t" not in repr(options)  # the secret stays out of logs
    assert notification_options(Settings()) is None
