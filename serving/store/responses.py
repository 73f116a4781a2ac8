"""Stored Responses API answers: keep, fetch and delete, each only by the key that stored it.

On the request path of ``/v1/responses`` (through :class:`serving.store.RouteStore`, in a
worker thread): an answer is written before it is returned, so a follow-up naming it as
``previous_response_id`` finds it at once, from any gateway sharing the store. Every write
first deletes the expired answers; a read never sees one. Nothing here touches the audit log:
route pollers do not wake for these writes.
"""

from __future__ import annotations

import orjson
from sqlalchemy import Connection, delete, insert, select, update

from serving.responses_context import StoredResponse
from serving.store.background_runs import GONE
from serving.store.response_events import drop as drop_events
from serving.store.tables import responses

RUNNING = ("queued", "in_progress")  # a background response's states before its end


def keep(conn: Connection, record: StoredResponse, expires_at: float, *, replacing: bool = False) -> bool:
    """Write ``record``, in place of an earlier state of the same response (a background one's
    ``queued`` object). False, and nothing written, when that was ended by someone else
    (cancelled, or failed for its silent gateway: both are final, since a client told either
    may have sent the request again), or, ``replacing``, when there is none (deleted meanwhile)."""
    conn.execute(delete(responses).where(responses.c.expires_at <= record.created_at))
    earlier = conn.execute(select(responses.c.response).where(responses.c.id == record.response_id)).first()
    if earlier is None and replacing:
        return False
    if earlier is not None:
        if _ended_elsewhere(orjson.loads(earlier.response)):
            return False
        conn.execute(delete(responses).where(responses.c.id == record.response_id))
    conn.execute(
        insert(responses).values(
            id=record.response_id,
            owner=record.owner,
            created_at=record.created_at,
            expires_at=expires_at,
            response=orjson.dumps(record.response).decode(),
            input_items=orjson.dumps(record.input_items).decode(),
            context=orjson.dumps(record.context).decode(),
        )
    )
    return True


def _ended_elsewhere(response: dict[str, object]) -> bool:
    error = response.get("error")
    gone = isinstance(error, dict) and error.get("code") == GONE["code"]
    return response.get("status") == "cancelled" or (response.get("status") == "failed" and gone)


def fetch(conn: Connection, response_id: str, owner: str, now: float) -> StoredResponse | None:
    row = conn.execute(
        select(responses).where(
            responses.c.id == response_id, responses.c.owner == owner, responses.c.expires_at > now
        )
    ).first()
    if row is None:
        return None
    return StoredResponse(
        row.id,
        row.owner,
        row.created_at,
        orjson.loads(row.response),
        orjson.loads(row.input_items),
        orjson.loads(row.context),
    )


def drop(conn: Connection, response_id: str, owner: str) -> bool:
    """Delete it; False when that key stored no such answer."""
    done = conn.execute(delete(responses).where(responses.c.id == response_id, responses.c.owner == owner))
    if done.rowcount:
        drop_events(conn, response_id)
    return bool(done.rowcount)


def cancel(conn: Connection, response_id: str, owner: str, now: float) -> StoredResponse | None:
    """Mark that key's running background response cancelled; the record as it now is (as it
    was, when it had already ended), or None when there is no such response."""
    found = fetch(conn, response_id, owner, now)
    if found is None or found.response.get("status") not in RUNNING:
        return found
    ended = {**found.response, "status": "cancelled"}
    conn.execute(
        update(responses).where(responses.c.id == response_id).values(response=orjson.dumps(ended).decode())
    )
    return StoredResponse(
        found.response_id, found.owner, found.created_at, ended, found.input_items, found.context
    )


def stopped(conn: Connection, response_ids: list[str]) -> list[str]:
    """Which of these responses were ended elsewhere (cancelled, failed for a silent gateway) or
    deleted: a gateway running them stops them."""
    rows = conn.execute(select(responses.c.id, responses.c.response).where(responses.c.id.in_(response_ids)))
    live = {row.id for row in rows if not _ended_elsewhere(orjson.loads(row.response))}
    return [response_id for response_id in response_ids if response_id not in live]
