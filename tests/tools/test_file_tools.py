"""The file tools through the MCP tool interface, against the emulator over HTTP: a link pasted into a
chat resolves and reads (enveloped), sizes and types are bounded with clear refusals, uploads go simple
or through a session that resumes after a failed fragment, sharing needs a sponsor's ask, and a missing
Files permission says so."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from emulator.drive_policy import DriveLimits
from emulator.server import RunningEmulator, start_emulator
from tests.tools.envelope_checks import ATTACK, assert_one_envelope
from tests.tools.tool_world import SEED, ToolWorld, tool_world

UNIT = 320 * 1024


async def _shared(world: ToolWorld, owner: str, name: str, data: bytes) -> dict[str, Any]:
    """A file in ``owner``'s OneDrive with an organization-wide link to it."""
    item = await world.admin(
        f"drives/{world.user(owner).id}/files",
        {"name": name, "content_base64": base64.b64encode(data).decode()},
    )
    link = await world.admin(f"drives/items/{item['id']}/links", {"scope": "organization"})
    return {**item, "link": link["webUrl"]}


async def _pasted_link(world: ToolWorld, name: str, data: bytes) -> str:
    """Grace pastes her file into group chat 1; the link as the message's attachment carries it."""
    shared = await _shared(world, "Grace", name, data)
    chat = world.chat(1)
    message_id = await world.inject(chat, "Grace", "Here it is", files=[shared["link"]])
    read = await world.ok("read_teams_messages", {"chat_id": chat})
    assert any(m["message_id"] == message_id for m in read["messages"])
    message = await world.deps.graph.messages.get_chat_message(chat, message_id)
    [attachment] = [a for a in message.attachments if a.content_type == "reference"]
    assert attachment.content_url is not None
    return attachment.content_url


def _docx(*paragraphs: str) -> bytes:
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "owner", "Grace"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


async def test_a_word_file_pasted_into_a_chat_resolves_and_reads_inside_an_envelope(
    world: ToolWorld,
) -> None:
    url = await _pasted_link(world, "plan.docx", _docx("Quarterly plan", ATTACK))
    info = await world.ok("resolve_file_url", {"url": url})
    assert info["name"] == "plan.docx" and info["last_modified_by"] == "Grace Hopper"
    assert info["mime_type"].endswith("wordprocessingml.document") and info["size_bytes"] > 0
    read = await world.ok("read_file", {"url": url})
    assert_one_envelope(read["text"], "teams")
    assert 'sender="Grace Hopper"' in read["text"]
    assert "Quarterly plan" in read["text"] and "owner | Grace" in read["text"]
    assert read["truncated"] is False


async def test_a_text_file_reads_by_its_link_and_by_its_ids(world: ToolWorld) -> None:
    url = await _pasted_link(world, "notes.md", b"# Notes\n\nship friday\n")
    by_link = await world.ok("read_file", {"url": url})
    info = by_link["file"]
    by_ids = await world.ok("read_file", {"item_id": info["item_id"], "drive_id": info["drive_id"]})
    assert by_ids["text"] == by_link["text"] and "ship friday" in by_link["text"]
    recent = await world.ok("list_recent_files", {"limit": 5})
    assert [f["name"] for f in recent["files"]] == ["notes.md"]


async def test_a_file_over_the_size_bound_is_refused_naming_size_and_bound(
    emu: RunningEmulator, tmp_path: Path
) -> None:
    async with tool_world(emu, tmp_path, file_read_max_bytes=2048) as world:
        url = await _pasted_link(world, "big.txt", b"x" * 5000)
        text = await world.error("read_file", {"url": url})
    assert "5,000 bytes" in text and "2,048 bytes" in text
    assert "ENTRABOT_FILE_READ_MAX_BYTES" in text


async def test_a_type_it_cannot_read_is_refused_naming_the_types_it_reads(
    world: ToolWorld,
) -> None:
    url = await _pasted_link(world, "photo.png", b"\x89PNG....")
    text = await world.error("read_file", {"url": url})
    assert "image/png" in text and "Word (.docx)" in text and "Markdown" in text


async def test_a_link_of_another_tenant_is_not_found(world: ToolWorld) -> None:
    text = await world.error(
        "resolve_file_url", {"url": "https://fabrikam-my.sharepoint.com/:u:/g/personal/x/abc"}
    )
    assert "not found" in text


async def test_a_text_file_written_reads_back(world: ToolWorld) -> None:
    written = await world.ok("write_text_file", {"path": "notes/summary.md", "text": "done ✓"})
    assert written["upload"] == "simple" and written["file"]["name"] == "summary.md"
    read = await world.ok("read_file", {"item_id": written["file"]["item_id"]})
    assert "done ✓" in read["text"] and read["characters"] == len("done ✓")


@pytest.fixture
def small_upload_emu(signing_key: rsa.RSAPrivateKey) -> Iterator[RunningEmulator]:
    """A tenant whose simple upload takes 1,000 bytes at most."""
    seed = SEED.model_copy(update={"drives": DriveLimits(simple_upload_max_bytes=1000)})
    with start_emulator(seed, signing_key=signing_key) as running:
        yield running


async def test_an_upload_beyond_the_simple_size_goes_through_a_session(
    small_upload_emu: RunningEmulator, tmp_path: Path
) -> None:
    data = bytes(range(256)) * (UNIT * 2 // 256) + b"tail"
    async with tool_world(small_upload_emu, tmp_path, file_simple_upload_max_bytes=1024) as world:
        small = await world.ok(
            "upload_file",
            {"path": "a.bin", "content_base64": base64.b64encode(b"a" * 900).decode()},
        )
        large = await world.ok(
            "upload_file", {"path": "b.bin", "content_base64": base64.b64encode(data).decode()}
        )
        stored = await world.deps.graph.files.download(
            large["file"]["drive_id"], large["file"]["item_id"], max_bytes=len(data)
        )
        text = await world.error("upload_file", {"path": "c.bin", "content_base64": "not base64!"})
    assert small["upload"] == "simple" and large["upload"] == "session"
    assert large["file"]["size_bytes"] == len(data) and stored == data
    assert "not valid base64" in text


async def test_a_session_resumes_after_a_fragment_whose_answer_was_lost(
    small_upload_emu: RunningEmulator, tmp_path: Path
) -> None:
    data = b"z" * (UNIT * 3 + 17)
    async with tool_world(small_upload_emu, tmp_path) as world:
        # The second fragment lands, but its answer is a 503: re-sending it would overlap (416); the
        # session's nextExpectedRanges say where to go on.
        await world.admin(
            "faults",
            {
                "route_pattern": "^/_drive_upload/",
                "method": "PUT",
                "status": 503,
                "after_commit": True,
                "count": 1,
            },
        )
        item = await world.deps.graph.files.upload_large("resumed.bin", data, fragment_bytes=UNIT)
        stored = await world.deps.graph.files.download(
            item.drive_id or "", item.item_id, max_bytes=len(data)
        )
    assert item.size == len(data) and stored == data


async def test_sharing_a_file_needs_a_sponsors_ask_in_that_chat(world: ToolWorld) -> None:
    written = await world.ok("write_text_file", {"path": "report.txt", "text": "numbers"})
    chat = world.chat(1)
    graces_ask = await world.inject(chat, "Grace", "Please share the report here")
    args = {"chat_id": chat, "item_id": written["file"]["item_id"]}
    refused = await world.error("share_file", {**args, "requested_by_message_id": graces_ask})
    assert "Only a sponsor of the agent may ask" in refused
    adas_ask = await world.inject(chat, "Ada", "Please share the report here")
    shared = await world.ok(
        "share_file", {**args, "requested_by_message_id": adas_ask, "message": "The report"}
    )
    assert shared["requested_by"] == world.user("Ada").id
    posted = await world.deps.graph.messages.get_chat_message(chat, shared["message_id"])
    [attachment] = posted.attachments
    assert (
        attachment.content_type == "reference"
        and attachment.content_url == written["file"]["web_url"]
    )
    assert shared["link"] in posted.body.content
    # Grace can open the link the chat got.
    grace_item = await world.ok("resolve_file_url", {"url": shared["link"]})
    assert grace_item["item_id"] == written["file"]["item_id"]


async def test_add_file_comment_says_graph_has_no_such_api(world: ToolWorld) -> None:
    text = await world.error("add_file_comment", {"url": "https://x", "comment": "LGTM"})
    assert "no comments API for drive items" in text and "send_teams_message" in text


@pytest.fixture
def no_files_emu(signing_key: rsa.RSAPrivateKey) -> Iterator[RunningEmulator]:
    """A tenant where the agent identity was never consented any Files permission."""
    identity = SEED.agent_identity
    scopes = tuple(s for s in identity.delegated_scopes if not s.startswith("Files."))
    seed = SEED.model_copy(
        update={"agent_identities": (identity.model_copy(update={"delegated_scopes": scopes}),)}
    )
    with start_emulator(seed, signing_key=signing_key) as running:
        yield running


async def test_a_missing_files_permission_is_a_clear_tool_error(
    no_files_emu: RunningEmulator, tmp_path: Path
) -> None:
    async with tool_world(no_files_emu, tmp_path) as world:
        text = await world.error("list_recent_files", {})
    assert "lacks a Files permission" in text and "administrator must consent" in text
