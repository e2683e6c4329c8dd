"""The npm Azurite keeps its blobs on disk, never in memory: in memory, its 10-minute blob GC stops it
answering for tens of seconds once it has taken many writes (service/devstack/azurite.py says what was
measured). Started without a location it gets a folder of its own, removed when it stops."""

from __future__ import annotations

from pathlib import Path

from azure.storage.blob import BlobServiceClient

from service.devstack.azurite import Azurite, start_azurite
from service.devstack.dev_environment import DevstackSettings

NPM = DevstackSettings(azurite="npm")
BLOB = b"x" * (1 << 20)


def _bytes_under(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _write_blob(azurite: Azurite) -> None:
    with BlobServiceClient.from_connection_string(azurite.connection_string) as service:
        service.create_container("location")
        service.get_blob_client("location", "one.bin").upload_blob(BLOB)


def test_an_azurite_started_without_a_location_keeps_blobs_in_a_folder_of_its_own_removed_when_it_stops() -> (
    None
):
    azurite = start_azurite(settings=NPM)
    try:
        folder = azurite.location
        assert folder is not None and folder.is_dir()
        before = _bytes_under(folder)
        _write_blob(azurite)
        assert _bytes_under(folder) - before >= len(BLOB), "the blob's bytes are not on disk"
    finally:
        azurite.stop()
    assert not folder.exists()


def test_a_location_the_caller_names_is_used_and_kept(tmp_path: Path) -> None:
    folder = tmp_path / "azurite"
    folder.mkdir()
    azurite = start_azurite(location=folder, settings=NPM)
    try:
        assert azurite.location == folder
        _write_blob(azurite)
    finally:
        azurite.stop()
    assert _bytes_under(folder) >= len(BLOB)
