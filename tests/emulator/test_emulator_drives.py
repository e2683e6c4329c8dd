"""The emulator's OneDrive as Graph documents it: shapes, the 302 download, simple and session uploads
with their limits, sharing links resolved through /shares, invites, recent files and the scopes each
route takes; and a file pasted into a chat as a reference attachment."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator import ManualClock, RunningEmulator, Seed, start_emulator
from emulator.drive_policy import DriveLimits
from emulator.drive_state import encode_sharing_url
from tests.emulator.emulator_testkit import Entra, assert_graph_error, bearer

UNIT = 320 * 1024


@pytest.fixture
def small_limits_emu(
    seed: Seed, clock: ManualClock, signing_key: rsa.RSAPrivateKey
) -> Iterator[RunningEmulator]:
    limits = DriveLimits(
        simple_upload_max_bytes=1000, fragment_max_bytes=2 * UNIT, upload_session_lifetime_s=60
    )
    with start_emulator(
        seed.model_copy(update={"drives": limits}), clock=clock, signing_key=signing_key
    ) as running:
        yield running


def _put_file(emu: RunningEmulator, http: httpx.Client, owner: str, name: str, data: bytes) -> Any:
    response = http.post(
        f"{emu.admin_url}/drives/{owner}/files",
        json={"name": name, "content_base64": base64.b64encode(data).decode()},
    )
    assert response.status_code == 201, response.text
    return response.json()


def _link(
    emu: RunningEmulator, http: httpx.Client, item_id: str, scope: str = "organization"
) -> str:
    response = http.post(f"{emu.admin_url}/drives/items/{item_id}/links", json={"scope": scope})
    assert response.status_code == 201, response.text
    return str(response.json()["webUrl"])


def test_the_drive_and_its_root_have_graphs_shapes(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    drive = http.get(emu.graph_url + "/me/drive", headers=agent).json()
    assert drive["driveType"] == "business" and drive["id"].startswith("b!")
    assert drive["@odata.context"].endswith("/$metadata#drives/$entity")
    root = http.get(emu.graph_url + "/me/drive/root", headers=agent).json()
    assert "root" in root and root["folder"] == {"childCount": 0}
    assert root["webUrl"].startswith("https://contoso-my.sharepoint.com/personal/entrabot_contoso_")


def test_a_simple_upload_creates_then_replaces_and_downloads_through_a_302(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str]
) -> None:
    url = emu.graph_url + "/me/drive/root:/notes/plan.txt:/content"
    created = http.put(url, content=b"one", headers={**agent, "Content-Type": "text/plain"})
    assert created.status_code == 201, created.text
    item = created.json()
    assert item["name"] == "plan.txt" and item["size"] == 3
    assert (
        item["file"]["mimeType"] == "text/plain"
        and item["parentReference"]["path"] == "/drive/root:/notes"
    )
    replaced = http.put(url, content=b"two!", headers=agent)
    assert replaced.status_code == 200 and replaced.json()["id"] == item["id"]
    assert replaced.json()["eTag"] != item["eTag"]
    answer = http.get(f"{emu.graph_url}/me/drive/items/{item['id']}/content", headers=agent)
    assert answer.status_code == 302
    location = answer.headers["location"]
    refused = http.get(location, headers=agent)
    assert_graph_error(refused, 403, "accessDenied")
    assert http.get(location).content == b"two!"


def test_a_simple_upload_over_the_limit_is_refused_with_the_limit_named(
    small_limits_emu: RunningEmulator, http: httpx.Client
) -> None:
    agent = bearer(Entra(small_limits_emu, http).agent_token())
    response = http.put(
        small_limits_emu.graph_url + "/me/drive/root:/big.bin:/content",
        content=b"x" * 1001,
        headers=agent,
    )
    body = assert_graph_error(response, 413, "requestTooLarge")
    assert "1000" in body["message"] and "createUploadSession" in body["message"]


def _session(emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], name: str) -> str:
    response = http.post(
        f"{emu.graph_url}/me/drive/root:/{name}:/createUploadSession",
        json={"item": {"@microsoft.graph.conflictBehavior": "replace"}},
        headers=agent,
    )
    assert response.status_code == 200, response.text
    assert response.json()["nextExpectedRanges"] == ["0-"]
    return str(response.json()["uploadUrl"])


def test_an_upload_session_takes_fragments_and_answers_the_item_at_the_end(
    small_limits_emu: RunningEmulator, http: httpx.Client, clock: ManualClock
) -> None:
    emu = small_limits_emu
    agent = bearer(Entra(emu, http).agent_token())
    data = (bytes(range(256)) * (UNIT * 3 // 256 + 4))[: UNIT * 3 + 1000]
    total = len(data)
    upload = _session(emu, http, agent, "big.bin")

    def put(start: int, end: int, **headers: str) -> httpx.Response:
        return http.put(
            upload,
            content=data[start : end + 1],
            headers={"Content-Range": f"bytes {start}-{end}/{total}", **headers},
        )

    assert_graph_error(
        put(0, UNIT - 1, Authorization=agent["Authorization"]), 401, "unauthenticated"
    )
    assert_graph_error(put(0, 1000), 400, "invalidRequest")  # not a multiple of 320 KiB
    first = put(0, UNIT - 1)
    assert first.status_code == 202 and first.json()["nextExpectedRanges"] == [
        f"{UNIT}-{total - 1}"
    ]
    assert_graph_error(put(0, UNIT - 1), 416, "invalidRange")
    status = http.get(upload).json()
    assert status["nextExpectedRanges"] == [f"{UNIT}-{total - 1}"]
    # The last fragment may be of any size, but under the fragment cap (this tenant's: 2 units).
    assert_graph_error(put(UNIT, total - 1), 400, "invalidRequest")
    assert put(UNIT, 2 * UNIT - 1).status_code == 202
    done = put(2 * UNIT, total - 1)
    assert done.status_code == 201, done.text
    item = done.json()
    assert item["size"] == total and item["name"] == "big.bin"
    location = http.get(f"{emu.graph_url}/me/drive/items/{item['id']}/content", headers=agent)
    assert http.get(location.headers["location"]).content == data
    # A session left alone expires.
    stale = _session(emu, http, agent, "stale.bin")
    clock.advance(61)
    assert_graph_error(http.get(stale), 404, "itemNotFound")


def test_a_sharing_link_of_the_tenant_resolves_and_others_do_not(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], seed: Seed
) -> None:
    ada = seed.humans[0]
    item = _put_file(emu, http, ada.id, "brief.txt", b"hello")
    shares = emu.graph_url + "/shares/{}/driveItem"
    # Ada's file by its own URL: the agent has no access yet.
    assert_graph_error(
        http.get(shares.format(encode_sharing_url(item["webUrl"])), headers=agent),
        403,
        "accessDenied",
    )
    link = _link(emu, http, item["id"])
    resolved = http.get(shares.format(encode_sharing_url(link)), headers=agent)
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["id"] == item["id"] and "@microsoft.graph.downloadUrl" in resolved.json()
    assert resolved.json()["@odata.context"].endswith("/driveItem/$entity")
    foreign = encode_sharing_url("https://fabrikam-my.sharepoint.com/:u:/g/personal/x/abc")
    assert_graph_error(http.get(shares.format(foreign), headers=agent), 404, "itemNotFound")
    assert_graph_error(http.get(shares.format("not-encoded"), headers=agent), 400, "invalidRequest")
    # The link's file reads through /drives/{id}/items/{id}/content, and is among the agent's recent files.
    content = http.get(
        f"{emu.graph_url}/drives/{item['parentReference']['driveId']}/items/{item['id']}/content",
        headers=agent,
    )
    assert content.status_code == 302
    recent = http.get(emu.graph_url + "/me/drive/recent", headers=agent).json()
    assert [r["remoteItem"]["id"] for r in recent["value"]] == [item["id"]]


def test_create_link_answers_the_existing_link_and_invite_grants_access(
    emu: RunningEmulator,
    http: httpx.Client,
    agent: dict[str, str],
    ada: dict[str, str],
    seed: Seed,
) -> None:
    item = http.put(
        emu.graph_url + "/me/drive/root:/out.txt:/content", content=b"x", headers=agent
    ).json()
    drive_id = item["parentReference"]["driveId"]
    url = f"{emu.graph_url}/drives/{drive_id}/items/{item['id']}"
    # A "users" link opens the file to nobody until people are invited.
    first = http.post(url + "/createLink", json={"type": "view", "scope": "users"}, headers=agent)
    again = http.post(url + "/createLink", json={"type": "view", "scope": "users"}, headers=agent)
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["link"]["webUrl"] == again.json()["link"]["webUrl"]
    assert first.json()["roles"] == ["read"]
    assert_graph_error(
        http.post(url + "/createLink", json={"type": "view", "scope": "anonymous"}, headers=agent),
        400,
        "invalidRequest",
    )
    assert_graph_error(http.get(url, headers=ada), 404, "itemNotFound")
    invited = http.post(
        url + "/invite",
        json={
            "recipients": [{"email": seed.humans[0].user_principal_name}],
            "roles": ["read"],
            "requireSignIn": True,
            "sendInvitation": False,
        },
        headers=agent,
    )
    assert invited.status_code == 200, invited.text
    assert invited.json()["value"][0]["grantedTo"]["user"]["id"] == seed.humans[0].id
    assert http.get(url, headers=ada).status_code == 200


def test_each_route_takes_the_scopes_its_page_names(
    emu: RunningEmulator, http: httpx.Client, entra: Entra, seed: Seed
) -> None:
    ada = seed.humans[0].user_principal_name
    read_only = bearer(entra.human_token(ada, scope="https://graph.microsoft.com/User.Read"))
    body = assert_graph_error(
        http.get(emu.graph_url + "/me/drive/root/children", headers=read_only), 403, "accessDenied"
    )
    assert "Files.Read" in body["message"]
    assert_graph_error(
        http.put(emu.graph_url + "/me/drive/root:/a.txt:/content", content=b"a", headers=read_only),
        403,
        "accessDenied",
    )


def test_a_person_pastes_a_file_into_a_chat_as_a_reference_attachment(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], seed: Seed
) -> None:
    ada = seed.humans[0]
    chat_id = seed.chats[0].id
    item = _put_file(emu, http, ada.id, "spec.txt", b"spec")
    link = _link(emu, http, item["id"])
    posted = http.post(
        f"{emu.admin_url}/chats/{chat_id}/messages",
        json={"from_user": ada.id, "content": "Have a look", "files": [link]},
    )
    assert posted.status_code == 201, posted.text
    message = http.get(
        f"{emu.graph_url}/chats/{chat_id}/messages/{posted.json()['id']}", headers=agent
    ).json()
    [attachment] = message["attachments"]
    assert attachment["contentType"] == "reference" and attachment["contentUrl"] == link
    assert attachment["name"] == "spec.txt" and attachment["content"] is None
    assert f'<attachment id="{attachment["id"]}"></attachment>' in message["body"]["content"]


def test_the_agent_posts_its_file_as_a_reference_with_the_etag_guid(
    emu: RunningEmulator, http: httpx.Client, agent: dict[str, str], seed: Seed
) -> None:
    item = http.put(
        emu.graph_url + "/me/drive/root:/r.txt:/content", content=b"r", headers=agent
    ).json()
    guid = item["eTag"].strip('"').split(",")[0].strip("{}").lower()
    chat_url = f"{emu.graph_url}/chats/{seed.chats[0].id}/messages"

    def post(attachment_id: str) -> httpx.Response:
        return http.post(
            chat_url,
            json={
                "body": {
                    "contentType": "html",
                    "content": f'<attachment id="{attachment_id}"></attachment>',
                },
                "attachments": [
                    {
                        "id": attachment_id,
                        "contentType": "reference",
                        "contentUrl": item["webUrl"],
                        "name": "r.txt",
                    }
                ],
            },
            headers=agent,
        )

    assert_graph_error(post("00000000-0000-0000-0000-000000000000"), 400, "BadRequest")
    sent = post(guid)
    assert sent.status_code == 201, sent.text
    assert sent.json()["attachments"][0]["contentUrl"] == item["webUrl"]
