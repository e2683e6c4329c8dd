"""Settings from the environment (ENTRABOT_* names) and an optional ``.env`` file.

One immutable object built at start-up and handed down: storage resolution, the wiring and the CLI
all take a ``Settings``, so a value set only in ``.env`` reaches every one of them.

Who reads the environment, by program (tests/service/test_settings_path.py checks every module of
``service/`` for ``os.environ``, ``os.getenv``, imports of either from ``os``, pydantic-settings and
python-dotenv, against this list):

* The replica (``entrabot-fleet serve`` and the commands beside it): this module only. ``Settings``
  reads the ENTRABOT_* names and ``.env``; ``default_replica_id`` reads the pod name Kubernetes puts
  in ``HOSTNAME``. Any other replica module takes what it needs from ``Settings``; a new setting is a
  field here, never a read elsewhere, so nothing ignores a value set in ``.env``. The one exception,
  ``service/replica.py``, reads the test-only crash point ENTRABOT_TEST_KILL_AT
  (``service.delivery.fault_points``): never a setting, so no .env file or chart value can turn it on.
* The local tooling (``service/devstack``: the demo, the fleet harness, Azurite):
  ``service/devstack/dev_environment.py`` only. Its own ENTRABOT_AZURITE_* settings come from the
  environment and ``.env`` like these; the replicas it launches get an environment without this
  process's ENTRABOT_* names, plus the settings it gives them, and run where no ``.env`` is.
* The channel bridge (``entrabot-fleet channel``), a separate program a host starts over stdio: its
  entry point ``service/bridge/cli_options.py`` hands its environment, once, as a mapping to
  ``service/bridge/config.py`` (the ENTRABOT_BRIDGE_* names, set by the host's MCP configuration; it
  reads no ``.env``, and ``Settings`` ignores those names).

Libraries read their own variables, outside this rule and out of ``.env``'s reach: azure-identity's
``DefaultAzureCredential`` (AZURE_CLIENT_ID, AZURE_FEDERATED_TOKEN_FILE, ...) for Blob storage on
AKS, httpx's proxy and CA-bundle variables.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.domain.reaction_type import check_reaction_type

DEFAULT_AUTHORITY = "https://login.microsoftonline.com"
DEFAULT_GRAPH_URL = "https://graph.microsoft.com/v1.0"
MAX_CLIENT_STATE_CHARS = (
    128  # Graph: subscription resource type, clientState "maximum length is 128 characters"
)


class Settings(BaseSettings):
    # hide_input_in_errors: a refused value may be a secret (a sealing key, a client state), and
    # `doctor` prints the validation error.
    model_config = SettingsConfigDict(
        env_prefix="ENTRABOT_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        hide_input_in_errors=True,
    )

    # --- storage (SPEC §3) ---
    data_dir: Path = Field(default_factory=lambda: Path.home() / ".entrabot" / "data")
    keep_memory_local: bool = False
    blob_endpoint: str | None = None
    blob_container: str | None = None
    # Azurite and dev only; in AKS the workload identity (DefaultAzureCredential) is used.
    blob_connection_string: SecretStr | None = None
    blob_auth: Literal["auto", "connection_string", "default_credential", "agent_user"] = "auto"

    # --- identity and Graph (SPEC §6) ---
    auth_mode: Literal["agent_user", "delegated"] = "agent_user"
    authority: str = DEFAULT_AUTHORITY
    graph_url: str = DEFAULT_GRAPH_URL
    tenant_id: str | None = None
    blueprint_client_id: str | None = None
    blueprint_client_secret: SecretStr | None = None
    blueprint_certificate_path: Path | None = None
    # The certificate's RSA key, when it is not in the same PEM as the certificate.
    blueprint_certificate_key_path: Path | None = None
    # Workload identity: AKS mounts the projected token here (AZURE_FEDERATED_TOKEN_FILE).
    blueprint_federated_token_file: Path | None = None
    agent_identity_id: str | None = None
    agent_user_id: str | None = None
    agent_user_upn: str | None = None
    # Delegated mode (tenants without Entra Agent ID): the public client app registration a person signs
    # in to with `entrabot-fleet signin`, and the key that seals their tokens in the container
    # (service/signin/sealing.py; 32 random bytes in base64).
    delegated_client_id: str | None = None
    delegated_token_key: SecretStr | None = None
    graph_timeout_s: float = 30.0

    # --- loops (SPEC §5) ---
    # Each cycle takes the fleet's change hints (two small blob reads) and reads only the chats they
    # name (SPEC §9), so it is cheap to run often.
    chat_poll_interval_s: float = 0.5
    chat_poll_jitter_s: float = 0.1
    # The elected scanner's ordered /me/chats scan: usually one request per scan, for the whole fleet.
    # Quiet tenant (no new message found for 30 s): within the idle budget with discovery and the sweep.
    chat_scan_interval_s: float = 3.0
    # For 30 s after a scan found a new message: the replies of a conversation are found sooner.
    chat_scan_active_interval_s: float = 1.0
    # While the chat subscription is live and notifications arrive; a notification Graph drops (it
    # sends no "missed" for Teams) waits at most this long for the scan.
    chat_scan_relaxed_interval_s: float = 10.0
    # The safety sweep reads one page of 50 chats' previews per interval (a rotation over 1,000 chats
    # takes 20 intervals) and hints the chats whose cursor is behind.
    chat_sweep_interval_s: float = 20.0
    # Replicas taking the same hint reach the chat one turn after the other (an order per chat and
    # hinted message, from the readers/roster.json roster), this far apart, so the first one's claim spares the others a Graph read:
    # longer than a hint poll (0.5 s) plus a read and a claim, and than Graph's one read a second per chat.
    chat_read_spread_s: float = Field(default=1.6, ge=0.0, le=5.0)
    # Graph allows one request a second per chat for the whole app (SPEC §9): a replica reads one chat
    # at most this often, a new hint right after a read waits for it.
    chat_read_gap_s: float = Field(default=1.1, ge=0.0, le=10.0)
    chat_poll_concurrency: int = 8
    discovery_interval_s: float = 120.0
    # Team channels (service.workers.channel_watch): the elected watch walks the agent's teams and
    # their channels this often, and hints this many watched channels a second in turn (each hint one
    # delta read for the fleet): 200 channels come round every 200 s at 1 a second.
    channel_discovery_interval_s: float = Field(default=120.0, gt=0.0)
    channel_reads_per_s: float = Field(default=1.0, gt=0.0, le=20.0)
    # Channel ids (comma-separated) where every person's message is delivered; elsewhere only a message
    # that @mentions the agent and replies in a thread it started or answered (docs/configuration.md).
    channels_deliver_all: str = ""
    # The fleet re-reads the agent identity's sponsors this often (one replica reads Graph, the others
    # take its list from the shared record): a removed sponsor stops counting
    # (messages enveloped, no wait answered, no verdict taken) within one interval, fleet-wide.
    sponsor_refresh_interval_s: float = Field(default=120.0, gt=0.0)
    # While the sponsor list is unreadable, the last one read is kept this long after it was read, then
    # dropped: no sponsor at all (fail closed) until a read succeeds again.
    sponsor_stale_after_s: float = Field(default=600.0, gt=0.0)
    email_poll_interval_s: float = 60.0
    # A chat's newest message when the fleet first watches it is delivered only if younger than this
    # (a person's fresh message to the agent, not history).
    first_sight_max_age_h: float = 24.0
    # No chat message older than this when a replica reads it for a host is delivered: what waited in
    # Graph for the first host (or a host away for days) is not acted on days late. create_chat's
    # newest is the one exception (the agent asked for that chat).
    chat_max_age_h: float = Field(default=24.0, gt=0.0)

    # --- service (SPEC §7) ---
    host: str = "127.0.0.1"
    # Validated here: uvicorn would take 99999 modulo 65536 and listen on a port nobody asked for.
    port: int = Field(default=8080, ge=1, le=65535)
    replica_id: str | None = None
    mcp_static_tokens: SecretStr | None = None  # comma-separated bearer tokens for local runs
    # The host each static token speaks for, by position, and each Entra principal's (``<object
    # id>=<name>``): a host's delivery record is its own (service.mcp.host_identity, docs/hosts.md).
    mcp_token_hosts: str = ""
    mcp_principal_hosts: str = ""
    mcp_jwt_audience: str | None = None
    # Authorization for Entra tokens (docs/entra-app-registration.md), comma-separated. A token must
    # carry one of these app roles (``roles``) or delegated scopes (``scp``), and, when the allow-list
    # is set, come from one of these client app ids (``azp``/``appid``).
    mcp_jwt_required_roles: str | None = None
    mcp_jwt_required_scopes: str | None = None
    mcp_jwt_allowed_client_ids: str | None = None
    mcp_allowed_hosts: str = "localhost,127.0.0.1"
    mcp_allowed_origins: str = ""
    mcp_session_idle_timeout_s: float = 1800.0
    # Where hosts reach this service (e.g. https://agent.example.com), for the OAuth resource
    # metadata; taken from each request's scheme and Host when unset.
    mcp_public_base_url: str | None = None
    # clientInfo names that take channel pushes. Fail closed: only the channel bridge run with --push
    # (service.mcp.hosts.BRIDGE_PUSH_CLIENT_NAME); Claude Code straight over HTTP gets the tools.
    push_hosts: str = "claude-code-channel-bridge"
    sponsor_wait_timeout_s: float = 600.0
    # send_teams_message with wait_for_reply omitted waits this long at most on a non-push host: within
    # the 60 s request timeout most MCP clients default to, so a posted message is never reported failed.
    send_reply_wait_s: float = Field(default=45.0, gt=0.0)
    # How much backlog (sponsor messages written before a wait began) one wait's result carries; what
    # does not fit stays unclaimed for the next wait. At least one item of the longest a result
    # carries (service.tools.message_items.MAX_ITEM_CHARS, 16,000 characters).
    # Acknowledged delivery (docs/delivery.md): a push an acknowledging host has not acknowledged this
    # long after it is pushed once more (once); what a host is owed while no replica has seen it for
    # this long moves to another live host of the agent (the delivery sweep, one replica, every
    # interval). Moving trades a duplicate for a loss: the first host may have shown it before it died.
    delivery_redeliver_after_s: float = Field(default=15.0, ge=1.0, le=3600.0)
    delivery_move_after_s: float = Field(default=600.0, ge=5.0, le=7 * 86400.0)
    delivery_sweep_interval_s: float = Field(default=60.0, ge=1.0, le=3600.0)
    # The reaction the agent user sets on a Teams chat message once its host acknowledged it, so the person
    # sees it arrived (a Graph reactionType: one emoji, or like, heart, …); unset or empty: none.
    delivery_ack_reaction: str | None = None
    # The delivery_sweep role's lease: a replica that dies holding it is replaced after this long (its
    # margin is a tenth of it). It acts on a bound of minutes, so a long lease keeps its cost low.
    delivery_sweep_lease_ttl_s: float = Field(default=300.0, ge=5.0, le=3600.0)
    # How often a replica re-reads the record of each host it serves: what the sweep moved to the host,
    # or another replica claimed for it, reaches it within this. At most 60 s (host_keeper.REFRESH_S):
    # a hold is renewed at a refresh, and held for HOLD_STALE_S on that rhythm.
    delivery_refresh_s: float = Field(default=60.0, ge=1.0, le=60.0)
    # The inbox of hosts without pushes (receive_messages, docs/hosts.md): a host that called it within
    # the retention window is a delivery target on every replica; a call waits at most max_wait_s,
    # under the 60 s tool timeout of Codex and Copilot CLI.
    inbox_retention_s: float = Field(default=3600.0, ge=60.0, le=7 * 86400.0)
    inbox_max_wait_s: float = Field(default=50.0, ge=0.0, le=300.0)
    sponsor_wait_backlog_items: int = Field(default=10, ge=1, le=100)
    sponsor_wait_backlog_chars: int = Field(default=24_000, ge=16_000, le=200_000)
    # Tool-use approvals asked of the sponsor in Teams for hosts behind the channel bridge; a verdict
    # after this long decides nothing.
    permission_relay_enabled: bool = True
    permission_request_timeout_s: float = 600.0
    # The file tools (docs/tools.md): read_file fetches at most file_read_max_bytes of a file and returns
    # at most file_read_max_chars of its text; upload_file takes at most file_upload_max_bytes (base64 in
    # the call); an upload above file_simple_upload_max_bytes goes through an upload session (Graph's
    # simple upload takes up to 250 MB, a resumable session is kinder to a large file on a flaky link).
    file_read_max_bytes: int = Field(default=2 * 1024 * 1024, ge=1024, le=100 * 1024 * 1024)
    file_read_max_chars: int = Field(default=100_000, ge=1_000, le=2_000_000)
    file_upload_max_bytes: int = Field(default=20 * 1024 * 1024, ge=1024, le=250 * 1024 * 1024)
    file_simple_upload_max_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, le=250 * 1000 * 1000
    )
    otlp_endpoint: str | None = None
    # Where Graph change notifications are delivered (https); optional, checked by `doctor` when set.
    notification_url: str | None = None
    # The secret Graph echoes in every notification's clientState (Graph allows 128 characters);
    # required with notification_url: a notification without it is dropped by the receiver.
    notification_client_state: SecretStr | None = Field(default=None, validate_default=True)
    # Where lifecycle notifications go (reauthorizationRequired, subscriptionRemoved, missed);
    # the notification URL when unset.
    notification_lifecycle_url: str | None = None
    # Webhook requests handled at once by one replica; more are answered 503 with Retry-After (Graph
    # retries), so an unauthenticated caller cannot pile up open requests.
    notification_max_concurrent: int = Field(default=32, ge=1, le=1000)
    # One subscription per watched team channel, for at most this many channels (the rest are found
    # by the channel watch's rotation alone); 0 subscribes to no channel.
    channel_subscriptions_max: int = Field(default=200, ge=0, le=10_000)
    log_level: str = "INFO"

    @field_validator(
        "data_dir",
        "keep_memory_local",
        "blob_endpoint",
        "blob_container",
        "blob_connection_string",
        "blob_auth",
        mode="before",
    )
    @classmethod
    def _blank_storage_setting_is_unset(cls, v: Any, info: ValidationInfo) -> Any:
        """Templated manifests often leave storage settings blank; blank means unset, not "" ."""
        if not isinstance(v, str):
            return v
        v = v.strip()
        if v:
            return v
        assert info.field_name is not None
        return cls.model_fields[info.field_name].get_default(call_default_factory=True)

    @field_validator("channels_deliver_all")
    @classmethod
    def _channel_ids(cls, v: str) -> str:
        for entry in (e.strip() for e in v.split(",")):
            if entry and not (entry.startswith("19:") and "@thread" in entry):
                raise ValueError(
                    f"{entry!r} is not a Teams channel id (19:…@thread.tacv2, as "
                    "GET /teams/{id}/channels lists them)"
                )
        return v

    @property
    def channels_delivering_all(self) -> frozenset[str]:
        return frozenset(e.strip() for e in self.channels_deliver_all.split(",") if e.strip())

    @field_validator("delegated_client_id", "delegated_token_key", mode="before")
    @classmethod
    def _blank_delegated_setting_is_unset(cls, v: Any) -> Any:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("delivery_ack_reaction", mode="before")
    @classmethod
    def _reaction_graph_takes(cls, v: Any) -> Any:
        if not isinstance(v, str) or not v.strip():
            return None if isinstance(v, str) else v
        return check_reaction_type(v.strip())  # its ValueError says what Graph takes

    @field_validator(
        "chat_poll_interval_s",
        "discovery_interval_s",
        "email_poll_interval_s",
        "permission_request_timeout_s",
        "chat_scan_interval_s",
        "chat_scan_relaxed_interval_s",
        "chat_scan_active_interval_s",
        "chat_sweep_interval_s",
    )
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be a positive number of seconds")
        return v

    @model_validator(mode="before")
    @classmethod
    def _active_scan_follows_a_shorter_quiet_one(cls, data: Any) -> Any:
        """Only the quiet interval set, shorter than the active default: scan at it throughout."""
        if (
            not isinstance(data, dict)
            or "chat_scan_active_interval_s" in data
            or "chat_scan_interval_s" not in data
        ):
            return data
        try:
            quiet = float(data["chat_scan_interval_s"])
        except (TypeError, ValueError):
            return data  # the field's own check names it
        if quiet < cls.model_fields["chat_scan_active_interval_s"].default:
            return {**data, "chat_scan_active_interval_s": quiet}
        return data

    @model_validator(mode="after")
    def _active_scan_not_slower(self) -> Settings:
        if self.chat_scan_active_interval_s <= self.chat_scan_interval_s:
            return self
        raise ValueError(
            f"ENTRABOT_CHAT_SCAN_ACTIVE_INTERVAL_S ({self.chat_scan_active_interval_s} s) must be at "
            f"most ENTRABOT_CHAT_SCAN_INTERVAL_S ({self.chat_scan_interval_s} s): the scan while chats "
            "are active is the faster one"
        )

    @model_validator(mode="after")
    def _sponsor_list_outlives_a_refresh(self) -> Settings:
        if self.sponsor_stale_after_s > self.sponsor_refresh_interval_s:
            return self
        raise ValueError(
            f"ENTRABOT_SPONSOR_STALE_AFTER_S ({self.sponsor_stale_after_s} s) must be longer than "
            f"ENTRABOT_SPONSOR_REFRESH_INTERVAL_S ({self.sponsor_refresh_interval_s} s), or the "
            "sponsors would stop counting between two good reads"
        )

    @field_validator("notification_client_state")
    @classmethod
    def _client_state_fits_graph(
        cls, v: SecretStr | None, info: ValidationInfo
    ) -> SecretStr | None:
        if v is None or not v.get_secret_value():
            if info.data.get("notification_url"):
                raise ValueError(
                    "required when ENTRABOT_NOTIFICATION_URL is set (a random secret of at most "
                    f"{MAX_CLIENT_STATE_CHARS} characters)"
                )
            return None
        if len(v.get_secret_value()) > MAX_CLIENT_STATE_CHARS:
            raise ValueError(
                f"must be at most {MAX_CLIENT_STATE_CHARS} characters (Graph's clientState limit)"
            )
        return v

    @property
    def lifecycle_url(self) -> str | None:
        return self.notification_lifecycle_url or self.notification_url


class SettingsError(ValueError):
    """A setting that cannot be parsed; the message names it and says what is wrong, on one line."""


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment and ``.env``; ``overrides`` that are not None win (CLI flags)."""
    try:
        settings = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        if not first.get("loc"):  # a rule between settings: its message names them
            raise SettingsError(str(first["msg"]).removeprefix("Value error, ")) from None
        raise SettingsError(f"ENTRABOT_{str(first['loc'][0]).upper()}: {first['msg']}") from None
    changes = {k: v for k, v in overrides.items() if v is not None}
    return settings.model_copy(update=changes) if changes else settings


def default_replica_id() -> str:
    """The pod name Kubernetes puts in HOSTNAME, else host and pid (several local replicas per host)."""
    return os.environ.get("HOSTNAME") or f"{socket.gethostname()}-{os.getpid()}"
