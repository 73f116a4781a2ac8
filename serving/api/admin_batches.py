"""The admin API for Batch API batches: every key's batches, and a cancel for any of them.

Where it sits: beside ``/v1/batches`` (``serving.api.batches_route``), where a client sees and
cancels only its own key's batches. An operator who finds a batch taking the engine from live
traffic, or one made by a key that should not have, reads them all here (viewer role) and
cancels one (operator role) without the client's key; the cancel is in the audit log under the
operator's name, and stops the batch as the client's own cancel does, on whichever gateway
runs it. ``turnout batches`` (``serving.cli_batches``) is the command line of these endpoints.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from serving.api.admin_routes import _json, _principal
from serving.api.owned import page
from serving.api.state import AppState
from serving.auth import ANONYMOUS
from serving.batches import STATUSES, BatchRecord, RequestCounts, batch_missing
from serving.errors import ClientError
from serving.responses_context import page_limit


def _key_name(state: AppState, owner: str) -> str | None:
    """The name of the key that made a batch: None once that key is revoked."""
    if owner == ANONYMOUS.limit_key:
        return ANONYMOUS.name
    principal = state.access.keyring.owner(owner)
    return None if principal is None else principal.name


def _shown(state: AppState, record: BatchRecord, counts: RequestCounts) -> dict[str, Any]:
    return {**record.as_dict(counts), "key": _key_name(state, record.owner)}


async def list_batches(request: Request) -> Response:
    """``GET /admin/batches?status=&limit=&after=``: every key's batches, newest first."""
    state: AppState = request.app.state.turnout
    _principal(request, state, "viewer")
    query = request.query_params
    status = query.get("status") or None
    if status is not None and status not in STATUSES:
        raise ClientError(f"status must be one of {', '.join(STATUSES)}", param="status")
    found, more = await asyncio.to_thread(
        state.store.batches.page,
        None,
        limit=page_limit(query.get("limit")),
        after=query.get("after"),
        status=status,
    )
    return page([_shown(state, record, counts) for record, counts in found], more)


async def cancel_batch(request: Request) -> Response:
    """``POST /admin/batches/{batch_id}/cancel``: any key's batch, audited."""
    state: AppState = request.app.state.turnout
    actor = _principal(request, state, "operator")
    batch_id = request.path_params["batch_id"]

    def whose(record: BatchRecord) -> str:
        return f"key={_key_name(state, record.owner) or '(revoked)'}"

    cancelled = await asyncio.to_thread(state.store.batches.cancel, batch_id, None, actor=actor, detail=whose)
    if cancelled is None:
        raise batch_missing(batch_id)
    state.batches.poke()
    return _json(_shown(state, *cancelled))


def install(app: Any) -> None:
    """Register the batch admin endpoints on the app."""
    app.add_route("/admin/batches", list_batches, methods=["GET"])
    app.add_route("/admin/batches/{batch_id}/cancel", cancel_batch, methods=["POST"])
