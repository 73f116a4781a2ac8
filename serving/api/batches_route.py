"""``/v1/batches``: OpenAI's Batch API at the client's edge.

Where it sits: a client uploads a JSONL input file (``serving.api.files_route``), then makes a
batch of it here: its lines are checked (``serving.batches.read_input``: a wrong line fails the
batch, with every wrong line's error, as OpenAI's validation does) and kept in the store
(:attr:`serving.store.RouteStore.batches`), and the batch waits ``validating`` until a gateway's
``serving.batch_runner`` takes it. A client reads, lists and cancels its batches here and
downloads their output and error files from ``/v1/files``. A batch is its key's: another key,
or an anonymous caller, is told it does not exist.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from serving.api.openai_routes import read_body
from serving.api.owned import caller, json_answer, page
from serving.api.state import AppState
from serving.api.wire_errors import parse_wire
from serving.batches import (
    FAILED,
    VALIDATING,
    WINDOWS,
    BatchLine,
    BatchRecord,
    NewBatch,
    RequestCounts,
    batch_missing,
    model_of,
    new_batch_id,
    read_input,
)
from serving.errors import ClientError, NotFound
from serving.files import BATCH_INPUT, file_missing
from serving.responses_context import page_limit


async def batches(request: Request) -> Response:
    """``POST /v1/batches`` (make one) and ``GET /v1/batches`` (a page, newest first)."""
    state, owner = await caller(request)
    if request.method == "POST":
        return json_answer(await _create(request, state, owner))
    query = request.query_params
    limit = page_limit(query.get("limit"))
    found, more = await asyncio.to_thread(
        state.store.batches.page, owner, limit=limit, after=query.get("after")
    )
    return page([record.as_dict(counts) for record, counts in found], more)


async def one_batch(request: Request) -> Response:
    """``GET /v1/batches/{id}`` and ``POST /v1/batches/{id}/cancel``."""
    state, owner = await caller(request)
    parts = request.path_params["rest"].split("/")
    batch_id, method = parts[0], request.method
    store = state.store.batches
    if parts[1:] == ["cancel"] and method == "POST":
        found = await asyncio.to_thread(store.cancel, batch_id, owner)
        state.batches.poke()
    elif len(parts) == 1 and method == "GET":
        found = await asyncio.to_thread(store.get, batch_id, owner)
    else:
        raise NotFound(f"No route {method} /v1/batches/{request.path_params['rest']}", code="not_found")
    if found is None:
        raise batch_missing(batch_id)
    record, counts = found
    return json_answer(record.as_dict(counts))


async def _create(request: Request, state: AppState, owner: str) -> dict[str, Any]:
    body = await read_body(request.receive, dict(request.headers), state.max_body_bytes)
    wire = parse_wire(NewBatch, body)
    wire.check()
    found = await asyncio.to_thread(state.store.files.with_content, wire.input_file_id, owner)
    if found is None:
        raise file_missing(wire.input_file_id, "input_file_id")
    described, content = found
    if described.purpose != BATCH_INPUT:
        raise ClientError(
            f"input_file_id: file {wire.input_file_id} has purpose {described.purpose!r}; "
            f"a batch reads a file uploaded with purpose {BATCH_INPUT!r}",
            param="input_file_id",
        )
    settings = state.gateway.config.batches
    lines, errors, model = await asyncio.to_thread(  # a file of up to 100 MiB: off the event loop
        _read, content, wire.endpoint, settings.max_requests, state.max_body_bytes
    )
    now = time.time()
    record = BatchRecord(
        batch_id=new_batch_id(),
        owner=owner,
        endpoint=wire.endpoint,
        input_file_id=wire.input_file_id,
        completion_window=wire.completion_window,
        status=FAILED if errors else VALIDATING,
        created_at=now,
        expires_at=now + WINDOWS[wire.completion_window],
        metadata=wire.metadata,
        model=model,
        errors=errors or None,
        times={"failed_at": now} if errors else {},
    )
    await asyncio.to_thread(state.store.batches.create, record, lines)
    if errors:
        state.metrics.batches_ended.labels(FAILED).inc()
    state.batches.poke()
    return record.as_dict(RequestCounts(total=len(lines)))


def _read(
    content: bytes, endpoint: str, max_requests: int, max_body_bytes: int
) -> tuple[list[BatchLine], list[dict[str, Any]], str | None]:
    lines, errors = read_input(content, endpoint, max_requests=max_requests, max_body_bytes=max_body_bytes)
    return lines, errors, model_of(lines)
