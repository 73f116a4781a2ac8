"""Background responses' liveness: the gateway running one beats here; a silent one is failed.

Where it sits: ``serving.api.background_responses`` records a run when it starts, beats for all
its runs every second (``BackgroundRuns``' watch), and deletes the row when the run ends, whatever
the end. :meth:`serving.store.RouteStore.response` asks :func:`orphaned` of a response still
``queued`` or ``in_progress``: one whose run has not beaten for ``orphan_after_s`` (its gateway was
killed, or lost the store) is then failed (:func:`fail`), so a client polling it, or following its
stream, gets an end instead of waiting for ever. Nothing here touches the audit log.
"""

from __future__ import annotations

import orjson
from sqlalchemy import Connection, delete, insert, select, update

from serving.responses_context import StoredResponse
from serving.store.tables import background_runs, responses

GONE = {
    "code": "gateway_gone",
    "message": "the gateway running this background response stopped without finishing it; send it again",
}


def started(conn: Connection, response_id: str, now: float) -> None:
    conn.execute(insert(background_runs).values(response_id=response_id, heartbeat_at=now))


def beat(conn: Connection, response_ids: list[str], now: float) -> None:
    conn.execute(
        update(background_runs)
        .where(background_runs.c.response_id.in_(response_ids))
        .values(heartbeat_at=now)
    )


def ended(conn: Connection, response_id: str) -> None:
    conn.execute(delete(background_runs).where(background_runs.c.response_id == response_id))


def orphaned(conn: Connection, found: StoredResponse, now: float, after_s: float) -> bool:
    """Whether a running response's run has been silent for ``after_s`` (no row: since it was
    made, as a gateway killed between storing it and recording its run leaves it)."""
    row = conn.execute(
        select(background_runs.c.heartbeat_at).where(background_runs.c.response_id == found.response_id)
    ).first()
    last = found.created_at if row is None else row.heartbeat_at
    return now - last >= after_s


def fail(conn: Connection, found: StoredResponse) -> StoredResponse:
    """The response failed (``gateway_gone``), its run's row gone."""
    ended_ = {**found.response, "status": "failed", "error": GONE}
    conn.execute(
        update(responses)
        .where(responses.c.id == found.response_id)
        .values(response=orjson.dumps(ended_).decode())
    )
    ended(conn, found.response_id)
    return StoredResponse(
        found.response_id, found.owner, found.created_at, ended_, found.input_items, found.context
    )
