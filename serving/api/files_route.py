"""``/v1/files``: OpenAI's Files API at the client's edge, for the Batch API's files.

Where it sits: beside ``/v1/batches`` (``serving.api.batches_route``), on the route store
(:attr:`serving.store.RouteStore.files`, in a worker thread). A client uploads a batch's input
file (``multipart/form-data``: ``file``, ``purpose`` batch, optionally ``expires_after``), lists,
reads and deletes its files, and downloads their content: the input it sent, or the output and
error files (``batch_output``) its batches wrote. A file is its key's: another key, or an
anonymous caller, is told it does not exist. The shapes and checks are ``serving.files``'.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response

from serving.api.owned import caller, json_answer, page
from serving.api.state import AppState
from serving.errors import ClientError, NotFound, PayloadTooLarge
from serving.files import (
    StoredFile,
    file_deleted,
    file_missing,
    listed_purpose,
    new_file_id,
    upload_name,
    upload_purpose,
)
from serving.responses_context import page_order

_FORM_SLACK = 64 * 1024  # a multipart body's boundaries and small fields, beyond the file itself
_MIN_EXPIRY_S, _MAX_EXPIRY_S = 3600, 30 * 86400  # OpenAI's bounds for expires_after[seconds]


async def files(request: Request) -> Response:
    """``POST /v1/files`` (an upload) and ``GET /v1/files`` (a page of the caller's files)."""
    state, owner = await caller(request)
    if request.method == "POST":
        return json_answer(await _upload(request, state, owner))
    query = request.query_params
    purpose = listed_purpose(query.get("purpose"))
    limit = _files_limit(query.get("limit"))
    order = page_order(query.get("order"))
    found, more = await asyncio.to_thread(
        state.store.files.page, owner, purpose=purpose, limit=limit, order=order, after=query.get("after")
    )
    return page([described.as_dict() for described in found], more)


async def one_file(request: Request) -> Response:
    """``GET /v1/files/{id}``, ``DELETE /v1/files/{id}``, ``GET /v1/files/{id}/content``."""
    state, owner = await caller(request)
    parts = request.path_params["rest"].split("/")
    file_id, method = parts[0], request.method
    store = state.store.files
    if parts[1:] == ["content"] and method == "GET":
        content = await asyncio.to_thread(store.content, file_id, owner)
        if content is None:
            raise file_missing(file_id)
        return Response(content, media_type="application/octet-stream")
    if len(parts) > 1 or method == "POST":
        raise NotFound(f"No route {method} /v1/files/{request.path_params['rest']}", code="not_found")
    if method == "DELETE":
        if not await asyncio.to_thread(store.drop, file_id, owner):
            raise file_missing(file_id)
        return json_answer(file_deleted(file_id))
    found = await asyncio.to_thread(store.get, file_id, owner)
    if found is None:
        raise file_missing(file_id)
    return json_answer(found.as_dict())


async def _upload(request: Request, state: AppState, owner: str) -> dict[str, Any]:
    settings = state.gateway.config.batches
    limit = settings.max_file_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit + _FORM_SLACK:
        raise PayloadTooLarge(f"file: larger than {limit} bytes (batches.max_file_bytes)", param="file")
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ClientError(
            "send the file as multipart/form-data, with the fields file and purpose", param="file"
        )
    async with request.form(max_files=1, max_fields=8) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ClientError("file: a file upload needs a file field", param="file")
        purpose = form.get("purpose")
        purpose = upload_purpose(purpose if isinstance(purpose, str) else None)
        lasts = _expiry(form.get("expires_after[anchor]"), form.get("expires_after[seconds]"))
        content = await upload.read(limit + 1)
        if len(content) > limit:
            raise PayloadTooLarge(f"file: larger than {limit} bytes (batches.max_file_bytes)", param="file")
        if not content:
            raise ClientError("file: the file is empty", param="file")
        now = time.time()
        expires_at = now + (lasts if lasts is not None else settings.file_retention_s)
        described = StoredFile(
            new_file_id(), owner, purpose, upload_name(upload.filename), len(content), now, expires_at
        )
    await asyncio.to_thread(state.store.files.add, described, content)
    return described.as_dict()


def _expiry(anchor: object, seconds: object) -> float | None:
    """``expires_after[anchor]`` (created_at) and ``expires_after[seconds]`` (an hour to 30 days)."""
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise ClientError("expires_after[anchor]: must be created_at", param="expires_after.anchor")
    try:
        lasts = int(seconds) if isinstance(seconds, str) else 0
    except ValueError:
        lasts = 0
    if not _MIN_EXPIRY_S <= lasts <= _MAX_EXPIRY_S:
        raise ClientError(
            f"expires_after[seconds]: a whole number from {_MIN_EXPIRY_S} to {_MAX_EXPIRY_S}",
            param="expires_after.seconds",
        )
    return float(lasts)


def _files_limit(given: str | None) -> int:
    """``GET /v1/files``' limit: 1 to 10,000, the default 10,000 (as OpenAI's)."""
    try:
        limit = int(given if given is not None else "10000")
    except ValueError:
        limit = 0
    if not 1 <= limit <= 10000:
        raise ClientError("limit: must be a whole number from 1 to 10000", param="limit")
    return limit
