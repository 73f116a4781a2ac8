"""Stored Responses API answers: keep, fetch and delete, each only by the key that stored it.

On the request path of ``/v1/responses`` (through :class:`serving.store.RouteStore`, in a
worker thread): an answer is written before it is returned, so a follow-up naming it as
``previous_response_id`` finds it at once, from any gateway sharing the store. Every write
first deletes the expired answers; a read never sees one. Nothing here touches the audit log:
route pollers do not wake for these writes.
"""

from __future__ import annotations

import orjson
from sqlalchemy import Connection, delete, insert, select

from serving.responses_context import StoredResponse
from serving.store.tables import responses


def keep(conn: Connection, record: StoredResponse, expires_at: float) -> None:
    conn.execute(delete(responses).where(responses.c.expires_at <= record.created_at))
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
    return bool(done.rowcount)
