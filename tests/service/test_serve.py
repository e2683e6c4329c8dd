"""``entrabot-fleet serve`` as a real process: configuration errors, start-up line, probes, metrics, SIGTERM."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from emulator.seed import ThrottleBudget, build_seed
from emulator.server import RunningEmulator, start_emulator
from service import __version__
from service.devstack.azurite import Azurite
from service.devstack.emulator_env import agent_user_env, delegated_env
from service.devstack.fleet import DEV_TOKEN, LocalFleet, ReplicaProcess, free_port
from tests.mcp.server_fixture import eventually

pytestmark = pytest.mark.azurite


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with start_emulator(
        build_seed(chats=4, throttle=ThrottleBudget(chat_messages_per_s=500, other_per_s=500))
    ) as e:
        yield e


@pytest.fixture(scope="module")
def replica(
    azurite: Azurite, emulator: RunningEmulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReplicaProcess]:
    fleet = LocalFleet(
        emulator.seed,
        tmp_path_factory.mktemp("serve"),
        replicas=1,
        azurite=azurite,
        emulator=emulator,
    )
    fleet.start()
    [member] = fleet.members
    yield member
    member.terminate()


def clean_env(**extra: str) -> dict[str, str]:
    """The environment less every setting, listening on a free port: never the default 8080, which a
    developer's own replica (make serve) may hold while the suite runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENTRABOT_", "AZURE_"))}
    env["ENTRABOT_PORT"] = str(free_port())
    env.update(extra)
    return env


def run_serve(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_half_blob_configuration_exits_non_zero_with_one_line_and_never_reaches_graph(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    emulator.stats.reset()
    env = clean_env(
        **agent_user_env(emulator.seed, base_url=emulator.base_url),
        ENTRABOT_BLOB_ENDPOINT="http://127.0.0.1:1/devstoreaccount1",
        ENTRABOT_DATA_DIR=str(tmp_path / "d"),
    )
    result = run_serve(env, tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "ENTRABOT_BLOB_CONTAINER" in line and line.startswith("entrabot-fleet: ")
    assert emulator.stats.snapshot()["total"] == 0
    assert not (tmp_path / "d").exists()


def test_an_unreachable_blob_endpoint_stops_start_up_with_one_line_naming_it(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    from service.devstack.azurite import ACCOUNT, ACCOUNT_KEY

    closed = "http://127.0.0.1:9/" + ACCOUNT  # the discard port: nothing listens
    env = clean_env(
        **agent_user_env(emulator.seed, base_url=emulator.base_url),
        ENTRABOT_BLOB_ENDPOINT=closed,
        ENTRABOT_BLOB_CONTAINER="ledger",
        ENTRABOT_DATA_DIR=str(tmp_path / "d"),
        ENTRABOT_BLOB_CONNECTION_STRING=f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};"
        f"AccountKey={ACCOUNT_KEY};BlobEndpoint={closed};",
    )
    emulator.stats.reset()
    result = run_serve(env, tmp_path)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("entrabot-fleet: the replica did not start") and "127.0.0.1:9" in last
    assert ACCOUNT_KEY not in result.stderr
    assert (
        emulator.stats.snapshot()["total"] == 0
    )  # the store is checked before anything reaches Graph


def test_missing_agent_settings_name_the_variables_to_set(tmp_path: Path) -> None:
    env = clean_env(ENTRABOT_KEEP_MEMORY_LOCAL="true", ENTRABOT_DATA_DIR=str(tmp_path / "d"))
    result = run_serve(env, tmp_path)
    assert result.returncode == 2
    assert "ENTRABOT_TENANT_ID" in result.stderr and "ENTRABOT_BLUEPRINT_CLIENT_ID" in result.stderr


def test_a_sealing_key_that_is_not_a_key_stops_start_up_with_one_line_naming_it(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    secret = "not-a-key-but-a-secret-value"
    env = clean_env(
        **delegated_env(emulator.seed, base_url=emulator.base_url, token_key=secret),
        ENTRABOT_KEEP_MEMORY_LOCAL="true",
        ENTRABOT_DATA_DIR=str(tmp_path / "d"),
    )
    emulator.stats.reset()
    result = run_serve(env, tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("entrabot-fleet: ENTRABOT_DELEGATED_TOKEN_KEY ")
    assert "openssl rand -base64 32" in line and secret not in result.stdout + result.stderr
    assert emulator.stats.snapshot()["total"] == 0


def test_serving_on_a_public_address_without_auth_is_refused(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    env = clean_env(
        **agent_user_env(emulator.seed, base_url=emulator.base_url),
        ENTRABOT_KEEP_MEMORY_LOCAL="true",
        ENTRABOT_DATA_DIR=str(tmp_path / "d"),
        ENTRABOT_HOST="0.0.0.0",
    )
    result = run_serve(env, tmp_path)
    assert result.returncode == 2 and "ENTRABOT_MCP_STATIC_TOKENS" in result.stderr


def test_serve_says_where_it_listens_which_backend_and_how_many_chats(
    replica: ReplicaProcess,
) -> None:
    log = replica.log_path.read_text()
    [line] = [line for line in log.splitlines() if "listening on" in line]
    assert f"http://127.0.0.1:{replica.port}/mcp" in line
    assert "BlobBackend" in line and "watching 4 chats" in line
    assert "AccountKey" not in log and "blueprint-dev-secret" not in log


def test_health_and_readiness_probes_answer(replica: ReplicaProcess) -> None:
    health = httpx.get(f"{replica.base_url}/healthz")
    ready = httpx.get(f"{replica.base_url}/readyz")
    assert health.status_code == 200 and ready.status_code == 200
    body = ready.json()
    assert body["ready"] is True and body["watched_chats"] == 4
    assert set(body["loops"]) == {
        "chat_poll",
        "channel_poll",
        "email_poll",
        "discovery",
        "daily_summary",
        "graph_backoff",
        "host_deliveries",
        "inbox_hosts",
        "delivery_sweep",
    }


def test_metrics_name_every_spec_family_and_pass_promtool(replica: ReplicaProcess) -> None:
    text = httpx.get(f"{replica.base_url}/metrics").text
    for family in (
        "entrabot_claims_total",
        "entrabot_cas_conflicts_total",
        "entrabot_deliveries_total",
        "entrabot_delivery_latency_seconds",
        "entrabot_graph_requests_total",
        "entrabot_blob_operations_total",
        "entrabot_mcp_sessions",
        "entrabot_push_streams",
        "entrabot_watched_chats",
        "entrabot_loop_lag_seconds",
        "entrabot_email_hold",
    ):
        assert f"# TYPE {family}" in text
    assert 'entrabot_loop_up{loop="chat_poll"} 1.0' in text
    assert (
        f'entrabot_build_info{{python="{platform.python_version()}",version="{__version__}"}} 1.0'
        in text
    )
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool is not installed (make test installs Debian's prometheus when run as root)"
        )
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_metrics_count_mcp_requests_and_report_the_process_cpu_memory_and_fds(
    replica: ReplicaProcess,
) -> None:
    def refused_posts() -> float:
        text = httpx.get(f"{replica.base_url}/metrics").text
        line = next(
            (
                x
                for x in text.splitlines()
                if x.startswith('entrabot_mcp_http_requests_total{method="POST",status="4xx"}')
            ),
            None,
        )
        return float(line.split()[-1]) if line else 0.0

    before = refused_posts()
    assert (
        httpx.post(replica.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code
        == 401
    )
    assert refused_posts() == before + 1
    text = httpx.get(f"{replica.base_url}/metrics").text
    for family in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        'entrabot_mcp_http_request_duration_seconds_bucket{le="0.005",method="POST"}',
        "entrabot_mcp_http_in_flight",
    ):
        assert family in text, family


def test_mcp_refuses_requests_without_the_bearer_token(replica: ReplicaProcess) -> None:
    response = httpx.post(replica.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 401
    assert "resource_metadata=" in response.headers["www-authenticate"]


def test_sigterm_ends_a_replica_with_a_connected_host_by_itself_within_the_grace_period(
    azurite: Azurite, emulator: RunningEmulator, tmp_path: Path
) -> None:
    import asyncio

    from service.devstack.channel_host import ChannelHost

    fleet = LocalFleet(emulator.seed, tmp_path, replicas=1, azurite=azurite, emulator=emulator)
    fleet.start()
    [member] = fleet.members

    async def connected_then_term() -> float:
        stop = asyncio.Event()
        host = ChannelHost("h", [member.mcp_url], token=DEV_TOKEN)
        task = asyncio.create_task(host.run(stop))
        await eventually(lambda: host.connected_to, "the host to connect")
        # Kubernetes' grace is 30 s; the replica must exit by itself well inside it: 10 s, else SIGKILL.
        took = await asyncio.to_thread(member.terminate, 10.0)
        stop.set()
        await asyncio.wait_for(task, 10)
        return took

    took = asyncio.run(connected_then_term())
    # uvicorn re-raises the SIGTERM it handled once shutdown is done, so the status is -15, not -9.
    assert member.proc is not None and member.proc.returncode == -15, f"killed after {took:.1f} s"
    assert "replica stopped cleanly" in member.log_path.read_text()
    assert "Traceback" not in member.log_path.read_text()


@pytest.mark.parametrize("how", ["environment", "flag"])
def test_a_port_outside_1_to_65535_is_refused_with_one_line(how: str, tmp_path: Path) -> None:
    env = clean_env(ENTRABOT_KEEP_MEMORY_LOCAL="true", ENTRABOT_DATA_DIR=str(tmp_path / "d"))
    args = [sys.executable, "-m", "service.cli", "serve"]
    if how == "environment":
        env["ENTRABOT_PORT"] = "99999"  # uvicorn took it modulo 65536 and listened on 34463
    else:
        args += ["--port", "70000"]
    result = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "listening on" not in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert (
        ("ENTRABOT_PORT" in last)
        if how == "environment"
        else ("--port" in last and "1-65535" in last)
    )


def test_a_port_held_by_another_process_stops_start_up_before_anything_else_and_never_claims_to_listen(
    tmp_path: Path,
) -> None:
    import socket

    # An emulator of its own: the module's replicas keep scanning the shared one (the fleet's scanner
    # runs whether or not a host is connected), and this test counts every Graph call.
    with socket.socket() as holder, start_emulator(build_seed(chats=1)) as emulator:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = clean_env(
            **agent_user_env(emulator.seed, base_url=emulator.base_url),
            ENTRABOT_KEEP_MEMORY_LOCAL="true",
            ENTRABOT_DATA_DIR=str(tmp_path / "d"),
            ENTRABOT_PORT=str(port),
        )
        emulator.stats.reset()
        result = run_serve(env, tmp_path)
    assert result.returncode == 2
    assert "listening on" not in result.stdout
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("entrabot-fleet: cannot listen on ") and f"127.0.0.1:{port}" in line
    assert "ENTRABOT_PORT" in line
    assert emulator.stats.snapshot()["total"] == 0  # bound before the replica starts: no Graph call


def test_an_unreachable_graph_ends_start_up_with_one_line_naming_ENTRABOT_GRAPH_URL_without_retry_rounds(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    closed = "http://127.0.0.1:9/v1.0"  # the discard port: connection refused
    env = clean_env(
        **{
            **agent_user_env(emulator.seed, base_url=emulator.base_url),
            "ENTRABOT_GRAPH_URL": closed,
        },
        ENTRABOT_KEEP_MEMORY_LOCAL="true",
        ENTRABOT_DATA_DIR=str(tmp_path / "d"),
    )
    result = run_serve(env, tmp_path)
    assert result.returncode == 2
    assert "listening on" not in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("entrabot-fleet: the replica did not start")
        and f"ENTRABOT_GRAPH_URL ({closed})" in last
    )
    # Nobody answering is not worth rounds of start-up retries (they took 32 s): the client's own
    # few quick resends are all it gets.
    assert "retrying in" not in result.stderr


def test_a_graph_answering_5xx_at_start_gets_a_short_retry_then_one_line_naming_ENTRABOT_GRAPH_URL(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    env = clean_env(
        **agent_user_env(emulator.seed, base_url=emulator.base_url),
        ENTRABOT_KEEP_MEMORY_LOCAL="true",
        ENTRABOT_DATA_DIR=str(tmp_path / "d"),
    )
    admin = f"{emulator.base_url}/_emulator/faults"
    httpx.post(admin, json={"status": 503, "route_pattern": "^/v1.0/me$"}).raise_for_status()
    try:
        result = run_serve(env, tmp_path)
    finally:
        httpx.delete(admin).raise_for_status()
    assert result.returncode == 2
    assert "retrying in" in result.stderr  # Graph is there but busy: worth a short wait
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("entrabot-fleet: the replica did not start: GraphServerError")
    assert f"ENTRABOT_GRAPH_URL ({emulator.base_url}/v1.0)" in last


def blob_env(azurite: Azurite, container: str) -> dict[str, str]:
    return {
        "ENTRABOT_BLOB_ENDPOINT": azurite.blob_endpoint,
        "ENTRABOT_BLOB_CONTAINER": container,
        "ENTRABOT_BLOB_CONNECTION_STRING": azurite.connection_string,
    }


def test_a_start_up_that_fails_at_run_time_ends_with_one_line_naming_the_fix_and_no_traceback(
    emulator: RunningEmulator, azurite: Azurite, missing_container: str, tmp_path: Path
) -> None:
    env = clean_env(
        **agent_user_env(emulator.seed, base_url=emulator.base_url),
        **blob_env(azurite, missing_container),
    )
    result = run_serve(env, tmp_path)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("entrabot-fleet: the replica did not start: BackendUnavailableError")
    assert missing_container in last and "--create-container" in last
    assert "Traceback" not in result.stderr  # uvicorn's record of the lifespan's traceback is gone

    debug = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--debug"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert debug.returncode == 2
    # --debug keeps uvicorn's record of the lifespan's traceback (a JSON log line of its own)
    assert any('"uvicorn.error"' in x and "Traceback" in x for x in debug.stderr.splitlines())


def test_serve_with_create_container_creates_a_missing_container_and_starts(
    emulator: RunningEmulator, azurite: Azurite, missing_container: str, tmp_path: Path
) -> None:
    env = clean_env(
        **agent_user_env(emulator.seed, base_url=emulator.base_url),
        **blob_env(azurite, missing_container),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--create-container"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    watchdog = threading.Timer(120, proc.kill)  # a replica that never says it listens fails here
    watchdog.start()
    said = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # ends when the process does
            if "listening on" in line:
                said = line
                break
    finally:
        watchdog.cancel()
        proc.terminate()
        proc.wait(timeout=60)
    assert "BlobBackend" in said and missing_container in said, said
