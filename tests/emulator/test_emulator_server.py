"""Running the emulator: the background server, the demo tenant, large seeds built in code, the
command line, and several replicas polling and posting at once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator import ThrottleBudget, build_seed, demo_seed_path, load_seed, start_emulator
from tests.emulator.emulator_testkit import Entra, bearer

REPO = Path(__file__).resolve().parents[2]


def test_running_emulator_exposes_the_url_layout(signing_key: rsa.RSAPrivateKey) -> None:
    with start_emulator(build_seed(chats=1), signing_key=signing_key) as emu:
        assert emu.graph_url == emu.base_url + "/v1.0" and emu.authority == emu.base_url
        assert emu.token_endpoint == f"{emu.base_url}/{emu.seed.tenant_id}/oauth2/v2.0/token"
        tenant = httpx.get(emu.admin_url + "/tenant").json()
        assert (
            tenant["agent_user_id"] == emu.seed.agent_user.id
            and tenant["graph_url"] == emu.graph_url
        )
        url = emu.base_url
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/_emulator/health", timeout=2)


def test_demo_seed_serves_the_sponsor_chats_and_mail(signing_key: rsa.RSAPrivateKey) -> None:
    seed = load_seed(demo_seed_path())
    assert [s.display_name for s in seed.sponsors] == ["Ada Lovelace"]
    assert (
        seed.blueprint.client_secrets
        and seed.blueprint.certificates
        and seed.blueprint.federated_credentials
    )
    with start_emulator(seed, signing_key=signing_key) as emu, httpx.Client(timeout=10) as http:
        entra = Entra(emu, http)
        t1 = entra.t1(client_secret=seed.blueprint.client_secrets[0]).json()["access_token"]
        t2 = entra.t2(t1).json()["access_token"]
        agent = bearer(entra.user_token(t1, t2).json()["access_token"])
        chats = http.get(emu.graph_url + "/me/chats", headers=agent).json()["value"]
        assert len(chats) == 3
        mail = http.get(emu.graph_url + "/me/mailFolders/inbox/messages", headers=agent).json()[
            "value"
        ]
        assert [m["subject"] for m in mail][0] == "QA sign-off"
        ada = seed.humans[0]
        token = http.post(
            emu.token_endpoint,
            data={
                "grant_type": "password",
                "client_id": seed.public_client.app_id,
                "username": ada.user_principal_name,
                "password": ada.password,
                "scope": "https://graph.microsoft.com/.default",
            },
        ).json()["access_token"]
        assert (
            http.get(emu.graph_url + "/me", headers=bearer(token)).json()["displayName"]
            == "Ada Lovelace"
        )


def test_discovery_of_a_thousand_chats_takes_twenty_pages(signing_key: rsa.RSAPrivateKey) -> None:
    seed = build_seed(chats=1000, throttle=ThrottleBudget.relaxed())
    with start_emulator(seed, signing_key=signing_key) as emu, httpx.Client(timeout=10) as http:
        agent = bearer(Entra(emu, http).agent_token())
        url: str | None = emu.graph_url + "/me/chats?$top=50"
        ids: list[str] = []
        pages = 0
        while url is not None and pages < 25:
            body = http.get(url, headers=agent).json()
            ids += [c["id"] for c in body["value"]]
            url = body.get("@odata.nextLink")
            pages += 1
        assert pages == 20 and len(set(ids)) == 1000


def test_replicas_polling_and_posting_concurrently_see_every_message_once(
    signing_key: rsa.RSAPrivateKey,
) -> None:
    seed = build_seed(chats=4, throttle=ThrottleBudget.relaxed())
    with start_emulator(seed, signing_key=signing_key) as emu, httpx.Client(timeout=10) as http:
        entra = Entra(emu, http)
        agent = bearer(entra.agent_token())
        ada = bearer(entra.human_token(seed.humans[0].user_principal_name))
        chat_ids = [c.id for c in seed.chats]
        posted: list[str] = []
        failures: list[str] = []
        stop = threading.Event()

        def poster() -> None:
            try:
                with httpx.Client(timeout=10) as client:
                    for n in range(40):
                        r = client.post(
                            f"{emu.graph_url}/chats/{chat_ids[n % 4]}/messages",
                            json={"body": {"content": f"m{n}"}},
                            headers=ada,
                        )
                        if r.status_code != 201:
                            failures.append(r.text)
                        else:
                            posted.append(r.json()["id"])
            finally:
                stop.set()

        def replica() -> None:
            with httpx.Client(timeout=10) as client:
                while not stop.is_set():
                    for chat in chat_ids:
                        r = client.get(
                            f"{emu.graph_url}/chats/{chat}/messages?$top=50", headers=agent
                        )
                        if r.status_code != 200:
                            failures.append(r.text)

        threads = [threading.Thread(target=poster)] + [
            threading.Thread(target=replica) for _ in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not failures
        seen = {
            m["id"]
            for chat in chat_ids
            for m in http.get(
                f"{emu.graph_url}/chats/{chat}/messages?$top=50", headers=agent
            ).json()["value"]
            if m["body"]["content"].startswith("m")
        }
        assert len(posted) == 40 and set(posted) <= seen


def test_python_dash_m_emulator_serves_a_seed_file(tmp_path: Path) -> None:
    seed_file = tmp_path / "seed.json"
    seed_file.write_text(build_seed(chats=1).model_dump_json())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulator", "--seed", str(seed_file), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.search(r"listening on (http://[\d.]+:\d+)", first)
        assert match, first
        assert httpx.get(match.group(1) + "/_emulator/health", timeout=5).json() == {"ok": True}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
