"""Files API objects: what ``/v1/files`` keeps and lists, as OpenAI shapes them (pure).

Where it sits: ``serving.api.files_route`` reads an upload and answers with these shapes;
``serving.store.files`` keeps the bytes; a batch (``serving.batches``) reads its input file
here and writes its output and error files back as ``batch_output``. A file belongs to the key
that uploaded it (or whose batch wrote it): any other caller is told it does not exist.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from serving.errors import ClientError, NotFound

BATCH_INPUT = "batch"
BATCH_OUTPUT = "batch_output"
# What a client may upload: the gateway has one use for files, the Batch API's input.
UPLOAD_PURPOSES = (BATCH_INPUT,)
LISTED_PURPOSES = (BATCH_INPUT, BATCH_OUTPUT)


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A kept file's description (its bytes are read apart: ``FileStore.content``)."""

    file_id: str
    owner: str
    purpose: str
    filename: str
    size: int
    created_at: float
    expires_at: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.file_id,
            "object": "file",
            "bytes": self.size,
            "created_at": int(self.created_at),
            "expires_at": None if self.expires_at is None else int(self.expires_at),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


def new_file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


def upload_purpose(given: str | None) -> str:
    """An upload's ``purpose`` form field, refused (400) unless the gateway has a use for it."""
    if not given:
        raise ClientError("purpose: a file upload needs a purpose (batch)", param="purpose")
    if given not in UPLOAD_PURPOSES:
        raise ClientError(
            f"purpose: {given!r} is not supported here; this gateway keeps files for the "
            f"Batch API only (purpose {BATCH_INPUT!r})",
            param="purpose",
            code="unsupported_value",
        )
    return given


def listed_purpose(given: str | None) -> str | None:
    """``GET /v1/files?purpose=…``: None (every purpose) or one the gateway keeps."""
    if given is None or given in LISTED_PURPOSES:
        return given
    raise ClientError(f"purpose: must be one of {', '.join(LISTED_PURPOSES)}", param="purpose")


def upload_name(given: str | None) -> str:
    """The file's name as the client sent it, without any folders (a name is a label here)."""
    name = (given or "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    return name[:255] or "upload.jsonl"


def file_missing(file_id: str, param: str = "file_id") -> NotFound:
    return NotFound(f"No such File object: {file_id}", param=param, code="file_not_found")


def file_deleted(file_id: str) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "deleted": True}
