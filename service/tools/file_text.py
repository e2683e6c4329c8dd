"""The text of a file read_file returns: plain text, Markdown, CSV and JSON as they are (UTF-8, a BOM
dropped, undecodable bytes replaced), Word .docx through python-docx (paragraphs, then each table's rows
with cells separated by " | "). Which of these a file is comes from its name, then its MIME type."""

from __future__ import annotations

import io
import zipfile
from enum import Enum

import docx
from docx.opc.exceptions import PackageNotFoundError


class FileKind(str, Enum):
    TEXT = "text"
    MARKDOWN = "markdown"
    CSV = "csv"
    JSON = "json"
    DOCX = "docx"


READABLE = "plain text (.txt), Markdown (.md), CSV (.csv), JSON (.json) and Word (.docx)"
_BY_EXTENSION = {
    "txt": FileKind.TEXT,
    "text": FileKind.TEXT,
    "log": FileKind.TEXT,
    "md": FileKind.MARKDOWN,
    "markdown": FileKind.MARKDOWN,
    "csv": FileKind.CSV,
    "json": FileKind.JSON,
    "docx": FileKind.DOCX,
}
_BY_MIME = {
    "text/plain": FileKind.TEXT,
    "text/markdown": FileKind.MARKDOWN,
    "text/csv": FileKind.CSV,
    "application/json": FileKind.JSON,
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": FileKind.DOCX,
}


class UnreadableFile(Exception):
    """The bytes are not the kind the name says (a .docx that is no Word package)."""


def kind_of(name: str, mime_type: str | None) -> FileKind | None:
    """The kind read_file reads, or None for any other file."""
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    found = _BY_EXTENSION.get(extension)
    if found is None and mime_type:
        found = _BY_MIME.get(mime_type.split(";")[0].strip().lower())
    return found


def text_of(data: bytes, kind: FileKind) -> str:
    if kind is FileKind.DOCX:
        return _docx_text(data)
    return data.decode("utf-8-sig", errors="replace")


def _docx_text(data: bytes) -> str:
    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError):
        raise UnreadableFile("the file is named .docx but is not a Word document") from None
    lines = [p.text for p in document.paragraphs]
    for table in document.tables:
        lines.append("")
        lines.extend(" | ".join(cell.text for cell in row.cells) for row in table.rows)
    return "\n".join(lines).strip()
